"""Parameter identification: fit a model's parameters to observed directions by multiple shooting.

The observation window [0, t_J] is cut into S segments. Segment 1 starts at the given state
(q0, ω0) (or at a fitted one); segments 2..S start at states of their own, fitted together
with the parameters, and the jumps between the end of a segment and the start of the next are
penalised. Over a long window a trajectory depends so sensitively on the parameters that the
single-shooting loss (S = 1) is a narrow valley among plateaus and spurious local minima;
short segments keep each simulation close to its linearisation.
"""

import dataclasses
import math
import numbers
import warnings
from collections.abc import Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from ._chart import tangent_basis
from ._custom_types import Array, ArrayLike, Float, Int, Lagrangian, Params
from ._errors import SimulationError
from ._fidelity import DEFAULT_FIDELITY, MAX_SUBSTEPS, continuous_miss, next_substeps
from ._fit_progress import FitProgress
from ._integrators import AbstractIntegrator, Substeps
from ._jit import filter_jit
from ._least_squares import levenberg_marquardt
from ._optimise import minimise, named_optimizer
from ._plan import LINEARISED, plan
from ._results import RESULTS
from ._shooting import MultipleShooting
from ._simulate import simulate


class FitResult(eqx.Module):
    """The output of `fit`.

    **Fields:**

    - `params`: the model's parameters, the free ones replaced by their fitted values.
    - `standard_errors`: for each free key, an array of the shape of `params[key]`: the square
      roots of the diagonal of `covariance`.
    - `covariance`: the Gauss–Newton covariance of the free parameters, shape (p, p), over the
      free values flattened in the order of `free` (each raveled).
    - `noise_std`: the σ behind `covariance`: the one given, or the one estimated.
    - `loss_history`: the loss at each iterate: the optimiser's, one continuity weight after
      another, then the Gauss–Newton refinement's (at the last weight).
    - `converged`: whether the last phase stopped on its tolerance rather than its step count.
    - `segment_times`, `segment_q`, `segment_omega`: the start time and state of each segment,
      shapes (S,), (S, n, 3), (S, n, 3).
    - `predicted`: the model's directions of the observed bodies at the observation times,
      shape (J, b, 3).
    - `continuity_defect`: the largest jump max |q_end − q_start| between the end of a segment
      and the start of the next (0 for a single segment).
    - `reduced_chi_squared`: the goodness of fit, χ²/ν of the residuals against a noise level
      that does not come from them: the `noise_std` given, or else the noise along the radius
      read from the observations' lengths (see `fit`); ≈ 1 for a model that fits its data, NaN
      when there is no such noise level (σ estimated from unit-length observations: χ²/ν would
      be 1 by construction).
    - `reduced_chi_squared_limit`: its upper 10⁻³ quantile for a model that fits (`fit` warns
      past it); NaN with `reduced_chi_squared`.
    - `continuous_miss`: how far the continuous system runs from the fitted model, the largest
      distance over each segment's run from its fitted start (in q, and in ω in rad/s; see
      `fit`'s `fidelity`); NaN with `fidelity=None`.
    - `substeps`: the integrator's sub-steps per step of the model fitted (1 unless `fit` refined
      it to meet the fidelity); `s2jax.Substeps(integrator, substeps)` runs it.
    """

    params: Params
    standard_errors: dict
    covariance: Float[Array, "p p"]
    noise_std: Float[Array, ""]
    loss_history: Float[Array, " iterations"]
    converged: bool
    segment_times: Float[Array, " S"]
    segment_q: Float[Array, "S n 3"]
    segment_omega: Float[Array, "S n 3"]
    predicted: Float[Array, "J b 3"]
    continuity_defect: Float[Array, ""]
    reduced_chi_squared: Float[Array, ""]
    reduced_chi_squared_limit: Float[Array, ""]
    continuous_miss: Float[Array, ""] = float("nan")
    substeps: int = eqx.field(static=True, default=1)


