"""`solve`: a trajectory optimisation problem from an initial state, by a chosen solver."""

import sys

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import SimulationError, error_if
from .._jit import filter_jit
from .._results import RESULTS
from .._validation import check_initial_state
from ._problem import ControlSolution, Problem
from ._solver import AbstractControlSolver, run_augmented_lagrangian


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
    - `progress`: print a line when the call starts (a problem's first solve compiles, which
      takes seconds to a minute), then each augmented-Lagrangian round's objective, inner
      iterations and constraint violation, to stderr (an unconstrained problem has one round).

    Works under `jax.jit` and `jax.vmap` (e.g. over a batch of initial states, with
    `throw=False`); the initial state is checked before compiling when it is concrete.

    **Returns:** a `ControlSolution`; its trajectory is re-simulated from its controls.
    """
    if not isinstance(problem, Problem):
        raise TypeError(f"`problem` must be an s2jax.control.Problem; got {type(problem).__name__}")
    if not isinstance(solver, AbstractControlSolver):
        raise TypeError(f"`solver` must be an s2jax.control solver; got {solver!r}")
    q0 = jnp.asarray(q0, dtype=float)
    omega0 = jnp.asarray(omega0, dtype=float)
    if not any(isinstance(x, jax.core.Tracer) for x in (q0, omega0)):
        check_initial_state(q0, omega0, problem.dt)
    problem = problem.planned(q0, omega0)
    shape = (problem.num_steps, *problem.control_shape)
    if init is None:
        init = problem.clip(jnp.zeros(shape, q0.dtype))
    init = jnp.asarray(init, dtype=q0.dtype)
    if init.shape != shape:
        raise ValueError(f"`init` must have shape (num_steps, *control_shape) = {shape}; got {init.shape}")
    if progress:
        print("s2jax.control.solve: starting (a problem's first solve compiles first) …", file=sys.stderr, flush=True)
    solution = _solve(problem, solver, q0, omega0, init, max_outer_steps, constraint_tolerance, progress)
    if throw:
        codes = solution.result._value
        if isinstance(codes, jax.core.Tracer):  # under the user's jit or vmap: checked in the graph
            solution = error_if(solution, codes != RESULTS.successful._value, _raise_if_failed, codes)
        else:  # on the host: a SimulationError itself, and no callback in a cached program
            _raise_if_failed(codes)
    return solution


def solve_in_graph(problem, solver, q0, omega0, init, max_outer_steps, tolerance, progress=False) -> ControlSolution:
    """The computation of `solve`, without its eager checks and error raising."""
    decision = solver.init(problem, q0, omega0, problem.clip(init))
    decision, history, total, outer, converged, _, _ = run_augmented_lagrangian(
        solver, problem, q0, omega0, decision, max_outer_steps=max_outer_steps, tolerance=tolerance,
        penalty=getattr(solver, "penalty", 10.0), progress=progress,
    )
    controls = problem.clip(solver.controls(problem, decision))
    sol = problem.simulate(q0, omega0, controls)
    violation = jnp.max(jnp.abs(problem.constraint(sol.q[-1], sol.omega[-1])), initial=0.0)
    result = RESULTS.where(converged, RESULTS.successful, RESULTS.optimisation_not_converged)
    result = RESULTS.where(sol.result == RESULTS.successful, result, sol.result)
    return ControlSolution(
        controls, sol.t, sol.q, sol.omega, problem.cost(sol, controls), history, violation, result, total, outer
    )


_solve = filter_jit(solve_in_graph)


def _raise_if_failed(codes):
    codes = np.asarray(codes)
    bad = np.argwhere(np.atleast_1d(codes != RESULTS.successful._value))
    if bad.size:
        index = tuple(int(i) for i in bad[0]) if codes.ndim else ()
        where = f" (batch index {index})" if codes.ndim else ""
        code = int(codes[index])
        hint = ""
        if code == RESULTS.optimisation_not_converged._value:
            hint = (
                " (or stopped early: an augmented-Lagrangian round lowered neither the constraint violation nor "
                "the cost, so the terminal constraint looks unreachable, e.g. bounds too tight or horizon too short)"
            )
        raise SimulationError(
            f"s2jax.control.solve{where}: {RESULTS._index_to_message[code]}{hint}. Pass throw=False to "
            "get the last iterate and its result code."
        )
