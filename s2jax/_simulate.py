"""`simulate`: one jitted `lax.scan` over the steps of an integrator.

The loop is written once, here: `Loop` says what a step of the loop does (call the
integrator, freeze the state after a failure, record the failing step) over a named
`LoopState`; the adjoints of `_adjoint.py` only choose how the scan over steps is stored,
checkpointed or reversed for reverse-mode differentiation.
"""

import dataclasses
import math
import numbers
import sys
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax import lax

from ._adjoint import NO_FAILURE, AbstractAdjoint, ReversibleAdjoint, default_adjoint
from ._custom_types import Array, ArrayLike, Float, Int, Lagrangian, Params
from ._errors import SimulationError, error_if
from ._force import AbstractForce, Force
from ._form_check import check_lagrangian_form, lagrangian_form_is_valid
from ._general_system import GeneralLagrangianSystem
from ._geometry import random_state
from ._hamiltonian import HamiltonianSystem
from ._integrators import (
    AbstractAdaptiveIntegrator,
    AbstractIntegrator,
    Composition,
    DiscreteHamelIntegrator,
    ExplicitVariationalIntegrator,
    GeneralVariationalIntegrator,
    HamiltonianRattle,
    Rattle,
    StormerVerlet,
    VariationalIntegrator,
)
from ._integrators.base import IntegratorState, State
from ._integrators.default import default_integrator
from ._jit import filter_jit
from ._results import RESULTS
from ._structured_solve import is_chain, is_diagonal
from ._system import AbstractSystem, LagrangianSystem, SystemArgs
from ._validation import check_initial_state, check_parameters, initial_state_is_valid, parameters_are_finite


class Solution(eqx.Module):
    """The output of `simulate`.

    **Fields:**

    - `t`: the save times, shape (S,), S = num_steps // save_every + 1 (t = 0 included).
    - `q`, `omega`: the states at those times, shape (S, n, 3).
    - `result`: a `RESULTS` code; anything but `RESULTS.successful` means the simulation
      stopped early and the saved states after `failed_step` repeat the last good one.
    - `failed_step`: the index k of the first step k → k + 1 that failed, or −1.
    - `integrator`: the class name of the integrator that ran (static), e.g.
      "VariationalIntegrator" or "GeneralVariationalIntegrator".

    `print(sol.summary())` says in a few lines what happened (`repr(sol)` gives the shapes,
    not the arrays); `sol.save("run.npz", params=params)` writes it for numpy alone to read
    (`s2jax.io.save_solution`).
    """

    t: Float[Array, " S"]
    q: Float[Array, "S n 3"]
    omega: Float[Array, "S n 3"]
    result: RESULTS
    failed_step: Int[Array, ""]
    integrator: str = eqx.field(static=True)

    def summary(self, lagrangian: Lagrangian | None = None, params: Params | None = None) -> str:
        """A few lines on what the run did: the bodies, saved states and horizon; per batch
        member (under `jax.vmap` or `simulate_batch`) the result, the first failed step, the
        largest unit-length error max ||q_i| − 1| and tangency error max |q_i·ω_i| over the
        saved states; and, given `lagrangian` and `params` (shared by the batch), the energy
        drift max_k |E_k − E₀| (absolute and relative to |E₀|).

        **Returns:** the text; `print(sol.summary())` shows it.
        """
        from ._summary import summary

        return summary(self, lagrangian, params)

    def save(self, path, *, params: Params | None = None, metadata: dict | None = None) -> None:
        """`s2jax.io.save_solution(path, self, params=params, metadata=metadata)`."""
        from .io import save_solution

        save_solution(path, self, params=params, metadata=metadata)

    def __repr__(self) -> str:
        from ._summary import solution_repr

        return solution_repr(self)


class LoopState(eqx.Module):
    """What the loop carries from step to step.

    **Fields:** `y` = (q_k, ω_k); `state`, the integrator's own; `result`, the code so far;
    `failed_step`, the first failed step or −1; `step`, k, the steps attempted so far.
    """

    y: State
    state: IntegratorState
    result: RESULTS
    failed_step: Int[Array, ""]
    step: Int[Array, ""]


class LoopInputs(eqx.Module):
    """The inputs of the loop that derivatives flow to.

    **Fields:** `y0`; `params`, the inexact leaves of the model's params; `dt`; `controls`, the
    open-loop controls u_k, shape (num_steps, …), or None.
    """

    y0: State
    params: Params
    dt: Float[Array, ""]
    controls: Array | None = None


