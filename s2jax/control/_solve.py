"""`solve`: a trajectory optimisation problem from an initial state, by a chosen solver.

`progress=True` reports from the host alone: a heartbeat thread says on stderr what the call is
doing (preparing, tracing, compiling, solving), and the rounds are printed from the returned
`ControlSolution`. The compiled program is the same with and without it and holds no host callback,
so it is compiled once and JAX's persistent compilation cache can store it.
"""

import dataclasses
import sys
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._custom_types import Array
from .._errors import error_if, raise_for_codes
from .._fidelity import MAX_SUBSTEPS, next_substeps
from .._jit import filter_jit, stop_gradients
from .._optimisation.augmented_lagrangian import run_augmented_lagrangian
from .._optimisation.progress import Heartbeat
from .._results import RESULTS, _names
from .._validation import check_initial_state
from ._implicit import closure_converted, optimal_controls
from ._problem import ControlSolution, Problem, _meaning, continuous_miss
from ._solver import AbstractControlSolver, as_values


def solve(
    problem: Problem,
    q0,
    omega0,
    *,
    solver: AbstractControlSolver,
    init=None,
    max_outer_steps: int = 20,
    constraint_tolerance: float = 1e-6,
    throw: bool = True,
    progress: bool = False,
) -> ControlSolution:
    """Find the controls that minimise `problem`'s cost from (q0, ω0).

    **Arguments:**

    - `problem`: an `s2jax.control.Problem`.
    - `q0`, `omega0`: the initial state, shape (n, 3), a point of T(S²)ⁿ.
    - `solver`: `SingleShooting()`, `MultipleShooting(num_segments)` or `ILQR()`.
    - `init`: the initial guess of the controls, shape (num_steps, *control_shape) (a warm start,
      e.g. a previous solution's controls); default zeros (moved into the bounds).
    - `max_outer_steps`: the cap on augmented-Lagrangian rounds (with constraints). A round that
      lowers neither the constraint violation nor the cost ends the solve early with
      `RESULTS.optimisation_not_converged` (the constraint is unreachable from there; see
      docs/api/control.md).
    - `constraint_tolerance`: the largest |c| accepted.
    - `throw`: raise `SimulationError` if the solve did not converge or a simulation failed;
      with `throw=False` the result is in `ControlSolution.result`.
    - `progress`: report on stderr: a line when the call starts, then, rewritten at most every
      second, what it is doing and for how long ("compiling … 12 s": a problem's first solve
      traces and compiles, which takes seconds to a minute); when it returns, the time of each
      phase, each augmented-Lagrangian round's objective, inner iterations and constraint
      violation (an unconstrained problem has one round), and the result. All of it is printed
      from the host (a thread and the returned solution): the compiled program is the same with
      and without `progress` and holds no callback, so toggling it does not compile again and
      JAX's persistent compilation cache (`s2jax.enable_compilation_cache`) stores it. Under
      `jax.jit`, `jax.vmap` or `jax.grad` (traced inputs) nothing can be reported while the
      program runs: `progress=True` then prints one line saying so, when traced.

    **Fidelity.** The controls are optimal for the discrete model; `solution.continuous_miss`
    says how far the continuous system they drive runs from it. Where that is more than
    `problem.fidelity`, `solve` refines the dynamics (`Problem.substeps`, the integrator's
    steps per control step) and solves again from the controls found: to the power of two that
    the miss's O((h / substeps)^p) law predicts will meet the fidelity (with a margin of 1.25),
    at most `MAX_SUBSTEPS` (`refine`). `solution.substeps` is the count it used. The solution's
    program takes the count as a value (`finishing_problem`), and so do iLQR's iterations
    (`Problem.with_runtime_substeps`): a new count compiles nothing for iLQR, and the shooting
    solvers' iterations once per count. Under `jax.jit`,
    `jax.vmap` or `jax.grad` (traced inputs) the miss can only be reported: the solve runs at
    the problem's own `substeps` and a miss over the fidelity is
    `RESULTS.continuous_miss_above_fidelity`, as it is outside when `MAX_SUBSTEPS` does not
    meet it. `fidelity=None` turns the check off.

    **What compiles.** A problem's first solve compiles its programs; a later solve with new
    values reuses them: a new state, guess or params, a rebuilt `Problem` whose costs are equal by
    value, and new float settings of the solver (`rtol`, `regularisation`, `penalty`, ...) and
    `constraint_tolerance`, which enter as values. A new `max_steps` or `max_outer_steps` sizes
    the program's loops and arrays, so it compiles again.

    Works under `jax.jit` and `jax.vmap` (e.g. over a batch of initial states, with
    `throw=False`); the initial state is checked before compiling when it is concrete.
    `print(solution.summary(problem))` says what the solve did.

    **Returns:** a `ControlSolution`; its trajectory is re-simulated from its controls.
    """
    if not isinstance(problem, Problem):
        raise TypeError(f"`problem` must be an s2jax.control.Problem; got {type(problem).__name__}")
    if not isinstance(solver, AbstractControlSolver):
        raise TypeError(f"`solver` must be an s2jax.control solver; got {solver!r}")
    q0 = jnp.asarray(q0, dtype=float)
    omega0 = jnp.asarray(omega0, dtype=float)
    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((problem, q0, omega0, init)))
    if not any(isinstance(x, jax.core.Tracer) for x in (q0, omega0)):
        check_initial_state(q0, omega0, problem.dt)
    if progress and not traced:

        def run(problem, init):
            return _solve_showing_progress(problem, solver, q0, omega0, init, max_outer_steps, constraint_tolerance)

    else:
        if progress:
            print(
                "s2jax.control.solve: progress=True reports nothing inside jax.jit, jax.vmap or jax.grad (traced "
                "inputs); print(solution.summary(problem)) once the solution is concrete",
                file=sys.stderr, flush=True,
            )

        def run(problem, init):
            return solve_once(problem, solver, q0, omega0, init, max_outer_steps, constraint_tolerance)

    solution = run(problem, init)
    if not traced:
        solution = refine(run, problem, q0, omega0, solution, progress=progress)
    if throw:
        codes = solution.result._value
        if isinstance(codes, jax.core.Tracer):  # under the user's jit or vmap: checked in the graph
            solution = error_if(solution, codes != RESULTS.successful._value, _raise_if_failed, codes)
        else:  # on the host: a SimulationError itself, and no callback in a cached program
            _raise_if_failed(codes)
    return solution


