"""Fidelity to the continuous system: how far a model's trajectory runs from the continuous
equations it discretises, and the sub-steps that bring that within a tolerance.

`s2jax.control.solve` and `s2jax.fit` optimise a *discrete* model: the integrator at the step h of
the controls or the data. Their answers are exact for it and off for the continuous system by the
integrator's error, O((h / s)^p) with s sub-steps per step (`Substeps`). Both estimate that miss
(`continuous_miss`) and refine s until it is within a fidelity (`next_substeps`).
"""

import jax.numpy as jnp
import numpy as np

from ._custom_types import Array, Float
from ._integrators import RungeKutta4
from ._integrators.substeps import sub_stepped
from ._plan import Plan
from ._results import RESULTS
from ._simulate import simulate_plan

DEFAULT_FIDELITY = 1e-2
"""The continuous-time miss accepted by default (0.6° of a body's direction, 0.01 rad/s)."""
MISS_REFINEMENT = 8
"""Reference steps per model sub-step: `RungeKutta4` at h / (8 · substeps)."""
MAX_SUBSTEPS = 64
"""The most sub-steps per step a refinement takes."""
_MARGIN = 1.25  # the refinement aims at the fidelity / 1.25, so that one refinement usually suffices


def continuous_miss(system, params, dt, substeps, q, omega, controls=None) -> Float[Array, ""]:
    """How far the continuous system runs from a model's trajectory.

    The model's states (q_k, ω_k), k = 0 … N, one step h = `dt` apart (`substeps` sub-steps of
    the model's integrator each), are compared with a re-simulation from (q_0, ω_0) by
    `RungeKutta4` at h / (`MISS_REFINEMENT` · substeps), the `controls` held over each step (zero-
    order hold): its error, O(h⁴) at a step 8 times finer, is far below the model's.

    **Arguments:** the planned `system` (its form and params checked by the caller's plan: the
    reference runs it without a plan of its own, `simulate_plan`) and its `params`; `dt`; the
    model's `substeps`, an int or an integer array (then a value of the program, as in
    `RuntimeSubsteps`: forward mode only); its states `q`, `omega` (N + 1, n, 3); the `controls`
    (N, …) that drove it, or None.

    **Returns:** max over k and the bodies i of max(|q_k,i − q̂_i(t_k)|, |ω_k,i − ω̂_i(t_k)|),
    dimensionless in q (a unit vector), rad/s in ω; NaN where the reference failed.
    """
    reference = simulate_plan(
        Plan(system, sub_stepped(RungeKutta4(), MISS_REFINEMENT * substeps)), q[0], omega[0], params, dt=dt,
        num_steps=q.shape[0] - 1, controls=controls,
    )
    miss_q = jnp.max(jnp.linalg.norm(q - reference.q, axis=-1))
    miss_omega = jnp.max(jnp.linalg.norm(omega - reference.omega, axis=-1))
    return jnp.where(reference.result == RESULTS.successful, jnp.maximum(miss_q, miss_omega), jnp.nan)


def next_substeps(substeps: int, miss: float, fidelity: float, order: int) -> int:
    """The sub-steps that should bring a miss `miss` at `substeps` within `fidelity`: the power of
    two at or above substeps · (1.25 miss / fidelity)^{1/order} (the miss falls as (h / s)^order),
    at least twice `substeps` (double it for a NaN miss), at most `MAX_SUBSTEPS`."""
    factor = (_MARGIN * miss / fidelity) ** (1.0 / order) if np.isfinite(miss) else 2.0
    return min(MAX_SUBSTEPS, substeps * 2 ** max(1, int(np.ceil(np.log2(factor)))))