class Loop(eqx.Module):
    """One simulation's loop: `num_saves` blocks of `save_every` steps of `integrator`.

    t_k = k h is computed from the step count, not accumulated. A step that fails freezes
    the state and records its index; every later step is skipped the same way. Between saves
    the steps are lazy (`AbstractIntegrator.lazy_step`: the VI leaves its solve for ω to the
    saves) unless a feedback policy reads ω at every step.

    Controls are held over each step (zero-order hold): u_k is the k-th row of
    `LoopInputs.controls`, or `policy(t_k, q_k, ω_k, params)` sampled at the start of step k.
    They reach the system as `SystemArgs.control`, and from there the force.
    """

    integrator: AbstractIntegrator
    system: AbstractSystem
    static_params: Params
    policy: Callable | None
    num_saves: int = eqx.field(static=True)
    save_every: int = eqx.field(static=True)
    progress: bool = eqx.field(static=True)
    throw: bool = eqx.field(static=True)

    def args(self, inputs: LoopInputs) -> SystemArgs:
        return self.system.prepare(inputs.y0[0], eqx.combine(inputs.params, self.static_params))

    def integrator_init(self, y0: State, args: SystemArgs, dt: Float[Array, ""], controls) -> IntegratorState:
        """The integrator's initial state, with the control of step 0 (some methods evaluate the force)."""
        u0 = None if controls is None else controls[0]
        args = self.control(jnp.array(0), y0, args, dt, u0)
        return self.integrator.init(self.system, jnp.zeros((), dt.dtype), y0, args)

    def init(self, inputs: LoopInputs, args: SystemArgs, result0: RESULTS) -> LoopState:
        state = self.integrator_init(inputs.y0, args, inputs.dt, inputs.controls)
        failed0 = jnp.where(result0 == RESULTS.successful, NO_FAILURE, 0)
        return LoopState(inputs.y0, state, result0, failed0, jnp.array(0))

    def time(self, k: Int[Array, ""], dt: Float[Array, ""]) -> Float[Array, ""]:
        return k.astype(dt.dtype) * dt

    def advance(self, t0, dt, y, state, args, *, lazy=False):
        """The integrator's step from t0 by dt: `(y_next, state_next, result)`; with `lazy`,
        `AbstractIntegrator.lazy_step` (the adjoints' backward passes take full steps)."""
        take_step = self.integrator.lazy_step if lazy else self.integrator.step
        return take_step(self.system, t0, dt, y, args, state)

    @property
    def lazy(self) -> bool:
        """Whether the steps between saves are lazy (`AbstractIntegrator.lazy_step`): ω is read
        only at the saves, unless a feedback policy reads it at every step."""
        return self.policy is None

    def with_velocity(self, carry: LoopState, args: SystemArgs) -> LoopState:
        """`carry` with the ω of its y brought up to date after lazy steps."""
        if not self.lazy:
            return carry
        omega = self.integrator.velocity(self.system, carry.y, args, carry.state)
        return dataclasses.replace(carry, y=(carry.y[0], omega))

    def control(self, k, y, args: SystemArgs, dt, u) -> SystemArgs:
        """`args` with the control of step k: the given u_k, or the policy's at (t_k, q_k, ω_k)."""
        if self.policy is not None:
            u = self.policy(self.time(k, dt), *y, args.params)
        return args if u is None else dataclasses.replace(args, control=u)

    def step(self, carry: LoopState, args: SystemArgs, dt: Float[Array, ""], u=None) -> LoopState:
        args = self.control(carry.step, carry.y, args, dt, u)
        y, state, result = self.advance(self.time(carry.step, dt), dt, carry.y, carry.state, args, lazy=self.lazy)
        running = carry.result == RESULTS.successful
        accept = running & (result == RESULTS.successful)
        y, state = jtu.tree_map(lambda new, old: jnp.where(accept, new, old), (y, state), (carry.y, carry.state))
        failed_step = jnp.where(running & ~accept, carry.step, carry.failed_step)
        result = RESULTS.where(running, result, carry.result)
        return LoopState(y, state, result, failed_step, carry.step + 1)

    def controls_by_save(self, controls):
        """The controls as (num_saves, save_every, …): the rows of each block between saves."""
        return jtu.tree_map(lambda u: u.reshape(self.num_saves, self.save_every, *u.shape[1:]), controls)

    def run(self, inputs: LoopInputs, result0: RESULTS, scan_steps: Callable) -> tuple[LoopState, State, object]:
        """The forward loop; `scan_steps(body, carry, xs, length)` runs `length` steps of
        `body(carry, x)`, x running over the leading axis of `xs` (the controls, or None), and
        returns `(carry, per_step)`: what it kept of each step (stacked), or None.

        **Returns:** the final `LoopState`, the states after each block, shape (num_saves, n, 3),
        and the `per_step` of every block, stacked (num_saves, save_every, …), or None.
        """
        args = self.args(inputs)
        on_save = _progress_hook(self.num_saves, self.save_every) if self.progress else None

        def save(carry, xs):
            index, controls = xs
            carry, per_step = scan_steps(
                lambda c, u: self.step(c, args, inputs.dt, u), carry, controls, self.save_every
            )
            carry = self.with_velocity(carry, args)
            if on_save is not None:
                on_save(index)
            return carry, (carry.y, per_step)

        xs = (jnp.arange(self.num_saves), self.controls_by_save(inputs.controls))
        final, (ys, per_step) = lax.scan(save, self.init(inputs, args, result0), xs)
        return final, ys, per_step


