"""`_least_squares.levenberg_marquardt` against closed forms: a linear problem (the normal
equations' solution), Rosenbrock's valley (minimum at (1, 1)), and a point where the residuals
cannot be evaluated."""

import numpy as np
import pytest

from s2jax._least_squares import levenberg_marquardt


def test_a_linear_problem_ends_at_the_least_squares_solution():
    rng = np.random.default_rng(0)
    matrix, target = rng.normal(size=(30, 4)), rng.normal(size=30)
    x, history, converged = levenberg_marquardt(
        lambda x: (matrix @ x - target, matrix), np.zeros(4), max_steps=50, rtol=1e-14
    )
    assert converged
    best = np.linalg.lstsq(matrix, target, rcond=None)[0]
    minimum = float(np.sum((matrix @ best - target) ** 2))
    # The test stops on the loss, which is flat at a minimum: a loss within rtol of the least
    # one puts x within ~√rtol |r| / σ_min of it (here ~1e-7), not within rtol.
    assert history[-1] - minimum <= 1e-14 * minimum
    np.testing.assert_allclose(x, best, atol=1e-6)
    assert all(b <= a for a, b in zip(history, history[1:]))


def test_rosenbrock_reaches_its_minimum():
    def linearise(x):
        residuals = np.array([10.0 * (x[1] - x[0] ** 2), 1.0 - x[0]])
        return residuals, np.array([[-20.0 * x[0], 10.0], [-1.0, 0.0]])

    x, history, converged = levenberg_marquardt(linearise, np.array([-1.2, 1.0]), max_steps=200, rtol=1e-15)
    assert converged
    np.testing.assert_allclose(x, [1.0, 1.0], atol=1e-8)
    assert history[-1] < 1e-16 < history[0]


def test_a_step_to_where_the_residuals_fail_is_rejected():
    # r(x) = x − 3 on x < 2 (the residuals cannot be evaluated beyond, like a failed simulation):
    # the full step from 0 lands on 3 and is rejected; damped steps approach 2 from below.
    def linearise(x):
        if x[0] >= 2.0:
            return np.full(1, np.inf), np.ones((1, 1))
        return x - 3.0, np.ones((1, 1))

    x, history, _ = levenberg_marquardt(linearise, np.zeros(1), max_steps=100, rtol=1e-12)
    assert 1.9 < x[0] < 2.0
    assert np.all(np.isfinite(history)) and all(b < a for a, b in zip(history, history[1:]))


def test_a_start_that_cannot_be_evaluated_is_refused():
    with pytest.raises(ValueError, match="not finite"):
        levenberg_marquardt(lambda x: (np.full(1, np.nan), np.ones((1, 1))), np.zeros(1), max_steps=5, rtol=1e-12)