def _prepare(problem: Problem, q0, omega0, init) -> tuple[Problem, Array]:
    """The problem planned (`Problem.planned`) and the initial guess of the controls, checked."""
    problem = problem.planned(q0, omega0)
    shape = (problem.num_steps, *problem.control_shape)
    if init is None:
        init = problem.clip(jnp.zeros(shape, q0.dtype))
    init = jnp.asarray(init, dtype=q0.dtype)
    if init.shape != shape:
        raise ValueError(f"`init` must have shape (num_steps, *control_shape) = {shape}; got {init.shape}")
    return problem, init


def solve_once(problem, solver, q0, omega0, init, max_outer_steps, tolerance) -> ControlSolution:
    """One solve of `problem` as it is (no refinement, no raising), by two compiled programs:
    the iterations (`_iterate`, shared by every `substeps` of an iLQR solve) and the solution
    (`_finish`)."""
    problem, init = _prepare(problem, q0, omega0, init)
    iterated = _iterate(iteration_problem(problem, solver), solver, q0, omega0, init, max_outer_steps, tolerance)
    return with_count(_finish(finishing_problem(problem, (q0, omega0, init)), q0, omega0, iterated), problem)


class Iterated(NamedTuple):
    """What a solver's augmented-Lagrangian rounds found (`iterate_in_graph`): the controls (in
    the bounds), the augmented objective after each inner iteration, the inner iterations and
    the violation max|c| of each round, the rounds run, whether they converged, and the λ and ρ
    of the last round's objective (`run_augmented_lagrangian`)."""

    controls: Array
    history: Array
    iterations: Array
    violations: Array
    num_outer: Array
    converged: Array
    multipliers: Array
    penalty: Array