def simulate(
    lagrangian: Lagrangian | AbstractSystem,
    q0: Float[ArrayLike, "n 3"],
    omega0: Float[ArrayLike, "n 3"],
    params: Params,
    *,
    dt: float | Float[ArrayLike, ""],
    num_steps: int,
    integrator: AbstractIntegrator | AbstractAdaptiveIntegrator | None = None,
    force: AbstractForce | Callable | None = None,
    controls: Float[ArrayLike, "num_steps ..."] | Callable | None = None,
    save_every: int = 1,
    adjoint: AbstractAdjoint | None = None,
    throw: bool = True,
    progress: bool = False,
) -> Solution:
    """Simulate the system of `lagrangian` from (q0, ω0) for `num_steps` steps of size `dt`.

    The state is (q, ω) ∈ T(S²)ⁿ with q̇_i = ω_i × q_i and ω_i ⊥ q_i (002 (2.1)).

    **Which integrator runs** (`Solution.integrator` names it): with `integrator=None`, a
    Lagrangian of the form (2.2) (checked by `check_lagrangian_form` before compiling) runs a
    variational integrator of Lee–Leok–McClamroch 2009 (`default_integrator`): the explicit
    (3.17)–(3.18), `ExplicitVariationalIntegrator`, when M is diagonal, (3.10)–(3.13),
    `VariationalIntegrator`, otherwise; any other L (configuration-dependent inertia, terms
    linear in q̇, …) runs the `GeneralVariationalIntegrator` of the trapezoidal discrete
    Lagrangian on a `GeneralLagrangianSystem`. Where the form cannot be checked before compiling
    (params traced under `jax.jit`/`jax.vmap`), `VariationalIntegrator` runs and checks the
    form inside, returning `RESULTS.not_lagrangian_form` if it fails. An integrator built on (2.2)
    (`VariationalIntegrator`, `ExplicitVariationalIntegrator`, `Rattle`, `StormerVerlet`,
    `DiscreteHamelIntegrator`, their `Composition`s) asked for a non-(2.2) L is an error;
    one that needs only the equations of motion (Runge–Kutta, Lie group methods,
    `AdaptiveRungeKutta45`) runs on the `GeneralLagrangianSystem`.

    **Arguments:**

    - `lagrangian`: a pure function `L(q, qdot, params) -> scalar`, q and q̇ of shape (n, 3),
      of the form (2.2) ½ Σ M_ij q̇_i·q̇_j − V(q); or an `s2jax.AbstractSystem`, used as it is
      (its own force included: a system cannot be combined with `force=`, pass the force to
      the system instead).
    - `q0`, `omega0`: the initial state, shape (n, 3); |q_i| = 1 and q_i·ω_i = 0 to 1e-12
      (use `s2jax.project_tangent` on rounded data).
    - `params`: any PyTree. Float and array leaves are traced (new values do not
      recompile); other leaves (ints, strings, tuples of ints) are static.
    - `dt`: the step h > 0 (for `AdaptiveRungeKutta45`, the spacing of the output grid).
    - `num_steps`: the number of steps; the horizon is num_steps · dt.
    - `integrator`: None (default: chosen as above), a `VariationalIntegrator`,
      `GeneralVariationalIntegrator`, `ExplicitVariationalIntegrator`, another
      `AbstractIntegrator`, or `AdaptiveRungeKutta45`.
    - `force`: non-conservative generalized forces f(t, q, ω, u, params) -> (n, 3) of 001
      (10), an `s2jax.AbstractForce` or a plain function (taken to depend on ω; wrap it in
      `s2jax.Force(fn, depends_on_velocity=False)` if it does not). u is the control of the
      current step (None without `controls`). Ready forces are in `s2jax.forces`.
    - `controls`: the u passed to `force`, held over each step (zero-order hold): an array of
      shape (num_steps, …) whose k-th row u_k acts over step k (open loop), or a feedback
      policy `policy(t, q, omega, params) -> u` (a function or an `equinox.Module`, e.g. an
      MLP), sampled at the start of each step, u_k = policy(t_k, q_k, ω_k, params), as a
      digital controller does. (A feedback evaluated continuously, at every force evaluation,
      is a force: write it as one.) Gradients flow to the array, or to the policy's arrays.
    - `save_every`: save every k-th state; must divide `num_steps`.
    - `adjoint`: how reverse-mode differentiation stores the trajectory: `DirectAdjoint()`
      (every step's intermediates), `CheckpointedAdjoint(block_size)` (the state at block
      boundaries, memory ∝ √num_steps; the fastest reverse mode over long runs),
      `StepwiseAdjoint()` (the state before each step; any integrator and force) or
      `ReversibleAdjoint()` (memory independent of the number of steps; symmetric integrators
      and forces that do not depend on ω only). None (default): `DirectAdjoint()` below 500
      steps, `CheckpointedAdjoint()` from there on (`s2jax.default_adjoint`, which says why).
      The first two also serve forward mode (`jax.jvp`, `jax.jacfwd`).
    - `throw`: raise `SimulationError` (naming the step and, under `jax.vmap`, the batch
      index) if a step fails; with `throw=False` the failure is reported in `result`.
    - `progress`: say "compiling …" on stderr when compiling, then show a progress bar
      (from the first block of `save_every` steps; updated at most ~50 times, from the device).

    Bad input raises `ValueError` before anything is compiled: wrong shapes, non-finite
    values, |q_i| ≠ 1 or q_i·ω_i ≠ 0 beyond 1e-12 (naming the body), dt ≤ 0, a Lagrangian not
    of the form (2.2) for an integrator that needs it, a non-diagonal M for an integrator that
    needs a diagonal one, or a force the integrator or adjoint cannot take. Values that are
    traced (under `jax.jit` or `jax.vmap`) are checked inside the computation instead: a bad
    initial state gives `RESULTS.invalid_initial_state`, a non-diagonal M
    `RESULTS.inertia_not_diagonal`, a Lagrangian not of the form (2.2) on the (2.2) path
    `RESULTS.not_lagrangian_form`. A Lagrangian that is not regular (∂²L/∂q̇∂q̇ singular on
    the tangent spaces) makes the general integrator's Newton iteration fail at the first
    step, reported as a failure of step 0.

    **Returns:** a `Solution`.
    """
    num_steps = _positive_int(num_steps, "num_steps")
    if adjoint is None:
        adjoint = default_adjoint(num_steps)
    if not isinstance(adjoint, AbstractAdjoint):
        raise TypeError(f"`adjoint` must be an s2jax adjoint, got {adjoint!r}")
    if integrator is not None and not isinstance(integrator, (AbstractIntegrator, AbstractAdaptiveIntegrator)):
        raise TypeError(f"`integrator` must be an s2jax integrator, got {integrator!r}")
    if isinstance(lagrangian, AbstractSystem):
        if force is not None:
            raise ValueError(
                "`force` given with a system: a system carries its own force (e.g. "
                "LagrangianSystem(lagrangian, force)); pass it there, not to simulate."
            )
        system = lagrangian
        force = getattr(system, "force", None)
        system_given = True
    elif not callable(lagrangian):
        raise TypeError("`lagrangian` must be a function L(q, qdot, params) -> scalar or an s2jax.AbstractSystem")
    else:
        if force is not None and not isinstance(force, AbstractForce):
            if not callable(force):
                raise TypeError(
                    f"`force` must be an s2jax force or a function f(t, q, omega, u, params); got {force!r}"
                )
            force = Force(force)
        system = LagrangianSystem(lagrangian, force)
        system_given = False
    system, integrator = _choose_before_form_check(system, integrator)
    # Only a Lagrangian of (2.2) has a form to check; other systems are used as they are.
    lagrangian = system.lagrangian if isinstance(system, LagrangianSystem) else None
    # Until the form is checked, None stands for one of the two variational integrators;
    # they declare the same capabilities, so the checks below hold for either.
    name = type(integrator).__name__ if integrator is not None else "VariationalIntegrator"
    capabilities = integrator if integrator is not None else VariationalIntegrator()
    policy = controls if callable(controls) else None
    if controls is not None:
        if force is None:
            raise ValueError("`controls` given without a `force` to apply them: pass force=... (see s2jax.forces)")
        if isinstance(integrator, AbstractAdaptiveIntegrator):
            raise ValueError(
                f"{name} chooses its own steps, so it cannot hold controls over fixed steps; use a "
                "fixed-step integrator (VariationalIntegrator, RungeKutta4, ...)."
            )
        if policy is not None and isinstance(adjoint, ReversibleAdjoint):
            raise ValueError(
                "ReversibleAdjoint cannot take a feedback policy: u_k = policy(q_k, ω_k) is not known "
                "when stepping back from step k + 1. Use DirectAdjoint or CheckpointedAdjoint."
            )
    if system.force_depends_on_velocity and not capabilities.velocity_dependent_forces:
        raise ValueError(
            f"{name} cannot take a force that depends on ω; use VariationalIntegrator, or declare "
            "a force that ignores ω with s2jax.Force(fn, depends_on_velocity=False)."
        )
    if isinstance(adjoint, ReversibleAdjoint):
        if isinstance(integrator, AbstractAdaptiveIntegrator) or not capabilities.is_symmetric:
            raise ValueError(
                f"ReversibleAdjoint needs a symmetric integrator (a step with −h undoing a step with "
                f"h); {name} is not. Use DirectAdjoint or CheckpointedAdjoint."
            )
        if system.force_depends_on_velocity:
            raise ValueError(
                "ReversibleAdjoint cannot take a force that depends on ω: such a force (damping) "
                "makes the step irreversible. Use DirectAdjoint or CheckpointedAdjoint."
            )
    save_every = _positive_int(save_every, "save_every")
    if num_steps % save_every:
        raise ValueError(f"save_every = {save_every} must divide num_steps = {num_steps}")
    q0 = jnp.asarray(q0)
    omega0 = jnp.asarray(omega0)
    if q0.ndim != 2 or q0.shape[-1] != 3:
        raise ValueError(f"q0 must have shape (n, 3), one unit vector per body; got {q0.shape}")
    if omega0.shape != q0.shape:
        raise ValueError(f"omega0 must have the shape of q0, {q0.shape}; got {omega0.shape}")
    for label, x in (("q0", q0), ("omega0", omega0), ("dt", dt)):
        if jnp.iscomplexobj(x):
            raise ValueError(f"{label} is complex; the state and step of s2jax are real")
    if not jnp.issubdtype(q0.dtype, jnp.floating):
        q0 = q0.astype(float)
    if q0.dtype != jnp.float64:
        raise ValueError(
            f"s2jax computes in float64 (its tolerances are 1e-12), but q0 has dtype {q0.dtype}: call "
            "jax.config.update('jax_enable_x64', True) before creating arrays"
        )
    omega0 = omega0.astype(q0.dtype)
    dt = jnp.asarray(dt, dtype=q0.dtype)
    if dt.shape != ():
        raise ValueError(f"dt must be a scalar; got shape {dt.shape}")
    params = jtu.tree_map(_trace_floats, params)
    if policy is None and controls is not None:
        controls = _check_controls(controls, num_steps)
    if force is not None:
        _check_force_output(force, policy, q0, omega0, params, controls)

    concrete = not any(isinstance(x, jax.core.Tracer) for x in (q0, omega0, dt))
    concrete_params = not any(isinstance(x, jax.core.Tracer) for x in jtu.tree_leaves(params))
    if concrete:
        check_initial_state(q0, omega0, dt)
    if concrete_params:
        check_parameters(params)
    if concrete_params and lagrangian is not None:
        # M of (2.2) does not depend on q, so with known params the form can be checked before
        # compiling even when the state is traced: at a fixed random state of the same shape.
        if concrete:
            probe = (q0, omega0)
        else:
            with jax.ensure_compile_time_eval():  # a constant, even inside a user's jit
                probe = random_state(jax.random.PRNGKey(0), q0.shape[0], dtype=q0.dtype)
        try:
            inertia = check_lagrangian_form(lagrangian, *probe, params)
        except ValueError as error:
            if system_given or _needs_form_2_2(integrator):
                hint = (
                    "LagrangianSystem is for the form (2.2); use GeneralLagrangianSystem(lagrangian), which "
                    "takes any regular L." if system_given else
                    f"{name} needs that form; leave `integrator` out (GeneralVariationalIntegrator then runs) "
                    "or pass GeneralVariationalIntegrator()."
                )
                raise ValueError(f"{error}\n{hint}") from None
            system = GeneralLagrangianSystem(lagrangian, force)
            integrator = GeneralVariationalIntegrator() if integrator is None else integrator
            lagrangian = None
        else:
            integrator = default_integrator(inertia) if integrator is None else integrator
            system = system.with_structure(inertia)
    if lagrangian is not None and not concrete_params and not system_given:
        # M is not known before compiling; whether it is a chain's is recognised at random values
        # of the params, and checked on the actual M in the graph (`_initial_result`).
        system = system.with_probed_structure(q0.shape[0], params, q0.dtype)
    if integrator is None:
        # The form could not be checked before compiling: the (2.2) path checks it inside.
        integrator = VariationalIntegrator()
    if lagrangian is not None and concrete_params:
        if integrator.requires_diagonal_inertia:
            off = inertia - np.diag(np.diag(inertia))
            if np.any(off != 0):
                i, j = np.argwhere(off != 0)[0]
                raise ValueError(
                    f"{name} needs a diagonal inertia matrix, but M[{i}, {j}] = {inertia[i, j]}; "
                    "use VariationalIntegrator."
                )

    solution = _integrate(
        system, integrator, adjoint, q0, omega0, params, dt, controls, policy, num_steps, save_every,
        progress, throw, not concrete_params and lagrangian is not None,
    )
    if throw:
        codes = solution.result._value
        if concrete and not isinstance(codes, jax.core.Tracer):
            _raise_if_failed(codes, solution.failed_step, dt)
        else:
            solution = error_if(
                solution, codes != RESULTS.successful._value, _raise_if_failed, codes, solution.failed_step, dt
            )
    return solution


