"""`simulate`: check the input, make the plan, run the loop, report failures.

The plan (`_plan.py`) chooses the system and integrator, the loop (`_loop.py`) steps it, the
adjoints (`_adjoint.py`) choose how the steps are stored for reverse mode.
"""

import collections
import sys
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jax import lax

from . import _member_program as member_program
from ._adjoint import NO_FAILURE, AbstractAdjoint, default_adjoint
from ._custom_types import ArrayLike, Float, Lagrangian, Params
from ._eager import EagerCalls, join_arrays, split_arrays
from ._errors import error_if, failure_check
from ._force import AbstractForce
from ._integrators import AbstractAdaptiveIntegrator, AbstractIntegrator
from ._jit import filter_jit, trace_state_clean
from ._loop import Loop, LoopInputs
from ._plan import Plan, plan
from ._results import RESULTS
from ._solution import Solution
from ._system import AbstractSystem
from ._validation import (
    check_controls,
    check_force_output,
    check_initial_state,
    check_parameters,
    check_state_arguments,
    positive_int,
    trace_floats,
)


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

    **Which integrator runs** (`Solution.integrator` names it) is decided once, before compiling,
    by the plan that every entry point shares (`s2jax.AutoIntegrator` for `integrator=None`): a
    Lagrangian of the form (2.2) of 002 (checked by `check_lagrangian_form`) runs the explicit
    (3.17)–(3.18), `ExplicitVariationalIntegrator`, when M is diagonal and (3.10)–(3.13),
    `VariationalIntegrator`, otherwise; any other regular L runs the `GeneralVariationalIntegrator`
    on a `GeneralLagrangianSystem`; a `HamiltonianSystem` runs `HamiltonianRattle`. Where the
    params are traced (under `jax.jit`/`jax.vmap`), a Lagrangian runs `VariationalIntegrator`,
    which checks the form inside and returns `RESULTS.not_lagrangian_form` if it fails. An
    integrator declares the system it integrates (`system_type`): one built on (2.2) asked for
    another L is an error; one that needs only the equations of motion (Runge–Kutta, Lie group
    methods, `AdaptiveRungeKutta45`) runs on whichever system the model is.

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
    - `integrator`: None or `AutoIntegrator()` (default: chosen as above), a `VariationalIntegrator`,
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
    `RESULTS.not_lagrangian_form`, an M (or ∂²L/∂q̇∂q̇ on the tangent spaces, for a general L)
    that is not positive definite `RESULTS.inertia_not_positive_definite`; eagerly each is a
    `ValueError` naming the smallest eigenvalue. After a failed step, the remaining steps are
    skipped (the saved states repeat the last good one).

    **Under `jax.vmap`** on CPU the members run along the last axis of every array, where XLA
    vectorises across them (`s2jax._member_program`; docs/batches.md, "`jax.vmap(simulate)`"): the
    same results to round-off, and derivatives taken after the `jax.vmap` are those of the
    vmapped program.

    **Repeated calls:** an eager call keeps its plan for the next one with the same model,
    integrator, force, adjoint, options, shapes and params (equal values), which then runs the
    compiled program at once, its state, dt and controls checked inside it (the same
    `ValueError` for a bad one); docs/performance.md, "Calls from Python", says what is checked
    when.

    **Returns:** a `Solution`.
    """
    num_steps = positive_int(num_steps, "num_steps")
    save_every = positive_int(save_every, "save_every")
    options = dict(integrator=integrator, force=force, controls=controls, adjoint=adjoint, num_steps=num_steps,
                   save_every=save_every, throw=throw)
    repeated = _EAGER_CALLS.call(lagrangian, q0, omega0, params, dt, progress=progress, **options)
    if repeated is not None:
        return repeated
    if num_steps % save_every:
        raise ValueError(f"save_every = {save_every} must divide num_steps = {num_steps}")
    given_params = params
    adjoint = default_adjoint(num_steps) if adjoint is None else adjoint
    if not isinstance(adjoint, AbstractAdjoint):
        raise TypeError(f"`adjoint` must be an s2jax adjoint, got {adjoint!r}")
    q0, omega0, dt = check_state_arguments(q0, omega0, dt)
    params = jtu.tree_map(trace_floats, params)
    concrete = not any(isinstance(x, jax.core.Tracer) for x in (q0, omega0, dt))
    if concrete:
        check_initial_state(q0, omega0, dt)
    if not any(isinstance(x, jax.core.Tracer) for x in jtu.tree_leaves(params)):
        check_parameters(params)
    the_plan = plan(lagrangian, q0, omega0, params, integrator=integrator, force=force)
    policy = controls if callable(controls) else None
    the_plan.check_options(adjoint=adjoint, controls=controls, policy=policy)
    if policy is None and controls is not None:
        controls = check_controls(controls, num_steps)
    if the_plan.system.force is not None:
        check_force_output(the_plan.system.force, policy, q0, omega0, params, controls)

    entry = None if progress else _EAGER_CALLS.remember(
        lagrangian, q0, params, given_params, the_plan=the_plan, resolved_adjoint=adjoint, policy=policy, **options
    )
    if entry is not None:  # an eager call, through the program its repetitions will run
        solution = _EAGER_CALLS.run(entry, q0, omega0, dt, None if policy is not None else controls)
    else:
        solution = _run(
            the_plan, adjoint, q0, omega0, params, dt, controls, policy, num_steps, save_every, progress, throw
        )
    if throw:
        codes = solution.result._value
        check = failure_check(solution.integrator)
        if concrete and not isinstance(codes, jax.core.Tracer):
            check(codes, solution.failed_step, dt)
        else:
            solution = error_if(solution, codes != RESULTS.successful._value, check, codes, solution.failed_step, dt)
    return solution


def integrate(
    the_plan: Plan, adjoint, q0, omega0, params, dt, controls, policy, num_steps, save_every, progress, throw
) -> Solution:
    """The `Solution` of the plan's run: the loop (or the adaptive solve) from its first result code."""
    num_saves = num_steps // save_every
    t = dt * save_every * jnp.arange(num_saves + 1, dtype=dt.dtype)
    system, integrator = the_plan.system, the_plan.integrator
    result0 = the_plan.initial_result(q0, omega0, params, dt)
    if policy is None and controls is not None:
        finite = jnp.all(jnp.isfinite(controls))
        result0 = RESULTS.where(finite | (result0 != RESULTS.successful), result0, RESULTS.invalid_controls)

    if isinstance(integrator, AbstractAdaptiveIntegrator):

        def solve():
            (q, omega), result, failed_save, _ = integrator.solve(system, t, (q0, omega0), system.prepare(q0, params))
            return q, omega, result, jnp.maximum(failed_save - 1, NO_FAILURE).astype(int)

        def refuse():  # a code before the first step: the initial state repeated (docs/errors.md)
            repeat = [jnp.broadcast_to(x, (num_saves + 1, *x.shape)) for x in (q0, omega0)]
            return *repeat, result0, jnp.asarray(0, dtype=int)

        q, omega, result, failed = lax.cond(result0 == RESULTS.successful, solve, refuse)
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


