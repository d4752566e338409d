"""The plan: the system and integrator of a run, chosen once, before compiling, for every entry point.

`plan` turns (a Lagrangian or a system, an integrator or None, the params) into a `Plan`;
`simulate`, `simulate_batch`, `fit` and `control` all call it, so they integrate the same step.
Integrators declare the `system_type` they integrate, `AutoIntegrator` chooses where none is
given, and a Lagrangian is checked for the form (2.2) of 002. The docs' composition page shows
what each system kind can run.
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax import lax

from ._adjoint import AbstractAdjoint, ReversibleAdjoint
from ._custom_types import Array, Float, Params
from ._force import AbstractForce, Force
from ._form_check import InertiaNotPositiveDefinite, check_lagrangian_form, lagrangian_form_result
from ._general_system import GeneralLagrangianSystem, check_tangent_inertia, tangent_inertia_is_positive_definite
from ._geometry import fixed_random_state
from ._hamiltonian import HamiltonianSystem
from ._integrators import AbstractAdaptiveIntegrator, AbstractIntegrator
from ._integrators.auto import AutoIntegrator
from ._results import RESULTS
from ._system import AbstractSystem, LagrangianSystem
from ._validation import (
    check_positive_parameters,
    declared_positive,
    initial_state_is_valid,
    names_missing_params_keys,
    parameters_are_finite,
    positive_parameters_hold,
)

_AUTO = AutoIntegrator()  # `integrator=None` (one instance: a Module costs ~10 µs to build)
# `integrator=None` of a run differentiated step by step (`control.Problem`, `fit`).
LINEARISED = AutoIntegrator(linearised=True)

# What each system kind asks of the model, for the error that refuses a pair.
_DESCRIPTIONS = {
    LagrangianSystem: "a Lagrangian of the form (2.2) (a constant inertia matrix M)",
    GeneralLagrangianSystem: "a GeneralLagrangianSystem (a regular Lagrangian L(q, q̇) of 001)",
    HamiltonianSystem: "a HamiltonianSystem (a Hamiltonian H(q, p) of 001 (21))",
}


class Plan(NamedTuple):
    """What a run integrates: the system, the integrator, and which checks move into the graph.

    A `NamedTuple` (a PyTree, `check_form` a static leaf under `filter_jit`) rather than an
    `equinox.Module`: every eager call of `simulate` builds one, at a fifth of a Module's cost.

    **Fields:**

    - `system`: the `AbstractSystem`, with its force and, for (2.2), the structure of M.
    - `integrator`: an integrator whose `system_type` admits `system` (never `AutoIntegrator`).
    - `check_form`: whether the form (2.2) is checked inside the computation, because the params
      were traced when the plan was made (`RESULTS.not_lagrangian_form`, or
      `RESULTS.inertia_not_positive_definite` for the form (2.2) with an M that is not).
    - `check_inertia`: whether the inertia of a `GeneralLagrangianSystem` is checked inside the
      computation, at the initial state, because it or the params were traced
      (`RESULTS.inertia_not_positive_definite`).
    """

    system: AbstractSystem
    integrator: AbstractIntegrator | AbstractAdaptiveIntegrator
    check_form: bool = False
    check_inertia: bool = False

    def check_options(self, *, adjoint: AbstractAdjoint, controls, policy) -> None:
        """Raise a `ValueError` if the integrator cannot take the force, controls or adjoint."""
        name = type(self.integrator).__name__
        adaptive = isinstance(self.integrator, AbstractAdaptiveIntegrator)
        if controls is not None:
            if self.system.force is None:
                raise ValueError("`controls` given without a `force` to apply them: pass force=... (see s2jax.forces)")
            if adaptive:
                raise ValueError(
                    f"{name} chooses its own steps, so it cannot hold controls over fixed steps; use a "
                    "fixed-step integrator (VariationalIntegrator, RungeKutta4, ...)."
                )
            if policy is not None and isinstance(adjoint, ReversibleAdjoint):
                raise ValueError(
                    "ReversibleAdjoint cannot take a feedback policy: u_k = policy(q_k, ω_k) is not known "
                    "when stepping back from step k + 1. Use DirectAdjoint or CheckpointedAdjoint."
                )
        if self.system.force_depends_on_velocity and not self.integrator.velocity_dependent_forces:
            raise ValueError(
                f"{name} cannot take a force that depends on ω; use VariationalIntegrator, or declare "
                "a force that ignores ω with s2jax.Force(fn, depends_on_velocity=False)."
            )
        if isinstance(adjoint, ReversibleAdjoint):
            if adaptive or not self.integrator.is_symmetric:
                raise ValueError(
                    f"ReversibleAdjoint needs a symmetric integrator (a step with −h undoing a step with "
                    f"h); {name} is not. Use DirectAdjoint or CheckpointedAdjoint."
                )
            if self.system.force_depends_on_velocity:
                raise ValueError(
                    "ReversibleAdjoint cannot take a force that depends on ω: such a force (damping) "
                    "makes the step irreversible. Use DirectAdjoint or CheckpointedAdjoint."
                )

    def initial_result(self, q0, omega0, params: Params, dt: Float[Array, ""]) -> RESULTS:
        """The in-graph checks of what is checked eagerly when it can be: the first result code.

        The form check of (2.2) costs O(1) gradients plus the n tangents of M, once per run; it
        is compiled in only when it could not run before compiling (`check_form`). A structure
        of M declared by the system (chain, diagonal) is checked on the actual M.
        """
        result = RESULTS.where(
            initial_state_is_valid(q0, omega0, dt), RESULTS.successful, RESULTS.invalid_initial_state
        )
        result = RESULTS.where(
            parameters_are_finite(params) | (result != RESULTS.successful), result, RESULTS.invalid_parameters
        )
        if self.check_form or self.check_inertia:
            # Codes have no derivative: nothing of these checks is differentiated under jax.grad.
            q0, omega0, params = jtu.tree_map(
                lambda x: lax.stop_gradient(x) if eqx.is_inexact_array(x) else x, (q0, omega0, params)
            )
        if self.check_form:
            form = lagrangian_form_result(self.system.lagrangian, q0, omega0, params)
            result = RESULTS.where(result == RESULTS.successful, form, result)
        if self.check_inertia:
            definite = tangent_inertia_is_positive_definite(self.system, q0, omega0, params)
            definite = definite | (result != RESULTS.successful)
            result = RESULTS.where(definite, result, RESULTS.inertia_not_positive_definite)
        positive = positive_parameters_hold(declared_positive(self.system), params) | (result != RESULTS.successful)
        result = RESULTS.where(positive, result, RESULTS.invalid_parameters)
        structure = getattr(self.system, "inertia_structure", None)
        if structure == "chain":
            chain = lax.stop_gradient(self.system.prepare(q0, params).inertia).is_chain()
            result = RESULTS.where(chain | (result != RESULTS.successful), result, RESULTS.inertia_not_chain)
        if self.integrator.requires_diagonal_inertia or structure == "diagonal":
            inertia = lax.stop_gradient(self.system.prepare(q0, params).inertia)
            diagonal = inertia.is_diagonal() | (result != RESULTS.successful)
            result = RESULTS.where(diagonal, result, RESULTS.inertia_not_diagonal)
        return result


@names_missing_params_keys
def plan(
    model,
    q0: Float[Array, "n 3"],
    omega0: Float[Array, "n 3"],
    params: Params,
    *,
    integrator: AbstractIntegrator | AbstractAdaptiveIntegrator | AutoIntegrator | None = None,
    force: AbstractForce | None = None,
) -> Plan:
    """The `Plan` of a run of `model` from (q0, ω0) with `params`, made before compiling.

    1. The system: `model` as it is if it is an `AbstractSystem` (its own force), else the
       `LagrangianSystem` of the Lagrangian `model` with `force` (a plain function is wrapped in
       `s2jax.Force`). A Lagrangian of (2.2) is also a general one: asked for an integrator of
       `GeneralLagrangianSystem`s, it runs as one.
    2. The form (2.2) of a `LagrangianSystem`, checked with concrete params (at (q0, ω0), or a
       fixed random state where the state is traced): a Lagrangian that fails it runs as a
       `GeneralLagrangianSystem` if the integrator takes one, else is an error; one of the form
       (2.2) whose M is not positive definite is an error (`InertiaNotPositiveDefinite`, naming
       the smallest eigenvalue); one that passes has the structure of its M checked if declared,
       else recognised (diagonal, chain, dense). With traced params the form is checked in the
       graph and, unless declared, the chain structure probed (`with_probed_structure`).
       A `GeneralLagrangianSystem` has ∂²L/∂q̇∂q̇ checked positive definite on the tangent spaces
       at (q0, ω0) (`check_tangent_inertia`), before compiling where all three are concrete, in
       the graph otherwise.
    3. The params: the keys the model declares positive (`s2jax.positive_parameters`) are
       checked after the inertia, before compiling where everything above was, in the graph
       otherwise (`RESULTS.invalid_parameters`). Traced params are passed through the model
       abstractly (nothing computed), so a key that `params` lacks is named before compiling.
    4. The integrator: `integrator.system_type` must admit the system (one generic check);
       None or `AutoIntegrator()` is `AutoIntegrator().select(system, structure)`, with the
       structure of M recognised before compiling, or, for traced params, "chain" where the
       system is declared or probed one (so that a chain runs the same integrator under
       `jax.jit` as eagerly); a diagonal M is then not assumed.

    **Raises:** `TypeError` for a model or integrator that is not one; `ValueError`, before
    compiling, for a pair that cannot run, saying why and what to use instead.
    """
    if integrator is None:
        integrator = _AUTO
    if not isinstance(integrator, (AbstractIntegrator, AbstractAdaptiveIntegrator, AutoIntegrator)):
        raise TypeError(f"`integrator` must be an s2jax integrator, got {integrator!r}")
    auto = isinstance(integrator, AutoIntegrator)
    system, given = _system(model, force)
    wanted = AbstractSystem if auto else integrator.system_type
    if isinstance(system, LagrangianSystem) and not issubclass(LagrangianSystem, wanted):
        if issubclass(GeneralLagrangianSystem, wanted):
            system = GeneralLagrangianSystem(system.lagrangian, system.force)
    _check_system_type(integrator, system, wanted)
    check_form = False
    structure = None
    if isinstance(system, LagrangianSystem):
        if _is_concrete(params):
            try:
                inertia = check_lagrangian_form(system.lagrangian, *_probe_state(q0, omega0), params)
            except InertiaNotPositiveDefinite:
                raise  # of the form (2.2): no integrator takes it, the general ones included
            except ValueError as error:
                if given or not issubclass(GeneralLagrangianSystem, wanted):
                    hint = (
                        "LagrangianSystem is for the form (2.2); use GeneralLagrangianSystem(lagrangian), which "
                        "takes any regular L." if given else
                        f"{type(integrator).__name__} needs that form; leave `integrator` out "
                        "(GeneralVariationalIntegrator then runs) or pass GeneralVariationalIntegrator()."
                    )
                    raise ValueError(f"{error}\n{hint}") from None
                system = GeneralLagrangianSystem(system.lagrangian, system.force)
            else:
                system = system.with_structure(inertia)
                structure = system.inertia_structure
                if not auto and integrator.requires_diagonal_inertia:
                    _check_diagonal(integrator, inertia)
        else:
            check_form = True
            system = system.with_probed_structure(q0.shape[0], params, q0.dtype)
            if system.inertia_structure == "chain":
                # Declared or probed, and checked on the actual M in the graph
                # (`RESULTS.inertia_not_chain`): a chain chooses as its concrete params would.
                structure = "chain"
    check_inertia = isinstance(system, GeneralLagrangianSystem) and not (
        _is_concrete((q0, omega0, params)) and check_tangent_inertia(system, q0, omega0, params)
    )
    if not _is_concrete(params):
        _evaluate_abstractly(system, q0, omega0, params)
    elif not (check_form or check_inertia):  # else in the graph, after the inertia, as here
        check_positive_parameters(declared_positive(system), params)
    if auto:
        integrator = integrator.select(system, structure, q0.shape[0])
    return Plan(system, integrator, check_form, check_inertia)


def _system(model, force) -> tuple[AbstractSystem, bool]:
    """The system of `model` and whether it was given as one."""
    if isinstance(model, AbstractSystem):
        if force is not None:
            raise ValueError(
                "`force` given with a system: a system carries its own force (e.g. "
                "LagrangianSystem(lagrangian, force)); pass it there, not to simulate."
            )
        return model, True
    if not callable(model):
        raise TypeError("`lagrangian` must be a function L(q, qdot, params) -> scalar or an s2jax.AbstractSystem")
    if force is not None and not isinstance(force, AbstractForce):
        if not callable(force):
            raise TypeError(f"`force` must be an s2jax force or a function f(t, q, omega, u, params); got {force!r}")
        force = Force(force)
    return LagrangianSystem(model, force), False


def _check_system_type(integrator, system, wanted) -> None:
    """The one compatibility check: the integrator's declared `system_type` admits the system."""
    if isinstance(system, wanted):
        return
    try:
        default = type(_AUTO.select(system)).__name__
    except ValueError:
        default = "no integrator by default"
    name = type(integrator).__name__
    raise ValueError(
        f"{name} needs {_DESCRIPTIONS.get(wanted, f'a {wanted.__name__}')}; a {type(system).__name__} runs "
        f"{default} or an integrator of the equations of motion (RungeKutta4, ...)."
    )