# The integrators built on the constant M of (2.2): they ask the system for M, the operator of
# (2.11)/(3.13) or ∂V/∂q. The others need only the equations of motion, which every system has.
_FORM_2_2_INTEGRATORS = (
    VariationalIntegrator, ExplicitVariationalIntegrator, Rattle, StormerVerlet, DiscreteHamelIntegrator,
)


def _needs_form_2_2(integrator) -> bool:
    if isinstance(integrator, Composition):
        return _needs_form_2_2(integrator.integrator)
    return isinstance(integrator, _FORM_2_2_INTEGRATORS)


def _choose_before_form_check(system, integrator):
    """The system and integrator where no form check is needed to choose them.

    A `GeneralLagrangianSystem` runs the `GeneralVariationalIntegrator` by default, a
    `HamiltonianSystem` the `HamiltonianRattle`; neither can run an integrator of (2.2). A
    `GeneralVariationalIntegrator` asked for a Lagrangian of (2.2) runs it as a
    `GeneralLagrangianSystem`. `integrator` stays None where the form check
    of `simulate` decides.
    """
    if isinstance(system, (GeneralLagrangianSystem, HamiltonianSystem)):
        own = GeneralVariationalIntegrator if isinstance(system, GeneralLagrangianSystem) else HamiltonianRattle
        if integrator is None:
            return system, own()
        if _needs_form_2_2(integrator):
            raise ValueError(
                f"{type(integrator).__name__} needs a Lagrangian of the form (2.2) (a constant inertia "
                f"matrix M); a {type(system).__name__} runs {own.__name__} or an integrator "
                "of the equations of motion (RungeKutta4, ...)."
            )
    elif isinstance(integrator, GeneralVariationalIntegrator):
        if not isinstance(system, LagrangianSystem):
            raise ValueError(
                f"GeneralVariationalIntegrator integrates a Lagrangian; got a {type(system).__name__}"
            )
        return GeneralLagrangianSystem(system.lagrangian, system.force), integrator
    elif integrator is None and not isinstance(system, LagrangianSystem):
        return system, VariationalIntegrator()
    return system, integrator