def iterate_in_graph(problem, solver, q0, omega0, init, max_outer_steps, tolerance) -> Iterated:
    """The solver's iterations on (problem, q0, ω0, init) with their derivatives stopped: no
    iteration is ever differentiated (`finish_in_graph` gives the controls the optimum's)."""
    problem = closure_converted(problem, q0, omega0)
    problem, q0, omega0, init = stop_gradients((problem, q0, omega0, init))
    decision = solver.init(problem, q0, omega0, problem.clip(init))
    decision, history, iterations, violations, outer, converged, multipliers, penalty = run_augmented_lagrangian(
        solver, problem, q0, omega0, decision, max_outer_steps=max_outer_steps, tolerance=tolerance,
        penalty=getattr(solver, "penalty", 10.0),
    )
    controls = problem.clip(solver.controls(problem, decision))
    return Iterated(controls, history, iterations, violations, outer, converged, multipliers, penalty)


def finish_in_graph(problem, q0, omega0, iterated: Iterated, *, estimate_miss=True) -> ControlSolution:
    """The `ControlSolution` of the controls `iterated` found: they carry the derivatives of the
    optimum (`_implicit.optimal_controls`), and the trajectory and cost are re-simulated from
    them, so `jax.grad` of any output never differentiates an iteration.

    `estimate_miss=False` skips the continuous-time miss (NaN, never flagged): model predictive
    control re-plans every step, its feedback absorbing the model's error.
    """
    problem = closure_converted(problem, q0, omega0)
    converged = iterated.converged
    controls = optimal_controls((problem, q0, omega0), iterated.controls, converged)
    sol = problem.simulate(q0, omega0, controls)
    violation = jnp.max(jnp.abs(problem.constraint(sol.q[-1], sol.omega[-1])), initial=0.0)
    if estimate_miss:
        miss = continuous_miss(problem, *jax.lax.stop_gradient((sol.q, sol.omega, controls)))
    else:
        miss = jnp.full((), jnp.nan, q0.dtype)
    result = RESULTS.where(converged, RESULTS.successful, RESULTS.optimisation_not_converged)
    if estimate_miss and problem.fidelity is not None:
        fidelity = jnp.asarray(problem.fidelity, miss.dtype)  # ∞ for a planned problem's None
        # False for a NaN miss (the fidelity is not shown), unless no fidelity is asked for
        faithful = (miss <= fidelity) | jnp.isinf(fidelity)
        result = RESULTS.where(faithful | ~converged, result, RESULTS.continuous_miss_above_fidelity)
    result = RESULTS.where(sol.result == RESULTS.successful, result, sol.result)
    return ControlSolution(
        controls, sol.t, sol.q, sol.omega, problem.cost(sol, controls), iterated.history, violation, result,
        jnp.sum(iterated.iterations), iterated.num_outer, iterated.iterations, iterated.violations,
        iterated.multipliers, iterated.penalty, miss, problem.substeps,
    )


def solve_in_graph(
    problem, solver, q0, omega0, init, max_outer_steps, tolerance, *, estimate_miss=True
) -> ControlSolution:
    """The computation of `solve`, without its eager checks, refinement and error raising:
    `iterate_in_graph` then `finish_in_graph` (`estimate_miss` is the latter's)."""
    iterated = iterate_in_graph(problem, solver, q0, omega0, init, max_outer_steps, tolerance)
    return finish_in_graph(problem, q0, omega0, iterated, estimate_miss=estimate_miss)


