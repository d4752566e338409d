"""`ControlSolution.summary()` and `repr(ControlSolution)`: what a solve did, without its arrays.

The solutions are built by hand (no solve, nothing compiled), so every number the text shows is
known; tests/test_progress.py checks the per-round fields of a real solve.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax import RESULTS

DT = 0.1
TARGET = np.array([[0.0, 0.6, 0.8]])
CONTROLS = np.array([[1.0, -0.5, 0.0], [0.25, 1.0, -1.0], [0.0, 0.0, 0.5], [-0.75, 0.0, 0.0]])


def _solution(
    result=RESULTS.successful, rounds=3, max_rounds=5, cost=1.25, scale=1.0, miss=2.5e-3
) -> s2.control.ControlSolution:
    """Four steps of a spherical pendulum at rest, q_N = (0.6, 0, 0.8) and ω_N = (0, 0, 0.5)."""
    q = np.tile([[0.0, 0.0, 1.0]], (5, 1, 1))
    q[-1] = [[0.6, 0.0, 0.8]]
    omega = np.zeros((5, 1, 3))
    omega[-1] = [[0.0, 0.0, 0.5]]
    iterations = np.zeros(max_rounds, int)
    iterations[:rounds] = np.arange(rounds) + 2
    violations = np.full(max_rounds, np.nan)
    violations[:rounds] = 0.5 * 10.0 ** -(3 * np.arange(rounds))
    history = np.full(4 * max_rounds, np.nan)
    history[: iterations.sum()] = np.linspace(3.0, cost, iterations.sum())
    return s2.control.ControlSolution(
        jnp.asarray(scale * CONTROLS), DT * jnp.arange(5.0), jnp.asarray(q), jnp.asarray(omega), jnp.asarray(cost),
        jnp.asarray(history), jnp.asarray(violations[rounds - 1]), result, jnp.asarray(iterations.sum()),
        jnp.asarray(rounds), jnp.asarray(iterations), jnp.asarray(violations), jnp.zeros(6), jnp.asarray(10.0),
        jnp.asarray(miss), 2,
    )


def _problem() -> s2.control.Problem:
    target = jnp.asarray(TARGET)
    return s2.control.Problem(
        s2.models.spherical_pendulum.lagrangian, {"m": 1.0, "r": 1.0, "g": 9.81}, s2.forces.PivotTorque(0), DT, 4,
        running_cost=lambda t, q, omega, u: jnp.sum(u**2), terminal_cost=lambda q, omega: jnp.sum(omega**2),
        terminal_constraint=lambda q, omega: (q - target).ravel(), lower=-jnp.ones(3), upper=jnp.ones(3),
    )


def _stack(*solutions):
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *solutions)


def test_the_summary_of_one_solve_shows_its_fields():
    lines = _solution().summary().splitlines()
    largest_norm = np.sqrt(0.25**2 + 1.0 + 1.0)  # u_1
    assert lines == [
        "ControlSolution: RESULTS.successful (converged: the inner solve met its tolerance and max|c| ≤ "
        "constraint_tolerance)",
        "  cost J = 1.25; constraint violation max|c| = 5.00e-07",
        "  iterations: 9 inner in 3 augmented-Lagrangian rounds; max|c| after each: 5.0e-01, 5.0e-04, 5.0e-07",
        f"  controls: 4 steps of shape (3,), components from -1 to 1, max |u_k| = {largest_norm:.4g}",
        "  continuous-time miss 2.50e-03 (the continuous system driven by these controls, against the model at 2 "
        "sub-steps per step)",
    ]
    # MPC's solves do not estimate it
    assert "  continuous-time miss not estimated (" in _solution(miss=np.nan).summary()


def test_the_summary_with_the_problem_splits_the_cost_and_measures_the_target_and_the_bounds():
    """Σ h ℓ = 0.1 Σ|u|², Φ = |ω_N|² = 0.25, |c| = |q_N − target| = 0.6 √2, and 3 of 12
    components at ±1."""
    text = _solution().summary(_problem())
    running = DT * np.sum(CONTROLS**2)
    assert text.splitlines()[5:] == [
        f"  J = running Σ h ℓ {running:.6g} + terminal Φ 0.25; terminal constraint |c(q_N, ω_N)| = "
        f"{0.6 * np.sqrt(2):.2e}",
        "  25.0 % of the control components at a bound",
    ]
    # Strictly inside the box (as the shooting solvers' tanh keeps them): none at a bound.
    assert "  0.0 % of the control components at a bound" in _solution(scale=0.999).summary(_problem())


@pytest.mark.parametrize(
    ("rounds", "max_rounds", "reason"),
    [
        (2, 5, "stopped after round 2 of at most 5: it lowered neither the constraint violation nor the cost"),
        (5, 5, "max_outer_steps = 5 rounds ran without meeting both tolerances"),
        (1, 1, "after its only round, the inner solve had not converged within max_steps"),
    ],
)
def test_the_summary_says_why_a_solve_did_not_converge(rounds, max_rounds, reason):
    solution = _solution(RESULTS.optimisation_not_converged, rounds=rounds, max_rounds=max_rounds)
    first = solution.summary().splitlines()[0]
    assert first.startswith(f"ControlSolution: RESULTS.optimisation_not_converged ({reason}")
    other = _solution(RESULTS.nonfinite_state).summary().splitlines()[0]
    assert other == f"ControlSolution: RESULTS.nonfinite_state ({RESULTS[RESULTS.nonfinite_state]})"


def test_the_summary_of_a_batch_counts_the_results_and_lists_the_first_members():
    members = [_solution(cost=1.0 + k) for k in range(12)]
    members[3] = _solution(RESULTS.optimisation_not_converged, rounds=2, cost=9.5)
    batch = _stack(*members)
    lines = batch.summary(_problem()).splitlines()
    assert lines[0] == (
        "ControlSolution: a batch of 12, 4 steps of controls of shape (3,) each, the model at 2 sub-steps per step"
    )
    assert lines[1] == "  11 of 12 successful (optimisation_not_converged: 1)"
    assert len(lines) == 2 + 10 + 1
    assert lines[2].startswith(
        "  [0] RESULTS.successful; J = 1, max|c| = 5.00e-07, miss 2.50e-03, 9 iterations in 3 rounds, u from -1 to 1; "
        "|c(q_N, ω_N)|"
    )
    assert lines[5] == (
        "  [3] RESULTS.optimisation_not_converged; J = 9.5, max|c| = 5.00e-04, miss 2.50e-03, 5 iterations in 2 "
        f"rounds, u from -1 to 1; |c(q_N, ω_N)| = {0.6 * np.sqrt(2):.2e}, 25.0 % at a bound"
    )
    assert lines[-1] == "  … 2 more; over all members: J from 1 to 12, max|c| ≤ 5.00e-04, 5 to 9 iterations"


def test_repr_shows_shapes_and_the_result_by_name():
    text = repr(_solution())
    assert text.startswith("ControlSolution(controls=f64[4,3], t=f64[5], q=f64[5,1,3], omega=f64[5,1,3], cost=f64[],")
    assert "result=RESULTS.successful, num_iterations=9, num_outer_iterations=3" in text
    assert "RESULTS<" not in text
    batch = repr(_stack(_solution(), _solution(RESULTS.optimisation_not_converged)))
    assert "result=RESULTS[successful, optimisation_not_converged]" in batch and "RESULTS<" not in batch


def test_the_summary_needs_concrete_arrays_and_the_problem_solved():
    with pytest.raises(ValueError, match="outside jax.jit"):
        jax.jit(lambda solution: len(solution.summary()))(_solution())
    with pytest.raises(TypeError, match="the s2jax.control.Problem solved"):
        _solution().summary("the problem")