def default_integrator_for(lagrangian, q, omega, params) -> AbstractIntegrator:
    """The integrator `simulate(lagrangian, q, omega, params)` runs when none is given, for
    concrete params: the general VI unless the Lagrangian has the form (2.2) at (q, ω), else
    the variational integrator of 002 that suits M (`default_integrator`)."""
    try:
        inertia = check_lagrangian_form(lagrangian, q, omega, params)
    except ValueError:
        return GeneralVariationalIntegrator()
    return default_integrator(inertia)


def _check_controls(controls, num_steps):
    """The open-loop controls as a float64 array of num_steps rows, or a ValueError."""
    if isinstance(controls, jax.core.Tracer):
        array = controls
    else:
        array = np.asarray(controls)
        if np.iscomplexobj(array):
            raise ValueError("`controls` is complex; controls of s2jax are real")
        if array.dtype.kind not in "fiu":
            raise ValueError(f"`controls` must be an array of numbers; got dtype {array.dtype}")
        if array.ndim and not np.all(np.isfinite(array)):
            k = int(np.argwhere(~np.isfinite(array))[0][0])
            raise ValueError(f"`controls` of step {k} is not finite: {array[k]}")
    if array.ndim == 0 or array.shape[0] != num_steps:
        raise ValueError(
            f"`controls` must have one row per step, shape (num_steps = {num_steps}, ...); got shape {array.shape}"
        )
    if array.dtype == jnp.float32:
        raise ValueError("`controls` has dtype float32; s2jax computes in float64")
    return jnp.asarray(array, dtype=jnp.float64)