def iteration_problem(problem: Problem, solver: AbstractControlSolver) -> Problem:
    """The problem `solver` iterates on in `solve`'s compiled iterations: its sub-steps a value of
    the program where the solver differentiates the dynamics in forward mode only (iLQR), so that
    one program serves every `substeps` that `refine` tries (`Problem.with_runtime_substeps`)."""
    return problem.with_runtime_substeps() if solver.forward_mode_only else problem


def finishing_problem(problem: Problem, inputs) -> Problem:
    """The problem the solution's program (`_finish`) runs: with its sub-steps a value
    (`Problem.with_runtime_substeps`), so that one program serves every `substeps` that `refine`
    tries, where nothing of (problem, inputs) is traced; as it is under a user's `jax.jit`,
    `jax.vmap` or `jax.grad`, which may differentiate it in reverse mode (`optimal_controls`), as
    a loop of traced length cannot be. `with_count` puts the count back in the solution."""
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((problem, inputs))):
        return problem
    return problem.with_runtime_substeps()


def with_count(solution: ControlSolution, problem: Problem) -> ControlSolution:
    """`solution` with `problem`'s sub-step count (its `substeps` field, which a solution of
    `finishing_problem`'s runtime count has as 1)."""
    return dataclasses.replace(solution, substeps=problem.substeps)


def refine(run, problem: Problem, q0, omega0, solution: ControlSolution, *, progress: bool = False) -> ControlSolution:
    """Solve again with more sub-steps per control step until the continuous miss of the
    solution (or of every member of a batch) is within `problem.fidelity`.

    From substeps s and miss m > fidelity f, the next count is the power of two at or above
    s (1.25 m / f)^{1/p}, p the integrator's order (the miss falls as (h / s)^p), capped at
    `MAX_SUBSTEPS`; each solve starts from the controls of the one before. Only solutions
    whose own code is `RESULTS.continuous_miss_above_fidelity` are refined: a solve that did not
    converge, or whose simulation failed, is returned as it is.

    **Arguments:** `run(problem, init) -> ControlSolution` solves `problem` from the guess
    `init`; `problem` and `solution` the first solve's; `q0`, `omega0` an initial state it was
    solved from (for the plan, which gives the integrator's order).

    **Returns:** the last solution (its `substeps` the count used).
    """
    if problem.fidelity is None:
        return solution
    fidelity = float(problem.fidelity)
    order = None
    while True:
        codes = np.asarray(solution.result._value)
        refinable = codes == RESULTS.continuous_miss_above_fidelity._value
        if not np.any(refinable) or problem.substeps >= MAX_SUBSTEPS:
            return solution
        order = order or problem.plan(q0, omega0).integrator.order
        miss = float(np.max(np.where(refinable, np.asarray(solution.continuous_miss), 0.0)))
        substeps = next_substeps(problem.substeps, miss, fidelity, order)
        if progress:
            print(
                f"s2jax.control.solve: continuous miss {miss:.2e} > fidelity {fidelity:g} at substeps = "
                f"{problem.substeps}: solving again with substeps = {substeps}",
                file=sys.stderr, flush=True,
            )
        problem = problem.with_substeps(substeps)
        solution = run(problem, solution.controls)


_iterate_program = filter_jit(iterate_in_graph)
_finish = filter_jit(finish_in_graph)


def _iterate(problem, solver, q0, omega0, init, max_outer_steps, tolerance) -> Iterated:
    """`iterate_in_graph`, compiled, with the solver's settings and the tolerance as values
    (`as_values`): a new `rtol` or `constraint_tolerance` reuses the program."""
    solver, tolerance = as_values(solver, tolerance, q0.dtype)
    return _iterate_program(problem, solver, q0, omega0, init, max_outer_steps, tolerance)


def cache_size() -> int:
    """How many programs `solve` compiled: its iterations' and its solutions'."""
    return _iterate_program.cache_size() + _finish.cache_size()