class _FitProblem(eqx.Module):
    """The residuals of a multiple-shooting fit as functions of z = (log θ, chart coordinates)."""

    shooting: MultipleShooting
    free: tuple[str, ...] = eqx.field(static=True)
    params: Params  # the known ones
    segment: Int[Array, " J"]
    step: Int[Array, " J"]
    bodies: Int[Array, " b"]
    observations: Float[Array, "J b 3"]
    continuity_weight: Float[Array, ""]

    def residuals(self, z):
        """Data residuals (J, b, 3), continuity jumps (S − 1, 2, n, 3), and a failure flag."""
        log_theta, coordinates = z
        params = {**self.params, **{key: jnp.exp(x) for key, x in zip(self.free, log_theta)}}
        q, _, jumps, failed = self.shooting.run(params, coordinates)
        predicted = q[self.segment, self.step][:, self.bodies]
        return predicted - self.observations, jumps, failed

    def objective(self, data, jumps, failed):
        """mean(data residual²) + w mean(jump²); +∞ if a step failed."""
        value = jnp.mean(data**2)
        if jumps.size:
            value = value + self.continuity_weight * jnp.mean(jumps**2)
        return jnp.where(failed, jnp.inf, value)

    def loss(self, z):
        return self.objective(*self.residuals(z))


@filter_jit
def _linearise(problem, z):
    """The Jacobian of (data residuals, jumps) w.r.t. flattened z, and the residuals."""
    flat, unravel = ravel_pytree(z)

    def residuals(x):
        data, jumps, failed = problem.residuals(unravel(x))
        return jnp.concatenate([data.ravel(), jumps.ravel()]), (data, jumps, failed)

    return jax.jacfwd(residuals, has_aux=True)(flat)


def _penalised_least_squares(problem, z, max_steps, rtol, on_value):
    """`levenberg_marquardt` on `problem.loss` = |r|², r = (data/√N_d, √(w/N_j) jumps), from z."""
    flat, unravel = ravel_pytree(z)
    weight = float(problem.continuity_weight)

    def linearise(x):
        jacobian, (data, jumps, failed) = _linearise(problem, unravel(jnp.asarray(x)))
        jump_scale = (weight / max(jumps.size, 1)) ** 0.5
        scale = np.concatenate([np.full(data.size, data.size**-0.5), np.full(jumps.size, jump_scale)])
        residuals = scale * np.concatenate([np.ravel(data), np.ravel(jumps)])
        if bool(failed):
            residuals = np.full_like(residuals, np.inf)
        return residuals, scale[:, None] * np.asarray(jacobian)

    x, history, converged = levenberg_marquardt(
        linearise, np.asarray(flat), max_steps=max_steps, rtol=rtol, on_value=on_value
    )
    return unravel(jnp.asarray(x)), history, converged


def _eliminate_starts(jacobian, independent, data, jumps):
    """Linearise with the jumps held at zero: the data residuals as r̃ + J_eff δx.

    To first order the data residuals are r + J_x δx + J_y δy and the jumps d + A δx + B δy,
    with x the independent unknowns (log θ, and the start of segment 1 if fitted) and y the
    starts of segments 2..S. B has full column rank (each start enters its own jump through an
    invertible chart), so d + A δx + B δy = 0 gives δy = −B⁺(d + A δx), and with it
    J_eff = J_x − J_y B⁺A, r̃ = r − J_y B⁺d (the "condensing" of multiple shooting).

    **Returns:** `(J_eff, r̃, δy(δx))`.
    """
    data_rows, jump_rows = jacobian[: data.size], jacobian[data.size :]
    if np.all(independent):
        return data_rows, data.ravel(), lambda dx: jnp.zeros(0)
    dependent = ~independent
    inverse = jnp.linalg.pinv(jump_rows[:, dependent])
    elimination, offset = inverse @ jump_rows[:, independent], inverse @ jumps.ravel()
    effective = data_rows[:, independent] - data_rows[:, dependent] @ elimination
    shifted = data.ravel() - data_rows[:, dependent] @ offset
    return effective, shifted, lambda dx: -(offset + elimination @ dx)