def _check_force_output(force, policy, q0, omega0, params, controls):
    """Trace the force once (no computation): it must return one ℝ³ vector per body."""
    def first_force():
        t0 = jnp.zeros((), q0.dtype)
        if policy is not None:
            u = policy(t0, q0, omega0, params)
        else:
            u = None if controls is None else controls[0]
        return force(t0, q0, omega0, u, params)

    try:
        shape = jax.eval_shape(first_force)
    except Exception as error:  # the user's force or policy failed on the first step's arguments
        raise ValueError(
            f"the force (or the policy) failed on the first step's arguments: {type(error).__name__}: {error}"
        ) from error
    if not hasattr(shape, "shape") or shape.shape != q0.shape:
        raise ValueError(f"the force must return shape {q0.shape}, one ℝ³ vector per body; got {shape}")


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive Python int; got {value!r}")
    return int(value)


def _trace_floats(leaf):
    if isinstance(leaf, (float, np.ndarray, np.floating, jax.Array)) and not isinstance(leaf, bool):
        return jnp.asarray(leaf)
    return leaf


def _initial_result(system, integrator, q0, omega0, params, dt, check_form) -> RESULTS:
    """The in-graph checks of what `simulate` checks eagerly when it can: the first result code.

    The form check of (2.2) costs O(1) gradients plus the n tangents of M, once per run; it is
    compiled in only when it could not run before compiling (`check_form`).
    """
    result = RESULTS.where(initial_state_is_valid(q0, omega0, dt), RESULTS.successful, RESULTS.invalid_initial_state)
    result = RESULTS.where(
        parameters_are_finite(params) | (result != RESULTS.successful), result, RESULTS.invalid_parameters
    )
    if check_form:
        form = lax.stop_gradient(lagrangian_form_is_valid(system.lagrangian, q0, omega0, params))
        result = RESULTS.where(form | (result != RESULTS.successful), result, RESULTS.not_lagrangian_form)
    if getattr(system, "inertia_structure", None) == "chain":
        chain = is_chain(lax.stop_gradient(system.prepare(q0, params).inertia))
        result = RESULTS.where(chain | (result != RESULTS.successful), result, RESULTS.inertia_not_chain)
    if integrator.requires_diagonal_inertia or getattr(system, "inertia_structure", None) == "diagonal":
        inertia = lax.stop_gradient(system.prepare(q0, params).inertia)
        diagonal = is_diagonal(inertia) | (result != RESULTS.successful)
        result = RESULTS.where(diagonal, result, RESULTS.inertia_not_diagonal)
    return result


