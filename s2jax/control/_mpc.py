"""Receding-horizon control (model predictive control) with any `s2jax.control` solver."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .._adjoint import NO_FAILURE
from .._jit import filter_jit
from .._results import RESULTS
from .._validation import positive_int
from ._ilqr import ILQR
from ._problem import Problem
from ._real_time import first_state, real_time_step
from ._solve import solve_in_graph
from ._solver import AbstractControlSolver, as_values


class RecedingHorizonSolution(eqx.Module):
    """What `receding_horizon` returns.

    **Fields:** `t`, `q`, `omega`: the closed-loop trajectory of the plant, (K·s + 1, …) for K
    solves applying s steps each; `controls`: the controls applied, (K·s, …); `results`: each
    solve's result code, (K,), or the plant's from the solve whose plant steps failed on;
    `iterations`: each solve's inner iterations, (K,); `result`: the plant's code,
    `RESULTS.successful` or why its step failed; `failed_step`: the plant step that failed, or −1.

    As in `simulate`, the plant's state freezes at its last good step: after a failed plant step,
    `q` and `omega` repeat the state before it.
    """

    t: jax.Array
    q: jax.Array
    omega: jax.Array
    controls: jax.Array
    results: RESULTS
    iterations: jax.Array
    result: RESULTS
    failed_step: jax.Array


def receding_horizon(
    problem: Problem,
    q0,
    omega0,
    *,
    solver: AbstractControlSolver,
    num_solves: int,
    steps_per_solve: int = 1,
    plant: Problem | None = None,
    init=None,
    real_time_iterations: int | None = None,
    max_outer_steps: int = 20,
    constraint_tolerance: float = 1e-6,
) -> RecedingHorizonSolution:
    """Model predictive control: solve `problem` from the current state, apply the first
    `steps_per_solve` controls to the plant, and repeat `num_solves` times.

    Each solve is warm-started from the previous one's controls shifted by `steps_per_solve`
    (the tail repeated), so after the first solve the solver starts near its answer. The whole
    loop is one compiled `lax.scan`, so it also runs under `jax.vmap`.

    With `real_time_iterations=r` (iLQR only), the first solve runs to convergence and every
    control step after it, the first included, takes r undamped iLQR iterations from the measured
    state, linearised around the previous prediction shifted by the steps applied (real-time
    iterations, `_real_time.py`): one iteration per step costs one expansion, one Riccati pass
    and one rollout, whatever the solver would need to converge. For a plant outside s2jax,
    `RealTimeController` runs the same iterations from Python.

    **Arguments:**

    - `problem`: the optimal control problem over the prediction horizon (its `num_steps`).
    - `q0`, `omega0`: the plant's initial state.
    - `solver`: an `s2jax.control` solver (iLQR with a small `max_steps` suits a receding
      horizon); with `real_time_iterations`, an `ILQR`, used for the first solve.
    - `num_solves`, `steps_per_solve`: K solves, each followed by s plant steps (s ≤ num_steps).
    - `plant`: the system that is actually controlled, as a `Problem` whose dynamics are used
      (default: `problem` itself); give it other params, a disturbance force or another
      integrator to test robustness to model error.
    - `init`: the first solve's initial guess (default zeros).
    - `real_time_iterations`: None (each solve runs `solver` to convergence or its `max_steps`),
      or the iLQR iterations per control step of the real-time mode (a positive int).

    A plant step that fails (a non-finite state, a step too large, Newton not converged) is
    reported, not raised: `result` and `failed_step` say what and where, and the plant stays at
    its last good state for the rest of the loop. In the real-time mode `results[0]` is the first
    solve's code when it did not converge, and a refused iteration gives
    `RESULTS.real_time_iteration_refused` for its step (the prediction's controls were applied).

    **Returns:** a `RecedingHorizonSolution`; in the real-time mode `iterations` counts the
    iterations accepted at each control step.
    """
    plant = problem if plant is None else plant
    if not 1 <= steps_per_solve <= problem.num_steps:
        raise ValueError(f"steps_per_solve must be in 1..{problem.num_steps}; got {steps_per_solve}")
    if real_time_iterations is not None:
        positive_int(real_time_iterations, "receding_horizon(real_time_iterations)")
        if not isinstance(solver, ILQR):
            raise ValueError(
                "real-time iterations are iLQR iterations: pass solver=s2jax.control.ILQR(...); got "
                f"{type(solver).__name__}"
            )
    q0 = jnp.asarray(q0, dtype=float)
    omega0 = jnp.asarray(omega0, dtype=float)
    shape = (problem.num_steps, *problem.control_shape)
    init = problem.clip(jnp.zeros(shape, q0.dtype)) if init is None else jnp.asarray(init, q0.dtype)
    problem, plant = problem.planned(q0, omega0), plant.planned(q0, omega0)
    solver, tolerance = as_values(solver, constraint_tolerance, q0.dtype)
    return _receding_horizon(
        problem, plant, solver, q0, omega0, init, num_solves, steps_per_solve, max_outer_steps, tolerance,
        real_time_iterations,
    )


@filter_jit
def _receding_horizon(
    problem, plant, solver, q0, omega0, init, num_solves, steps, max_outer_steps, tolerance, real_time_iterations
):
    def plant_step(carry, xs):
        """One plant step, frozen after a failure as `simulate`'s loop (`_loop.Loop.step`) is."""
        y, result, failed_step = carry
        k, u = xs
        y_next, step_result = plant.step(k.astype(q0.dtype) * plant.dt, *y, u)
        running = result == RESULTS.successful
        accept = running & (step_result == RESULTS.successful)
        y = jax.tree.map(lambda new, old: jnp.where(accept, new, old), y_next, y)
        failed_step = jnp.where(running & ~accept, k, failed_step)
        result = RESULTS.where(running, step_result, result)
        return (y, result, failed_step), y

    if real_time_iterations is None:
        memory = init

        def control(guess, q, omega):
            """A solve warm-started from the guess; the next guess is its controls shifted."""
            solution = solve_in_graph(problem, solver, q, omega, guess, max_outer_steps, tolerance, estimate_miss=False)
            controls = solution.controls
            guess = jnp.concatenate([controls[steps:], jnp.repeat(controls[-1:], steps, axis=0)])
            return controls[:steps], guess, solution.result, solution.num_iterations

    else:
        memory, first = first_state(
            problem, solver, q0, omega0, init, max_outer_steps, tolerance, solver.regularisation
        )

        def control(state, q, omega):
            return real_time_step(
                problem, state, q, omega, iterations=real_time_iterations, steps=steps,
                regularisation=solver.regularisation,
            )

    def one_solve(carry, index):
        q, omega, memory, result, failed_step = carry
        applied, memory, control_result, iterations = control(memory, q, omega)
        ks = index * steps + jnp.arange(steps)
        ((q, omega), result, failed_step), (qs, omegas) = lax.scan(
            plant_step, ((q, omega), result, failed_step), (ks, applied)
        )
        solve_result = RESULTS.where(result == RESULTS.successful, control_result, result)
        outputs = (qs, omegas, applied, solve_result, iterations)
        return (q, omega, memory, result, failed_step), outputs

    carry = (q0, omega0, memory, RESULTS.successful, jnp.array(NO_FAILURE))
    final, (qs, omegas, controls, results, iterations) = lax.scan(one_solve, carry, jnp.arange(num_solves))
    if real_time_iterations is not None:
        # the first solve's code, where it did not converge, is the first control step's
        first_failed = first.result != RESULTS.successful
        results = jax.tree.map(lambda r, f: r.at[0].set(jnp.where(first_failed, f, r[0])), results, first.result)
    q = jnp.concatenate([q0[None], qs.reshape(-1, *q0.shape)])
    omega = jnp.concatenate([omega0[None], omegas.reshape(-1, *q0.shape)])
    t = plant.dt * jnp.arange(q.shape[0], dtype=q0.dtype)
    controls = controls.reshape(-1, *controls.shape[2:])
    return RecedingHorizonSolution(t, q, omega, controls, results, iterations, *final[3:])
