"""Penalised least squares in one compiled loop: Levenberg–Marquardt stages, then Gauss–Newton
with the constraints held at zero.

The unknowns x ∈ ℝᵖ give data residuals r(x) (N_r numbers) and constraint residuals c(x) (N_c: the
jumps between shooting segments). Stage k minimises the penalised loss

    f_k(x) = |r|²/N_r + w_k |c|²/N_c

by Levenberg–Marquardt steps (Madsen, Nielsen & Tingleff, "Methods for non-linear least squares
problems", 2004, §3.2), warm-started from stage k − 1: a small w_k lets every segment fit its own
data, larger ones join them. A last stage (`refinement_steps` > 0) takes Gauss–Newton steps with
c held at zero to first order (`eliminated_step`), which removes the last jumps and with them the
bias of a finite w.

Everything runs in one `lax.while_loop` whose body linearises once (forward mode over x), so the
program holds one copy of the residuals' Jacobian, and `jax.vmap` solves many problems in one call:
a member that has finished keeps its state while the others go on, so its result is its single
solve's. Nothing calls the host.
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._custom_types import Array, Bool, Float, Int

# A stage whose damping λ grows past this multiple of max diag(JᵀJ) has found no step that lowers
# the loss: x is a minimum to round-off.
_LARGEST_DAMPING = 1e16
# A refinement step that raises the penalised loss by more than this factor overshoots (far from a
# solution); the refinement stops before it. Holding the jumps at zero raises the loss a little.
_REFINEMENT_RISE = 1.5


class Linearisation(eqx.Module):
    """r, c, their Jacobians at x, and whether the residuals could not be evaluated there."""

    data: Float[Array, " Nr"]
    constraint: Float[Array, " Nc"]
    data_jacobian: Float[Array, "Nr p"]
    constraint_jacobian: Float[Array, "Nc p"]
    failed: Bool[Array, ""]


def linearise(residuals: Callable, x: Float[Array, " p"]) -> Linearisation:
    """`residuals(x) = (r, c, failed)` and its Jacobian by forward mode (p columns)."""

    def stacked(x):
        data, constraint, failed = residuals(x)
        return jnp.concatenate([data, constraint]), (data, constraint, failed)

    jacobian, (data, constraint, failed) = jax.jacfwd(stacked, has_aux=True)(x)
    return Linearisation(data, constraint, jacobian[: data.size], jacobian[data.size :], failed)


def _one(flag: Bool[Array, ""]) -> Int[Array, ""]:
    """1 where `flag` holds, else 0 (strict dtype promotion adds no bool to an int)."""
    return flag.astype(int)


def _finite(point: Linearisation) -> Bool[Array, ""]:
    return jnp.all(jnp.isfinite(point.data)) & jnp.all(jnp.isfinite(point.constraint))


def penalised_loss(data, constraint, weight) -> Float[Array, ""]:
    """|r|²/N_r + w |c|²/N_c (the second term absent without constraints)."""
    value = jnp.mean(data**2)
    if constraint.size:
        value = value + weight * jnp.mean(constraint**2)
    return value


def _scaled(point: Linearisation, weight):
    """The residual vector whose square is `penalised_loss`, and its Jacobian; ∞ where failed."""
    data_scale = point.data.size**-0.5
    residual, jacobian = data_scale * point.data, data_scale * point.data_jacobian
    if point.constraint.size:
        scale = jnp.sqrt(weight / point.constraint.size)
        residual = jnp.concatenate([residual, scale * point.constraint])
        jacobian = jnp.concatenate([jacobian, scale * point.constraint_jacobian])
    return jnp.where(point.failed, jnp.inf, residual), jacobian


def _marquardt_scale(normal):
    """D = diag(JᵀJ), entries below 10⁻¹² of the largest raised to it (a column of zeros in J)."""
    diagonal = jnp.diag(normal)
    return jnp.maximum(diagonal, 1e-12 * jnp.maximum(jnp.max(diagonal), jnp.finfo(normal.dtype).tiny))


def eliminated_system(point: Linearisation, dependent: np.ndarray):
    """The data residuals to first order with c held at zero, as functions of the independent unknowns.

    To first order r + J_x δx + J_y δy and c + A δx + B δy, with y the unknowns marked `dependent`
    (the starts of shooting segments 2..S). B has full column rank (each start enters its own jump
    through an invertible chart), so c + A δx + B δy = 0 gives δy = −B⁺(c + A δx), and with it
    J_eff = J_x − J_y B⁺A, r̃ = r − J_y B⁺c (the "condensing" of multiple shooting).

    **Returns:** `(J_eff, r̃, δy(δx))`.
    """
    independent = np.flatnonzero(~dependent)
    if not dependent.any():
        return point.data_jacobian, point.data, lambda dx: jnp.zeros(0, dx.dtype)
    held = np.flatnonzero(dependent)
    inverse = jnp.linalg.pinv(point.constraint_jacobian[:, held])
    elimination = inverse @ point.constraint_jacobian[:, independent]
    offset = inverse @ point.constraint
    effective = point.data_jacobian[:, independent] - point.data_jacobian[:, held] @ elimination
    shifted = point.data - point.data_jacobian[:, held] @ offset
    return effective, shifted, lambda dx: -(offset + elimination @ dx)


def eliminated_step(point: Linearisation, dependent: np.ndarray) -> Float[Array, " p"]:
    """The Gauss–Newton step of the data residuals with c held at zero to first order."""
    effective, shifted, dependent_step = eliminated_system(point, dependent)
    step_x = -jnp.linalg.lstsq(effective, shifted)[0]
    step = jnp.zeros(dependent.shape, step_x.dtype).at[np.flatnonzero(~dependent)].set(step_x)
    return step.at[np.flatnonzero(dependent)].set(dependent_step(step_x))


class LeastSquaresSolution(eqx.Module):
    """The output of `penalised_least_squares`.

    - `x`, `point`: the last accepted unknowns and their linearisation.
    - `history`: the penalised loss at the start of each stage and after each accepted step (NaN
      past `num_values`).
    - `stage_values`: how many entries of `history` each stage wrote.
    - `num_steps`: the loop's iterations (accepted and rejected steps).
    - `converged`: whether the last stage stopped on its tolerance, not on its step cap.
    - `failed_start`: the residuals could not be evaluated at x0, or are not finite there
      (nothing was done).
    """

    x: Float[Array, " p"]
    point: Linearisation
    history: Float[Array, " H"]
    num_values: Int[Array, ""]
    stage_values: Int[Array, " stages"]
    num_steps: Int[Array, ""]
    converged: Bool[Array, ""]
    failed_start: Bool[Array, ""]


def penalised_least_squares(
    residuals: Callable,
    x0: Float[Array, " p"],
    weights: Float[Array, " W"],
    *,
    damped: bool,
    max_steps: int,
    refinement_steps: int,
    rtol: float | Float[Array, ""],
    dependent: np.ndarray,
) -> LeastSquaresSolution:
    """Minimise f_1, …, f_W in turn by Levenberg–Marquardt (`damped`; else start at the refinement),
    then refine with c held at zero.

    **Levenberg–Marquardt.** The step solves (JᵀJ + λD) δ = −Jᵀr, with D = diag(JᵀJ) (Marquardt's
    scaling: the step does not depend on each unknown's units). With ρ the ratio of the actual to
    the predicted decrease, an accepted step (ρ > 0) sets λ ← λ max(1/3, 1 − (2ρ − 1)³), ν ← 2, and a
    rejected one λ ← λν, ν ← 2ν (Nielsen's rule); λ starts each stage at 10⁻³ max D. A point where
    the residuals cannot be evaluated (a failed simulation) is rejected like one that raises the
    loss. A stage ends at an accepted step that lowers f by at most `rtol`·f or moves no unknown by
    more than `rtol`(1 + max|x|) (converged), once λ passes 10¹⁶ max D (converged: no step lowers
    f), or after `max_steps` steps (not converged).

    **Refinement.** Up to `refinement_steps` full steps of `eliminated_step`; a step that raises
    the last stage's f by more than half ends it (the iterate before it is kept), one that moves
    no unknown by more than `rtol` ends it converged.

    `dependent` (static) marks the unknowns held by c in the refinement. The first iteration only
    linearises x0 (so the program traces the Jacobian once).
    """
    if not damped and not refinement_steps:  # only the linearisation at x0 is wanted
        point = linearise(residuals, x0)
        failed = point.failed | ~_finite(point)
        return LeastSquaresSolution(
            x0, point, jnp.full((0,), jnp.nan, x0.dtype), jnp.array(0), jnp.zeros((0,), int), jnp.array(0),
            jnp.array(False), failed,
        )
    num_weights = weights.shape[0]
    first_stage = 0 if damped else num_weights
    last_stage = num_weights if refinement_steps else num_weights - 1
    if first_stage > last_stage:
        raise ValueError("nothing to do: no damped stage and no refinement steps")
    num_stages = last_stage + 1
    # stage starts + accepted steps + the first linearisation
    history_size = num_stages + (num_weights * max_steps if damped else 0) + refinement_steps + 1
    shape = jax.eval_shape(lambda x: linearise(residuals, x), x0)
    blank = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shape)
    dtype = x0.dtype

    def weight_of(stage):
        return weights[jnp.minimum(stage, num_weights - 1)]

    def cond(carry):
        return ~carry["finished"]

    def body(carry):
        point, x, stage = carry["point"], carry["x"], carry["stage"]
        weight = weight_of(stage)
        fresh = carry["steps"] == 0
        residual, jacobian = _scaled(point, weight)
        normal, gradient = jacobian.T @ jacobian, jacobian.T @ residual
        scale = _marquardt_scale(normal)
        value = residual @ residual
        refining = stage == num_weights
        # λ and ν at a stage's start
        damping = jnp.where(fresh, 1e-3 * jnp.max(scale), carry["damping"])
        growth = jnp.where(fresh, 2.0, carry["growth"])

        def damped_step():
            return -jnp.linalg.solve(normal + damping * jnp.diag(scale), gradient)

        step = lax.cond(refining, lambda: eliminated_step(point, dependent), damped_step)
        step = jnp.where(carry["initial"] | ~jnp.all(jnp.isfinite(step)), jnp.zeros_like(step), step)
        candidate = x + step
        new = linearise(residuals, candidate)
        new_residual, _ = _scaled(new, weight)
        new_value = new_residual @ new_residual
        predicted = -(step @ gradient + 0.5 * step @ normal @ step)
        ratio = (value - new_value) / jnp.where(predicted > 0, predicted, 1.0)
        finite = jnp.isfinite(new_value)
        accept = jnp.where(
            refining, finite & (new_value <= _REFINEMENT_RISE * value), finite & (predicted > 0) & (ratio > 0)
        )
        accept = accept | carry["initial"]
        moved = jnp.max(jnp.abs(step), initial=0.0)
        small = (moved <= rtol * (1.0 + jnp.max(jnp.abs(candidate), initial=0.0))) | (
            ~refining & (value - new_value <= rtol * new_value)
        )

        history, count, stage_values = carry["history"], carry["count"], carry["stage_values"]
        # A stage's first iteration records f at its start (with its weight).
        record_start = fresh & ~carry["initial"]
        history = jnp.where(record_start, history.at[count].set(value), history)
        stage_values = stage_values.at[stage].add(_one(record_start))
        count = count + _one(record_start)
        record = accept & ~carry["initial"]
        history = jnp.where(record, history.at[count].set(new_value), history)
        stage_values = stage_values.at[stage].add(_one(record))
        count = count + _one(record)

        damping = jnp.where(
            accept, damping * jnp.maximum(1.0 / 3.0, 1.0 - (2.0 * ratio - 1.0) ** 3), damping * growth
        )
        growth = jnp.where(accept, 2.0, 2.0 * growth)
        steps = carry["steps"] + _one(~carry["initial"])
        cap = jnp.where(refining, refinement_steps, max_steps)
        converged_now = (accept & small) | (~refining & (damping > _LARGEST_DAMPING * jnp.max(scale)))
        stage_over = ~carry["initial"] & (converged_now | (steps >= cap) | (refining & ~accept))
        # Each accepted refinement step gives its verdict; a rejected one keeps the last.
        refined = refining & accept & ~carry["initial"]
        converged = jnp.where(refined | (stage_over & ~refining), converged_now, carry["converged"])
        failed_start = carry["initial"] & (new.failed | ~_finite(new))
        finished = failed_start | (stage_over & (stage == last_stage))
        point = jax.tree.map(lambda a, b: jnp.where(accept, a, b), new, point)
        return dict(
            point=point, x=jnp.where(accept, candidate, x), stage=stage + _one(stage_over),
            steps=jnp.where(stage_over, 0, steps), damping=damping, growth=growth, history=history, count=count,
            stage_values=stage_values, iterations=carry["iterations"] + _one(~carry["initial"]),
            converged=converged, finished=finished, initial=jnp.array(False), failed_start=failed_start,
        )

    carry = dict(
        point=blank, x=x0, stage=jnp.array(first_stage), steps=jnp.array(0), damping=jnp.asarray(1.0, dtype),
        growth=jnp.asarray(2.0, dtype), history=jnp.full((history_size,), jnp.nan, dtype), count=jnp.array(0),
        stage_values=jnp.zeros((num_stages,), int), iterations=jnp.array(0), converged=jnp.array(False),
        finished=jnp.array(False), initial=jnp.array(True), failed_start=jnp.array(False),
    )
    carry = lax.while_loop(cond, body, carry)
    return LeastSquaresSolution(
        carry["x"], carry["point"], carry["history"], carry["count"], carry["stage_values"], carry["iterations"],
        carry["converged"], carry["failed_start"],
    )