def _grid_steps(times, dt) -> np.ndarray:
    times = np.asarray(times, dtype=float)
    if times.ndim != 1 or times.size == 0:
        raise ValueError(f"times must have shape (J,) with J ≥ 1; got {times.shape}")
    for j, t in enumerate(times):
        if not np.isfinite(t) or t < 0:
            raise ValueError(f"times[{j}] = {t} is outside the horizon: it must be finite and ≥ 0")
    steps = np.rint(times / dt).astype(int)
    off_grid = np.abs(times / dt - steps) > 1e-6
    if np.any(off_grid):
        j = int(np.argmax(off_grid))
        raise ValueError(f"times[{j}] = {times[j]} is not a multiple of dt = {dt}")
    if np.any(np.diff(steps) <= 0):
        j = int(np.argmax(np.diff(steps) <= 0)) + 1
        raise ValueError(f"times must be strictly increasing; times[{j}] = {times[j]} is not")
    return steps


def _count(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an int ≥ {minimum}; got {value!r}")
    return int(value)


def _positive(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a finite positive number; got {value!r}")
    return float(value)


# The standard normal's upper 10⁻³ quantile: a model that fits its data is flagged in 1 fit of 1000.
_UPPER_QUANTILE_Z = 3.090232306167813
# Observations whose lengths are 1 within this (rms) were normalised, or are noise-free: their
# lengths say nothing about σ.
_UNIT_LENGTH_RMS = 1e-9


def _reduced_chi_squared_limit(dof: int, noise_dof: float = math.inf) -> float:
    """The upper 10⁻³ quantile of χ²_ν/ν (σ known), or of F(ν, ν₂) (σ² estimated on ν₂ other
    degrees of freedom), without scipy: the cube-root normal approximation of Wilson & Hilferty
    (1931), in Paulson's (1942) form for F, ((1 − b) x − (1 − a)) / √(a + b x²) = z with x = F^{1/3},
    a = 2/(9ν), b = 2/(9ν₂), solved for x. Within 2 % of the exact quantile for ν, ν₂ ≥ 10, and
    above it (fewer false alarms) for smaller ν."""
    z, a, b = _UPPER_QUANTILE_Z, 2 / (9 * dof), 2 / (9 * noise_dof)
    quadratic, linear, constant = (1 - b) ** 2 - z * z * b, -2 * (1 - a) * (1 - b), (1 - a) ** 2 - z * z * a
    root = (-linear + math.sqrt(linear * linear - 4 * quadratic * constant)) / (2 * quadratic)
    return root**3


def _goodness_of_fit(residuals, predicted, lengths, noise_std, num_unknowns):
    """χ²/ν of the data residuals against a noise level that is not estimated from them, its
    10⁻³ limit, ν and the noise level's origin; NaNs (and ν = 0) when there is none (see `fit`)."""
    nothing = (math.nan, math.nan, 0, "")
    if noise_std is not None:  # every component of the residual is noise: ν = 3Jb − p
        dof = residuals.size - num_unknowns
        if dof <= 0:
            return nothing
        value = float(np.sum(residuals**2)) / (noise_std**2 * dof)
        return value, _reduced_chi_squared_limit(dof), dof, f"the given noise_std = {noise_std:.3g}"
    # |q̃| − 1 = q·ε + O(ε²): the observations' lengths hold the noise along the radius, which no
    # model on the sphere can fit; the residuals across it (2 of 3 components, ν = 2Jb − p) are
    # tested against it, an F(ν, Jb) ratio.
    radial = lengths - 1.0
    radial_variance = float(np.mean(radial**2))
    dof = 2 * radial.size - num_unknowns
    if radial.size < 10 or dof <= 0 or math.sqrt(radial_variance) <= _UNIT_LENGTH_RMS:
        return nothing
    across = residuals - np.sum(residuals * predicted, axis=-1, keepdims=True) * predicted
    value = float(np.sum(across**2)) / (dof * radial_variance)
    origin = f"the noise along the radius, {math.sqrt(radial_variance):.3g}, read from the observations' lengths"
    return value, _reduced_chi_squared_limit(dof, radial.size), dof, origin


def fit(
    lagrangian: Lagrangian,
    params: Mapping[str, ArrayLike],
    observations: Float[ArrayLike, "J b 3"],
    *,
    times: Float[ArrayLike, " J"],
    bodies: Sequence[int],
    dt: float,
    q0: Float[ArrayLike, "n 3"],
    omega0: Float[ArrayLike, "n 3"],
    free: Sequence[str],
    segments: int = 1,
    optimizer: str | optax.GradientTransformation = "levenberg_marquardt",
    learning_rate: float = 1e-2,
    num_iterations: int = 300,
    tolerance: float = 1e-10,
    continuity_weights: float | Sequence[float] = (1e-3, 1e-1, 1e1),
    refinement_steps: int = 10,
    integrator: AbstractIntegrator | None = None,
    noise_std: float | None = None,
    fit_initial_state: bool = False,
    progress: bool = False,
    fidelity: float | None = DEFAULT_FIDELITY,
) -> FitResult:
    """Fit the parameters `free` of a model to observed directions of some of its bodies.

    The data are q̃_j = q_{bodies}(t_j) + ε_j: directions (unit vectors, not renormalised after
    noise is added) of the observed bodies, ε_j independent N(0, σ²) in each Cartesian
    component, and q(t) the solution of `simulate(lagrangian, q0, omega0, params, dt=dt, ...)`.
    Free parameters must be positive (masses, lengths, stiffnesses, …): the optimiser works on
    their logarithms.

    The window [0, t_J] is cut into S = `segments` segments of L = ⌈t_J / (S dt)⌉ steps. The
    starts of segments 2..S are unknowns, initially the states of a simulation from (q0, ω0)
    with the initial `params`. With r the data residuals and d the jumps between segments
    (q_end − q_start and T(ω_end − ω_start), T = L dt), the loss is mean(r²) + w mean(d²). The
    optimiser runs once for each w in `continuity_weights`, warm-started: a small w lets every
    segment fit its own data; larger ones join them. Then Gauss–Newton steps on the problem
    with the jumps held at zero (see `_eliminate_starts`) remove the last jumps, and with them
    the bias of a finite w; a step that raises the loss by more than half ends the refinement.

    The covariance is Gauss–Newton, σ²(J_effᵀJ_eff)⁻¹ with the segment starts eliminated: the
    same as for single shooting, whatever S. Cov(θ) = diag(θ) Cov(log θ) diag(θ).

    **Arguments:**

    - `lagrangian`: the model, a pure function `L(q, qdot, params) -> scalar` of any regular form,
      or an `s2jax.AbstractSystem`.
    - `params`: a dict of the known parameters and the initial guesses of the free ones.
    - `observations`: the observed directions q̃_j, shape (J, len(bodies), 3).
    - `times`: the observation times, shape (J,): strictly increasing, ≥ 0 and multiples of
      `dt` (no interpolation between steps).
    - `bodies`: the indices of the observed bodies.
    - `dt`: the step of the integrator.
    - `q0`, `omega0`: the state at t = 0, shape (n, 3) (the initial guess if
      `fit_initial_state`).
    - `free`: the keys of `params` to fit.
    - `segments`: the number S of shooting segments; 1 is single shooting.
    - `optimizer`: `"levenberg_marquardt"` (the default: `_least_squares.levenberg_marquardt` on
      the residuals, with the Jacobian the refinement uses, so one program is compiled for both),
      `"lbfgs"` (`optax.lbfgs()`), `"adam"` (`optax.adam(learning_rate)`), or an optax
      transformation.
    - `learning_rate`: for `"adam"`.
    - `num_iterations`: the most optimiser steps for each continuity weight (for Levenberg–
      Marquardt, the most trial steps, accepted or not).
    - `tolerance`: stop the optimiser once a step changes the loss by at most `tolerance` ×
      loss, and the refinement once a step moves no unknown by more than `tolerance`.
    - `continuity_weights`: w, or an increasing sequence of them (ignored for S = 1).
    - `refinement_steps`: the most Gauss–Newton steps (0: none).
    - `integrator`: as in `simulate`; None (default) is `s2jax.AutoIntegrator(linearised=True)`,
      control's choice, made once from the initial params: for a Lagrangian of (2.2) the explicit
      VI where M is diagonal, `Rattle` (002's map by multipliers, whose derivatives are cheaper)
      for a coupled M of up to 8 bodies without a force that reads ω, else the VI of 002;
      `GeneralVariationalIntegrator` for any other L.
    - `noise_std`: σ, if known; otherwise σ² = |r|² / (N − p), N the number of data residuals
      and p that of the free values (plus 4n if `fit_initial_state`).
    - `fit_initial_state`: fit the start of segment 1 too.
    - `progress`: report on stderr each stage (continuity weight, refinement) and its loss, at
      most once a second within a stage. The fit's loop runs in Python, so this adds no callback
      to a compiled program and compiles nothing again.
    - `fidelity`: the largest continuous-time miss accepted (default 1e-2; None: no check): the
      distance, over every step of every segment and the bodies, in q and in ω (rad/s), between
      the fitted model's run of each segment and the continuous system's (`RungeKutta4` eight
      times finer, `FitResult.continuous_miss`). Where it is larger, the fit is done again from
      the fitted values with the integrator taking more sub-steps per step (`s2jax.Substeps`,
      the power of two that the O((dt / s)^p) law predicts, at most 64; `FitResult.substeps`):
      parameters fitted on a model that misses the real motion by more than the data's noise
      are biased by it. `fit` warns if 64 sub-steps do not meet it. A fit that did not converge
      is not refined (its miss is reported).

    **Returns:** a `FitResult`.

    **Goodness of fit.** A σ estimated from the residuals makes their χ²/ν = |r|²/(σ² ν) equal to 1
    by construction, whatever the data, so the test needs a noise level from elsewhere. With
    `noise_std` given, `reduced_chi_squared` is |r|²/(σ²(N − p)), χ²_ν/ν-distributed for a model that
    fits. Without it, the noise is read from the observations' lengths: q̃ = q + ε is not
    renormalised, so |q̃| − 1 ≈ q·ε is the noise along the radius, which no model on the sphere can
    fit, and `reduced_chi_squared` compares the residuals across the radius with it (F-distributed,
    ν = 2N/3 − p); observations of unit length (normalised, or noise-free) give no such level, and
    NaN. Past the upper 10⁻³ quantile (`reduced_chi_squared_limit`) `fit` warns (`UserWarning`):
    data of another body, shuffled in time, or a local minimum give χ²/ν of 10² and more; a model
    that fits passes in 999 fits of 1000.

    Bad input raises `ValueError` before anything is compiled: shapes, non-finite data, times
    off the step grid or before 0, unknown or non-positive free parameters, bodies out of range,
    fewer numbers observed than unknowns (or as many, with σ to estimate).
    """
    options = dict(locals())  # every argument, passed on to each fit
    fidelity = options.pop("fidelity")
    if fidelity is not None:
        fidelity = _positive(fidelity, "fidelity")
    if options["integrator"] is None:
        options["integrator"] = LINEARISED
    result, the_plan, length = _fit_once(**options)
    substeps = 1
    while fidelity is not None:
        miss = float(_segment_miss(the_plan.system, result, the_plan.integrator, substeps, options["dt"], length))
        result = dataclasses.replace(result, continuous_miss=jnp.asarray(miss), substeps=substeps)
        if miss <= fidelity or not result.converged:  # an unconverged fit is returned as it is
            break
        if substeps >= MAX_SUBSTEPS:
            warnings.warn(
                f"s2jax.fit: the fitted model misses the continuous system by {miss:.2e} (FitResult.continuous_miss) "
                f"at {substeps} sub-steps per step, more than fidelity = {fidelity:g}: give a smaller dt",
                stacklevel=2,
            )
            break
        substeps = next_substeps(substeps, miss, fidelity, the_plan.integrator.order)
        options["integrator"] = Substeps(the_plan.integrator, substeps)
        options["params"] = result.params  # warm-started from the fitted values
        if options["fit_initial_state"]:
            options["q0"], options["omega0"] = result.segment_q[0], result.segment_omega[0]
        result, _, _ = _fit_once(**options)
    return result


@filter_jit
def _segment_miss(system, result, integrator, substeps, dt, length):
    """`continuous_miss` of every segment's run of `length` steps from its fitted start, the
    largest. `integrator` is the plan's (without sub-steps)."""
    model = integrator if substeps == 1 else Substeps(integrator, substeps)

    def one(q0, omega0):
        run = simulate(system, q0, omega0, result.params, dt=dt, num_steps=length, integrator=model, throw=False)
        miss = continuous_miss(system, result.params, dt, substeps, run.q, run.omega)
        return jnp.where(run.result == RESULTS.successful, miss, jnp.nan)

    return jnp.max(jax.vmap(one)(result.segment_q, result.segment_omega))


def _fit_once(
    lagrangian, params, observations, *, times, bodies, dt, q0, omega0, free, segments, optimizer, learning_rate,
    num_iterations, tolerance, continuity_weights, refinement_steps, integrator, noise_std, fit_initial_state,
    progress,
):
    """One fit of `fit`'s arguments (the integrator as given): `(result, plan, length)`, the plan
    of the runs and the steps per segment."""
    dt = _positive(dt, "dt")
    q0, omega0 = np.asarray(q0, dtype=float), np.asarray(omega0, dtype=float)
    if q0.ndim != 2 or q0.shape[-1] != 3:
        raise ValueError(f"q0 must have shape (n, 3); got {q0.shape}")
    n = q0.shape[0]
    bodies = tuple(int(i) for i in np.atleast_1d(np.asarray(bodies)))
    if not bodies or len(set(bodies)) != len(bodies) or not all(0 <= i < n for i in bodies):
        raise ValueError(f"bodies must be distinct indices of the {n} bodies of q0; got {bodies}")
    steps = _grid_steps(times, dt)
    observations = np.asarray(observations, dtype=float)
    if observations.shape != (steps.size, len(bodies), 3):
        raise ValueError(
            f"observations must have shape (J, len(bodies), 3) = {(steps.size, len(bodies), 3)}; "
            f"got {observations.shape}"
        )
    if not np.all(np.isfinite(observations)):
        j = int(np.argwhere(~np.isfinite(observations))[0, 0])
        raise ValueError(f"observations[{j}] is not finite: {observations[j]}")
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a dict, to name the free parameters; got {type(params)}")
    free = (free,) if isinstance(free, str) else tuple(free)
    if not free or len(set(free)) != len(free):
        raise ValueError(f"free must name distinct keys of params; got {free}")
    for key in free:
        if key not in params:
            raise ValueError(f"free parameter {key!r} is not a key of params: {sorted(params)}")
        value = np.asarray(params[key])
        if not np.issubdtype(value.dtype, np.number) or not np.all((value > 0) & (value < np.inf)):
            raise ValueError(f"free parameter {key!r} must be finite and positive; got {value}")
    segments = _count(segments, "segments", 1)
    if steps[-1] < segments:
        raise ValueError(f"{segments} segments need ≥ {segments} steps to times[-1]: {steps[-1]}")
    num_iterations = _count(num_iterations, "num_iterations", 0)
    refinement_steps = _count(refinement_steps, "refinement_steps", 0)
    tolerance = _positive(tolerance, "tolerance")
    weights = [_positive(w, "continuity_weights") for w in np.atleast_1d(continuity_weights)]
    if not weights:
        raise ValueError("continuity_weights must hold at least one weight")
    weights = weights if segments > 1 else weights[-1:]
    if noise_std is not None:
        noise_std = _positive(noise_std, "noise_std")
    # The unknowns that the data must determine; the starts of segments 2..S are not among them
    # (each is pinned by its jump). Checked here, before anything is compiled or optimised.
    num_unknowns = sum(int(np.size(params[key])) for key in free) + (4 * n if fit_initial_state else 0)
    if observations.size < num_unknowns + (noise_std is None):
        unknowns = f"{num_unknowns} unknowns (the free values{', and 4n of the start' if fit_initial_state else ''})"
        if observations.size < num_unknowns:
            needed = "to determine them"
        else:
            needed = "to determine them and estimate the noise σ from the residuals (or give noise_std)"
        raise ValueError(f"too few observations: {observations.size} numbers for {unknowns}; more are needed {needed}")
    if isinstance(optimizer, str) and optimizer != "levenberg_marquardt":
        optimizer = named_optimizer(optimizer, _positive(learning_rate, "learning_rate"))
    lengths = np.linalg.norm(observations, axis=-1)
    if np.any(np.abs(lengths - 1.0) > 0.5):
        j, k = np.argwhere(np.abs(lengths - 1.0) > 0.5)[0]
        raise ValueError(
            f"observations[{j}] of body {bodies[k]} has length {lengths[j, k]:.3g}: observations are "
            "directions q̃ = q + noise of bodies on the unit sphere (length ≈ 1)"
        )

    length = -(-int(steps[-1]) // segments)  # ⌈K / S⌉ steps per segment
    try:  # also validates q0, ω0, the Lagrangian and the integrator
        guess = simulate(
            lagrangian, q0, omega0, params, dt=dt, num_steps=segments * length,
            integrator=integrator, save_every=length,
        )
    except SimulationError as error:
        reason = str(error).split(" Pass throw=False")[0]
        raise SimulationError(
            f"s2jax.fit: the simulation from q0, omega0 with the initial params fails, so there is "
            f"nothing to start from ({reason}). Start from a better guess or a smaller dt."
        ) from None
    # The plan of the guess's run, for every segment: made here, from the concrete initial params.
    the_plan = plan(lagrangian, jnp.asarray(q0), jnp.asarray(omega0), params, integrator=integrator)
    first = 0 if fit_initial_state else 1
    base_q, base_omega = np.asarray(guess.q[first:-1]), np.asarray(guess.omega[first:-1])
    segment = np.minimum(steps // length, segments - 1)
    known = {key: value for key, value in params.items() if key not in free}
    shooting = MultipleShooting(
        the_plan.system, the_plan.integrator, jnp.asarray(dt), length, jnp.asarray(q0), jnp.asarray(omega0),
        jnp.asarray(base_q), jnp.asarray(base_omega), jnp.asarray(tangent_basis(base_q)), fit_initial_state,
    )
    # The guesses of the free params are not in `problem`: new guesses do not recompile.
    problem = _FitProblem(
        shooting, free, known,
        *map(jnp.asarray, (segment, steps - segment * length, np.asarray(bodies), observations, weights[0])),
    )
    log_theta = tuple(jnp.log(jnp.asarray(params[key], dtype=float)) for key in free)
    zeros = jnp.zeros(base_q.shape[:2] + (2,))
    z = (log_theta, (zeros, zeros))

    history = []
    report = FitProgress(progress, len(weights) + (refinement_steps > 0))
    method = "Levenberg–Marquardt" if optimizer == "levenberg_marquardt" else "optimiser"
    for i, weight in enumerate(weights):
        problem = eqx.tree_at(lambda p: p.continuity_weight, problem, jnp.asarray(weight))
        report.stage(f"stage {i + 1}/{report.num_stages}, {method}, continuity weight {weight:g}")
        if optimizer == "levenberg_marquardt":
            z, stage, converged = _penalised_least_squares(problem, z, num_iterations, tolerance, report)
        else:
            z, stage, converged = minimise(problem.loss, z, optimizer, num_iterations, tolerance, report)
        history += stage

    # Flattened z is (log θ, a, b), a and b the chart coordinates of shape (S or S − 1, n, 2).
    num_params = sum(x.size for x in log_theta)
    initial_start = np.zeros(base_q.shape[:2] + (2,), bool)
    initial_start[:1] = fit_initial_state
    independent = np.concatenate([np.ones(num_params, bool), *2 * [initial_start.ravel()]])
    jacobian, (data, jumps, failed) = _linearise(problem, z)
    if bool(failed):
        raise RuntimeError("s2jax.fit: the simulation failed at the fitted parameters")
    history.append(float(problem.objective(data, jumps, failed)))
    if refinement_steps:
        report.stage(f"stage {report.num_stages}/{report.num_stages}, Gauss–Newton with the jumps held at zero")
        report(history[-1])
    for _ in range(refinement_steps):
        effective, shifted, dependent_step = _eliminate_starts(jacobian, independent, data, jumps)
        independent_step = -jnp.linalg.lstsq(effective, shifted)[0]
        flat, unravel = ravel_pytree(z)
        step = jnp.zeros_like(flat).at[independent].set(independent_step)
        step = step.at[~independent].set(dependent_step(independent_step))
        candidate = unravel(flat + step)
        linearised = _linearise(problem, candidate)
        loss = float(problem.objective(*linearised[1]))
        # Holding the jumps at zero raises the penalised loss a little; far from a solution a
        # full step overshoots and raises it a lot. The refinement stops at such a step.
        if not loss <= 1.5 * history[-1]:
            break
        z, (jacobian, (data, jumps, failed)) = candidate, linearised
        history.append(loss)
        report(loss)
        converged = float(np.max(np.abs(np.asarray(step)))) <= tolerance
        if converged:
            break

    report.done(converged)
    chi_squared, limit, dof, origin = _goodness_of_fit(
        np.asarray(data), np.asarray(data) + observations, lengths, noise_std, num_unknowns
    )
    if chi_squared > limit:
        warnings.warn(
            f"s2jax.fit: the model does not fit the data: χ²/ν = {chi_squared:.3g} (ν = {dof}) of the residuals "
            f"against {origin}, where a model that fits stays below {limit:.3g} in 999 fits of 1000 "
            "(FitResult.reduced_chi_squared). The fitted params and their standard errors are not to be trusted: "
            "check the observed bodies, the times and the model, or, if this is a local minimum, start from a "
            "better guess or use more segments.",
            stacklevel=3,
        )
    if noise_std is None:  # ν > 0: checked before optimising
        noise_std = float(jnp.sqrt(jnp.sum(data**2) / (data.size - num_unknowns)))
    effective = _eliminate_starts(jacobian, independent, data, jumps)[0]
    log_covariance = noise_std**2 * jnp.linalg.inv(effective.T @ effective)
    theta = jnp.exp(ravel_pytree(z[0])[0])
    covariance = theta[:, None] * log_covariance[:num_params, :num_params] * theta[None, :]
    errors = jnp.split(jnp.sqrt(jnp.diag(covariance)), np.cumsum([x.size for x in log_theta])[:-1])

    segment_q, segment_omega = problem.shooting.starts(z[1])
    return FitResult(
        params={**params, **{key: jnp.exp(x) for key, x in zip(free, z[0])}},
        standard_errors={key: e.reshape(np.shape(params[key])) for key, e in zip(free, errors)},
        covariance=covariance,
        noise_std=jnp.asarray(noise_std),
        loss_history=jnp.asarray(np.asarray(history)),
        converged=converged,
        segment_times=dt * length * jnp.arange(segments, dtype=float),
        segment_q=segment_q,
        segment_omega=segment_omega,
        predicted=data + observations,
        continuity_defect=jnp.max(jnp.abs(jumps[:, 0]), initial=0.0),
        reduced_chi_squared=jnp.asarray(chi_squared),
        reduced_chi_squared_limit=jnp.asarray(limit),
    ), the_plan, length
