"""Receding-horizon control (model predictive control) with any `s2jax.control` solver."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .._jit import filter_jit
from .._results import RESULTS
from ._problem import Problem
from ._solve import solve_in_graph
from ._solver import AbstractControlSolver


class RecedingHorizonSolution(eqx.Module):
    """What `receding_horizon` returns.

    **Fields:** `t`, `q`, `omega`: the closed-loop trajectory of the plant, (K·s + 1, …) for K
    solves applying s steps each; `controls`: the controls applied, (K·s, …); `results`: each
    solve's result code, (K,); `iterations`: each solve's inner iterations, (K,).
    """

    t: jax.Array
    q: jax.Array
    omega: jax.Array
    controls: jax.Array
    results: RESULTS
    iterations: jax.Array


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
    def one_solve(carry, index):
        q, omega, guess = carry
        solution = solve_in_graph(problem, solver, q, omega, guess, max_outer_steps, tolerance)

        def plant_step(state, xs):
            k, u = xs
            (q1, w1), _ = plant.step((index * steps + k) * plant.dt, *state, u)
            return (q1, w1), (q1, w1)

        applied = solution.controls[:steps]
        ks = jnp.arange(steps, dtype=q.dtype)
        (q, omega), (qs, omegas) = lax.scan(plant_step, (q, omega), (ks, applied))
        shifted = jnp.concatenate([solution.controls[steps:], jnp.repeat(solution.controls[-1:], steps, axis=0)])
        outputs = (qs, omegas, applied, solution.result, solution.num_iterations)
        return (q, omega, shifted), outputs

    indices = jnp.arange(num_solves, dtype=q0.dtype)
    _, (qs, omegas, controls, results, iterations) = lax.scan(one_solve, (q0, omega0, init), indices)
    q = jnp.concatenate([q0[None], qs.reshape(-1, *q0.shape)])
    omega = jnp.concatenate([omega0[None], omegas.reshape(-1, *q0.shape)])
    t = plant.dt * jnp.arange(q.shape[0], dtype=q0.dtype)
    return RecedingHorizonSolution(t, q, omega, controls.reshape(-1, *controls.shape[2:]), results, iterations)