_integrate = filter_jit(integrate)

def _run(the_plan, adjoint, q0, omega0, params, dt, controls, policy, num_steps, save_every, progress, throw):
    """`integrate`'s `Solution`; under a transformation (on CPU) through `member_program_p`, so that a
    `jax.vmap` of it runs with the members along the last axis (`_member_program`)."""
    arguments = (the_plan, adjoint, q0, omega0, params, dt, controls, policy, num_steps, save_every, throw)
    if progress or trace_state_clean() or not member_program.enabled():
        return _integrate(*arguments[:-1], progress, throw)
    try:
        arrays, static = split_arrays(arguments)
    except TypeError:  # a part that cannot be hashed (a mutable object closed over): as it is
        return _integrate(*arguments[:-1], progress, throw)
    avals = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=jax.typeof(x).weak_type) for x in arrays)
    # The mesh of a `jax.set_mesh` context is part of every traced value's type: a program traced
    # outside one fails inside it ("context mesh … should match the aval mesh"), and vice versa.
    key = (static, avals, jax.sharding.get_abstract_mesh())
    program = _PROGRAMS.get(key)
    if program is None:
        program = member_program.MemberProgram(_integrate_arrays(static), avals, q0.shape[0], key)
        # A model or policy closing over values of the transformation under way (a Lagrangian of
        # a parameter being differentiated), or with a callback (`jax.debug.print`), runs inline.
        if program.jaxpr.effects or any(isinstance(c, jax.core.Tracer) for c in program.jaxpr.consts):
            return _integrate(*arguments[:-1], progress, throw)
        _PROGRAMS[key] = program
        if len(_PROGRAMS) > 64:
            _PROGRAMS.popitem(last=False)
    else:
        _PROGRAMS.move_to_end(key)
    return member_program.bind(program, arrays)


_PROGRAMS: collections.OrderedDict = collections.OrderedDict()  # `_run`'s programs, the 64 made last


def _integrate_arrays(static) -> Callable:
    """`_integrate` of `_run`'s arguments, their arrays given and the rest (`static`) fixed."""

    def run(*arrays):
        *arguments, throw = join_arrays(static, arrays)
        return _integrate(*arguments, False, throw)

    return run


def simulate_plan(
    the_plan: Plan, q0, omega0, params, *, dt, num_steps: int, controls=None, save_every: int = 1, throw: bool = False
) -> Solution:
    """`simulate`'s run of a plan made, and of inputs checked, by the caller: for the solvers, whose
    problems are planned before compiling (`control.Problem.planned`, `fit`). `simulate` would plan
    again inside their programs, where the params are traced, and so compile the form check of
    (2.2) into them, for params already checked. The adjoint is `default_adjoint(num_steps)`."""
    dt = jnp.asarray(dt, q0.dtype)
    return _integrate(
        the_plan, default_adjoint(num_steps), q0, omega0, params, dt, controls, None, num_steps, save_every, False,
        throw,
    )
_EAGER_CALLS = EagerCalls()


def program_count() -> int:
    """How many programs `simulate` holds compiled (tests check that new values reuse one)."""
    return _integrate.cache_size() + _EAGER_CALLS.cache_size()