def _not_converged_hint(x64: bool) -> str:
    """What `solve` adds to the not-converged error; without float64 (`jax_enable_x64` off) it
    names float32, whose resolution the default tolerances need not be reachable in (the
    swing-up example fails so)."""
    hint = (
        "; stopped early, it means the terminal constraint looks unreachable from there (bounds too tight or "
        "horizon too short?)"
    )
    if not x64:
        hint += (
            ". The states are float32 (jax_enable_x64 is off): tolerances near float32's resolution may be "
            'unreachable; enable float64 with jax.config.update("jax_enable_x64", True) before creating arrays'
        )
    return hint


def _raise_if_failed(codes):
    hint = _not_converged_hint(jax.config.jax_enable_x64)
    raise_for_codes(codes, "s2jax.control.solve", hints={int(RESULTS.optimisation_not_converged._value): hint})


def _solve_showing_progress(problem, solver, q0, omega0, init, max_outer_steps, tolerance) -> ControlSolution:
    """`solve`'s computation with its heartbeat on stderr, then its report (`progress=True`)."""
    print(
        f"s2jax.control.solve: starting ({type(solver).__name__}, {problem.num_steps} steps; a problem's first "
        "solve traces and compiles first) …",
        file=sys.stderr, flush=True,
    )
    with Heartbeat("s2jax.control.solve", (iterate_in_graph.__name__, finish_in_graph.__name__)) as heartbeat:
        problem, init = _prepare(problem, q0, omega0, init)
        programs = cache_size()
        heartbeat.phase("tracing")
        iterated = _iterate(iteration_problem(problem, solver), solver, q0, omega0, init, max_outer_steps, tolerance)
        heartbeat.phase("solving")  # the call returns once the program is dispatched
        jax.block_until_ready(iterated)
        heartbeat.phase("tracing")
        solution = with_count(_finish(finishing_problem(problem, (q0, omega0, init)), q0, omega0, iterated), problem)
        heartbeat.phase("solving")
        jax.block_until_ready(solution)
        compiled = cache_size() > programs
    print(_report(solution, solver, heartbeat, compiled), file=sys.stderr, flush=True)
    return solution


def _report(solution: ControlSolution, solver, heartbeat: Heartbeat, compiled: bool) -> str:
    """What `progress` prints once the solve has returned: the phases' times, one line per
    augmented-Lagrangian round (its last objective, inner iterations, constraint violation),
    and the result."""
    seconds = heartbeat.durations
    phases = [f"preparing {seconds['preparing']:.3g} s"]
    if compiled:
        phases.append(f"tracing {seconds['tracing']:.3g} s")
        if "compiling" in seconds:
            loaded = " (loaded from the persistent compilation cache)" if heartbeat.loaded else ""
            phases.append(f"compiling {seconds['compiling']:.3g} s{loaded}")
    else:
        phases.append("the compiled program reused")
    phases.append(f"solving {seconds['solving']:.3g} s")
    lines = [f"s2jax.control.solve: {sum(seconds.values()):.3g} s: {', '.join(phases)}"]
    history = np.asarray(solution.cost_history)
    iterations = np.asarray(solution.round_iterations)
    violations = np.asarray(solution.round_violation)
    ends = np.cumsum(iterations)
    for index in range(int(solution.num_outer_iterations)):
        objective = history[ends[index] - 1] if iterations[index] else np.nan
        cap = " (max_steps reached)" if iterations[index] == solver.max_steps else ""
        lines.append(
            f"s2jax.control.solve: round {index + 1}: objective {objective:.6g} after {iterations[index]} "
            f"iteration{'s' if iterations[index] != 1 else ''}{cap}, constraint violation {violations[index]:.2e}"
        )
    name = _names(solution.result._value).item()
    meaning = _meaning(name, int(solution.num_outer_iterations), violations.size)
    lines.append(
        f"s2jax.control.solve: RESULTS.{name} ({meaning}); cost J = {float(solution.cost):.10g}, constraint "
        f"violation {float(solution.constraint_violation):.2e}"
    )
    return "\n".join(lines)
