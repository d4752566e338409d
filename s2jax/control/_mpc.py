"""Receding-horizon control (model predictive control) with any `s2jax.control` solver."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .._adjoint import NO_FAILURE
from .._jit import filter_jit
from .._results import RESULTS
from ._problem import Problem
from ._solve import solve_in_graph
from ._solver import AbstractControlSolver


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
    max_outer_steps: int = 20,
    constraint_tolerance: float = 1e-6,
) -> RecedingHorizonSolution:
    """Model predictive control: solve `problem` from the current state, apply the first
    `steps_per_solve` controls to the plant, and repeat `num_solves` times.

    Each solve is warm-started from the previous one's controls shifted by `steps_per_solve`
    (the tail repeated), so after the first solve the solver starts near its answer. The whole
    loop is one compiled `lax.scan`, so it also runs under `jax.vmap`.

    **Arguments:**

    - `problem`: the optimal control problem over the prediction horizon (its `num_steps`).
    - `q0`, `omega0`: the plant's initial state.
    - `solver`: an `s2jax.control` solver (iLQR with a small `max_steps` suits a receding
      horizon).
    - `num_solves`, `steps_per_solve`: K solves, each followed by s plant steps (s ≤ num_steps).
    - `plant`: the system that is actually controlled, as a `Problem` whose dynamics are used
      (default: `problem` itself); give it other params, a disturbance force or another
      integrator to test robustness to model error.
    - `init`: the first solve's initial guess (default zeros).

    A plant step that fails (a non-finite state, a step too large, Newton not converged) is
    reported, not raised: `result` and `failed_step` say what and where, and the plant stays at
    its last good state for the rest of the loop.

    **Returns:** a `RecedingHorizonSolution`.
    """
    plant = problem if plant is None else plant
    if not 1 <= steps_per_solve <= problem.num_steps:
        raise ValueError(f"steps_per_solve must be in 1..{problem.num_steps}; got {steps_per_solve}")
    q0 = jnp.asarray(q0, dtype=float)
    omega0 = jnp.asarray(omega0, dtype=float)
    shape = (problem.num_steps, *problem.control_shape)
    init = problem.clip(jnp.zeros(shape, q0.dtype)) if init is None else jnp.asarray(init, q0.dtype)
    problem, plant = problem.planned(q0, omega0), plant.planned(q0, omega0)
    return _receding_horizon(
        problem, plant, solver, q0, omega0, init, num_solves, steps_per_solve, max_outer_steps, constraint_tolerance
    )


@filter_jit
def _receding_horizon(problem, plant, solver, q0, omega0, init, num_solves, steps, max_outer_steps, tolerance):
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

    def one_solve(carry, index):
        q, omega, guess, result, failed_step = carry
        solution = solve_in_graph(problem, solver, q, omega, guess, max_outer_steps, tolerance)
        applied = solution.controls[:steps]
        ks = index * steps + jnp.arange(steps)
        ((q, omega), result, failed_step), (qs, omegas) = lax.scan(
            plant_step, ((q, omega), result, failed_step), (ks, applied)
        )
        shifted = jnp.concatenate([solution.controls[steps:], jnp.repeat(solution.controls[-1:], steps, axis=0)])
        solve_result = RESULTS.where(result == RESULTS.successful, solution.result, result)
        outputs = (qs, omegas, applied, solve_result, solution.num_iterations)
        return (q, omega, shifted, result, failed_step), outputs

    carry = (q0, omega0, init, RESULTS.successful, jnp.array(NO_FAILURE))
    final, (qs, omegas, controls, results, iterations) = lax.scan(one_solve, carry, jnp.arange(num_solves))
    q = jnp.concatenate([q0[None], qs.reshape(-1, *q0.shape)])
    omega = jnp.concatenate([omega0[None], omegas.reshape(-1, *q0.shape)])
    t = plant.dt * jnp.arange(q.shape[0], dtype=q0.dtype)
    controls = controls.reshape(-1, *controls.shape[2:])
    return RecedingHorizonSolution(t, q, omega, controls, results, iterations, *final[3:])
