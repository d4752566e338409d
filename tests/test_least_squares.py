"""`_optimisation.least_squares.penalised_least_squares` against closed forms: a linear problem (the
normal equations' solution), Rosenbrock's valley (minimum at (1, 1)), a point where the residuals
cannot be evaluated, a start that cannot, and the refinement with constraints held at zero (the
KKT solution of equality-constrained linear least squares)."""

import jax
import jax.numpy as jnp
import numpy as np

from s2jax._optimisation.least_squares import penalised_least_squares

NO_CONSTRAINT = jnp.zeros(0)


def _solve(residuals, x0, *, weights=(1.0,), damped=True, max_steps=100, refinement_steps=0, rtol=1e-14,
           dependent=None):
    dependent = np.zeros(np.size(x0), bool) if dependent is None else dependent
    run = jax.jit(
        lambda x0: penalised_least_squares(
            residuals, x0, jnp.asarray(weights), damped=damped, max_steps=max_steps,
            refinement_steps=refinement_steps, rtol=rtol, dependent=dependent,
        )
    )
    return run(jnp.asarray(x0, float))


def _history(solution):
    return np.asarray(solution.history)[: int(solution.num_values)]


def test_a_linear_problem_ends_at_the_least_squares_solution():
    rng = np.random.default_rng(0)
    matrix, target = rng.normal(size=(30, 4)), rng.normal(size=30)
    solution = _solve(lambda x: (matrix @ x - target, NO_CONSTRAINT, False), np.zeros(4))
    assert bool(solution.converged) and not bool(solution.failed_start)
    best = np.linalg.lstsq(matrix, target, rcond=None)[0]
    minimum = float(np.mean((matrix @ best - target) ** 2))
    history = _history(solution)
    # The test stops on the loss, which is flat at a minimum: a loss within rtol of the least
    # one puts x within ~√rtol |r| / σ_min of it (here ~1e-7), not within rtol.
    assert history[-1] - minimum <= 1e-14 * minimum
    np.testing.assert_allclose(solution.x, best, atol=1e-6)
    assert np.all(np.diff(history) <= 0)


def test_rosenbrock_reaches_its_minimum():
    def residuals(x):
        return jnp.stack([10.0 * (x[1] - x[0] ** 2), 1.0 - x[0]]), NO_CONSTRAINT, False

    solution = _solve(residuals, [-1.2, 1.0], max_steps=200, rtol=1e-15)
    assert bool(solution.converged)
    np.testing.assert_allclose(solution.x, [1.0, 1.0], atol=1e-8)
    history = _history(solution)
    assert history[-1] < 1e-16 < history[0]


def test_a_step_to_where_the_residuals_fail_is_rejected():
    # r(x) = x − 3 on x < 2 (the residuals cannot be evaluated beyond, like a failed simulation):
    # the full step from 0 lands on 3 and is rejected; damped steps approach 2 from below.
    def residuals(x):
        return x - 3.0, NO_CONSTRAINT, x[0] >= 2.0

    solution = _solve(residuals, np.zeros(1), rtol=1e-12)
    assert 1.9 < float(solution.x[0]) < 2.0
    history = _history(solution)
    assert np.all(np.isfinite(history)) and np.all(np.diff(history) < 0)


def test_a_start_that_cannot_be_evaluated_is_reported():
    solution = _solve(lambda x: (x * jnp.nan, NO_CONSTRAINT, False), np.zeros(1))
    assert bool(solution.failed_start) and not bool(solution.converged)
    np.testing.assert_array_equal(solution.x, [0.0])


def test_refinement_holds_the_constraints_and_ends_at_the_kkt_solution():
    """min |A x − b|² subject to C x = d, x = (x_free, y) with y (2 unknowns) held by the 2
    constraints: penalty stages approach it, one refinement step lands on it (the problem is
    linear), as the KKT system [2AᵀA Cᵀ; C 0] [x; λ] = [2Aᵀb; d] gives it."""
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(20, 5)), rng.normal(size=20)
    c, d = rng.normal(size=(2, 5)), rng.normal(size=2)
    kkt = np.block([[2 * a.T @ a, c.T], [c, np.zeros((2, 2))]])
    exact = np.linalg.solve(kkt, np.concatenate([2 * a.T @ b, d]))[:5]
    dependent = np.array([False, False, False, True, True])
    solution = _solve(
        lambda x: (a @ x - b, c @ x - d, False), np.zeros(5), weights=(1e-2, 1.0), refinement_steps=3,
        dependent=dependent,
    )
    np.testing.assert_allclose(solution.x, exact, atol=1e-10)
    assert float(jnp.max(jnp.abs(c @ solution.x - d))) < 1e-12
    assert bool(solution.converged)
    # a start value per stage, then each accepted step
    assert np.asarray(solution.stage_values).tolist()[-1] >= 2


def test_members_of_a_batch_end_where_they_would_alone():
    """Under `jax.vmap` a member that has converged keeps its state while others iterate."""
    def run(x0):
        return penalised_least_squares(
            lambda x: (jnp.stack([10.0 * (x[1] - x[0] ** 2), 1.0 - x[0]]), NO_CONSTRAINT, False), x0,
            jnp.ones(1), damped=True, max_steps=200, refinement_steps=0, rtol=1e-15, dependent=np.zeros(2, bool),
        )

    starts = jnp.array([[-1.2, 1.0], [0.9, 0.8], [2.0, 4.5]])
    batch = jax.jit(jax.vmap(run))(starts)
    for i, start in enumerate(starts):
        alone = jax.jit(run)(start)
        np.testing.assert_allclose(batch.x[i], alone.x, rtol=0, atol=1e-15)
        assert int(batch.num_steps[i]) == int(alone.num_steps)