def _check_diagonal(integrator, inertia) -> None:
    inertia = np.asarray(inertia)
    off = inertia - np.diag(np.diag(inertia))
    if np.any(off != 0):
        i, j = np.argwhere(off != 0)[0]
        raise ValueError(
            f"{type(integrator).__name__} needs a diagonal inertia matrix, but M[{i}, {j}] = {inertia[i, j]}; "
            "use VariationalIntegrator."
        )


def _is_concrete(tree) -> bool:
    return not any(isinstance(x, jax.core.Tracer) for x in jtu.tree_leaves(tree))


def _evaluate_abstractly(system: AbstractSystem, q0, omega0, params) -> None:
    """Trace the system's energy at (q0, ω0) with `params`, computing nothing: where the params are
    traced the model is otherwise first called inside the computation, and an error of the user's
    (a key that `params` lacks) would surface there, far from its cause."""
    # params closed over, not passed: their static leaves (a tuple of index pairs) stay Python.
    jax.eval_shape(lambda q, w: system.energy(q, w, system.prepare(q, params)), q0, omega0)


def _probe_state(q0, omega0):
    """Where the form (2.2) is checked: (q0, ω0), or a fixed random state of the same shape where
    the state is traced (M of (2.2) does not depend on q, so the params alone decide)."""
    if _is_concrete((q0, omega0)):
        return q0, omega0
    q, omega = fixed_random_state(q0.shape[0], seed=0)
    with jax.ensure_compile_time_eval():  # a constant, even inside a user's jit
        return jnp.asarray(q, q0.dtype), jnp.asarray(omega, q0.dtype)