@filter_jit
def _integrate(
    system, integrator, adjoint, q0, omega0, params, dt, controls, policy, num_steps, save_every, progress,
    throw, check_form,
):
    num_saves = num_steps // save_every
    t = dt * save_every * jnp.arange(num_saves + 1, dtype=dt.dtype)
    result0 = _initial_result(system, integrator, q0, omega0, params, dt, check_form)
    if policy is None and controls is not None:
        finite = jnp.all(jnp.isfinite(controls))
        result0 = RESULTS.where(finite | (result0 != RESULTS.successful), result0, RESULTS.invalid_controls)

    if isinstance(integrator, AbstractAdaptiveIntegrator):
        (q, omega), result, failed_save, _ = integrator.solve(system, t, (q0, omega0), system.prepare(q0, params))
        result = RESULTS.where(result0 == RESULTS.successful, result, result0)
        failed = jnp.where(result0 == RESULTS.successful, jnp.maximum(failed_save - 1, NO_FAILURE), 0)
        return Solution(t, q, omega, result, failed, type(integrator).__name__)

    if progress:
        # This body runs only when `simulate` is traced, i.e. about to be compiled (not when a
        # compiled one is reused); compiling a long run can take as long as running it.
        print("  compiling …", end="", file=sys.stderr, flush=True)
    dynamic, static = eqx.partition(params, eqx.is_inexact_array)
    loop = Loop(integrator, system, static, policy, num_saves, save_every, progress, throw)
    inputs = LoopInputs((q0, omega0), dynamic, dt, None if policy is not None else controls)
    final, (qs, omegas) = adjoint.loop(loop, inputs, result0)
    q = jnp.concatenate([q0[None], qs])
    omega = jnp.concatenate([omega0[None], omegas])
    return Solution(t, q, omega, final.result, final.failed_step, type(integrator).__name__)


