"""Levenberg–Marquardt for the penalised least-squares loss of `fit`.

Each iteration needs the residuals and their Jacobian, which `fit` computes in one compiled
program (`fit._linearise`, forward mode over the unknowns); a rejected step reuses the last
Jacobian. That program is also the one the Gauss–Newton refinement and the covariance need, so a
fit by this method compiles it alone: an optax L-BFGS iteration traces the loss and its gradient
at three sites (the line search's two phases and the fallback of `value_and_grad_from_state`),
each compiled in full.
"""

from collections.abc import Callable

import numpy as np


def _marquardt_scale(normal: np.ndarray) -> np.ndarray:
    """D = diag(JᵀJ), entries below 10⁻¹² of the largest raised to it (a column of zeros in J)."""
    diagonal = np.diag(normal)
    return np.maximum(diagonal, 1e-12 * max(float(np.max(diagonal)), np.finfo(float).tiny))


def levenberg_marquardt(
    linearise: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    x: np.ndarray,
    *,
    max_steps: int,
    rtol: float,
    on_value: Callable[[float], None] = lambda value: None,
) -> tuple[np.ndarray, list[float], bool]:
    """Minimise |r(x)|² from x by Levenberg–Marquardt steps.

    `linearise(x)` returns (r(x), J(x)), with r = ∞ (any entry) where the residuals cannot be
    evaluated (a failed simulation): such a point is rejected like one that raises the loss.

    The step solves (JᵀJ + λ D) δ = −Jᵀr with D = diag(JᵀJ) (Marquardt's scaling, which makes
    the step independent of the units of each unknown; entries below 10⁻¹² of the largest are
    raised to it). λ follows Nielsen's rule (Madsen, Nielsen & Tingleff, "Methods for non-linear
    least squares problems", 2004, §3.2): with ρ the ratio of the actual to the predicted
    decrease, an accepted step (ρ > 0) sets λ ← λ max(1/3, 1 − (2ρ − 1)³), ν ← 2, and a rejected
    one λ ← λν, ν ← 2ν. λ starts at 10⁻³ max D.

    Stops at an accepted step that lowers the loss by at most `rtol` × loss or moves no unknown
    by more than `rtol` (1 + max|x|), or once λ grows past 10¹⁶ max D (no step lowers the loss:
    x is a minimum to round-off).

    `on_value` is called with the loss at x and at each accepted iterate (`fit`'s progress).

    **Returns:** `(x, history, converged)`: the last accepted x, the loss at x and at each
    accepted iterate, and whether a stopping test (not `max_steps`) ended the iterations.
    """
    residuals, jacobian = linearise(x)
    value = float(residuals @ residuals)
    if not np.isfinite(value):
        raise ValueError("the residuals at the starting point are not finite")
    history = [value]
    on_value(value)
    normal, gradient = jacobian.T @ jacobian, jacobian.T @ residuals
    scale = _marquardt_scale(normal)
    largest = float(np.max(scale))
    damping, growth = 1e-3 * largest, 2.0
    for _ in range(max_steps):
        try:
            step = -np.linalg.solve(normal + damping * np.diag(scale), gradient)
        except np.linalg.LinAlgError:
            step = np.full_like(x, np.nan)
        predicted = -(step @ gradient + 0.5 * step @ normal @ step)
        candidate = x + step
        new_residuals, new_jacobian = linearise(candidate) if np.all(np.isfinite(step)) else (step, None)
        new_value = float(new_residuals @ new_residuals)
        ratio = (value - new_value) / predicted if predicted > 0 else -1.0
        if np.isfinite(new_value) and ratio > 0:
            x, residuals, jacobian = candidate, new_residuals, new_jacobian
            normal, gradient = jacobian.T @ jacobian, jacobian.T @ residuals
            scale = _marquardt_scale(normal)
            decrease = value - new_value
            value = new_value
            history.append(value)
            on_value(value)
            damping *= max(1.0 / 3.0, 1.0 - (2.0 * ratio - 1.0) ** 3)
            growth = 2.0
            if decrease <= rtol * value or np.max(np.abs(step)) <= rtol * (1.0 + np.max(np.abs(x))):
                return x, history, True
        else:
            damping *= growth
            growth *= 2.0
            if damping > 1e16 * largest:
                return x, history, True
    return x, history, False