def _progress_hook(num_saves: int, save_every: int):
    """A text progress bar, updated from the device at most every few hundred steps.

    The update is a `jax.debug.callback` inside a `lax.cond` on the save index, so the
    host is called at most ~50 times per simulation, never once per step: after the first
    block of `save_every` steps (so that the bar appears as soon as the run starts), every
    `every` blocks, and after the last.
    """
    total = num_saves * save_every
    every = max(math.ceil(200 / save_every), math.ceil(num_saves / 50))

    def show(index):
        done = (int(index) + 1) * save_every
        filled = round(30 * done / total)
        end = "\n" if done >= total else ""
        print(f"\r  [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} steps", end=end,
              file=sys.stderr, flush=True)

    def on_save(index):
        update = (index == 0) | ((index + 1) % every == 0) | (index == num_saves - 1)
        lax.cond(update, lambda: jax.debug.callback(show, index), lambda: None)

    return on_save


def _failure_message(code, failed_step, dt, batch_index=None) -> str:
    where = "" if batch_index is None else f" (batch index {batch_index})"
    step = int(failed_step)
    before_first_step = (
        RESULTS.invalid_initial_state, RESULTS.invalid_parameters, RESULTS.invalid_controls,
        RESULTS.not_lagrangian_form,
        RESULTS.inertia_not_diagonal,
    )
    if any(code == c._value for c in before_first_step):
        message = f"s2jax.simulate{where}: before the first step: {RESULTS._index_to_message[int(code)]}"
        if code == RESULTS.not_lagrangian_form._value:
            message += (
                ". To integrate a Lagrangian of any form with traced params, pass "
                "s2jax.GeneralLagrangianSystem(lagrangian) or integrator=s2jax.GeneralVariationalIntegrator()"
            )
        return message
    return (
        f"s2jax.simulate{where}: step {step} → {step + 1} (t = {step * float(dt):.6g}) "
        f"failed: {RESULTS._index_to_message[int(code)]}. Pass throw=False to get the "
        "trajectory up to that step and the result code."
    )


def _raise_if_failed(codes, failed_steps, dt):
    codes = np.asarray(codes)
    failed_steps = np.asarray(failed_steps)
    bad = np.argwhere(np.atleast_1d(codes != RESULTS.successful._value))
    if bad.size:
        index = tuple(int(i) for i in bad[0]) if codes.ndim else ()
        batch_index = index if codes.ndim else None
        raise SimulationError(
            _failure_message(codes[index], failed_steps[index], np.asarray(dt).reshape(-1)[0], batch_index)
        )


