"""The goodness of fit: χ²/ν of the residuals against a noise level that is not estimated from them.

A σ estimated from the residuals makes their χ²/ν equal to 1 by construction, whatever the data,
so the test needs a noise level from elsewhere: the `noise_std` given, or, for observed directions
q̃ = q + ε that were not renormalised, the noise along the radius |q̃| − 1 = q·ε + O(ε²), which no
model on the sphere can fit (docs/api/fit.md). Computed inside the fit's program (so it runs under
`jax.jit` and `jax.vmap`); the degrees of freedom and the limit are static.
"""

import math

import jax.numpy as jnp

# The standard normal's upper 10⁻³ quantile: a model that fits its data is flagged in 1 fit of 1000.
_UPPER_QUANTILE_Z = 3.090232306167813
# Observations whose lengths are 1 within this (rms) were normalised, or are noise-free: their
# lengths say nothing about σ.
UNIT_LENGTH_RMS = 1e-9
# Fewer observed directions than this give no usable noise level along the radius.
MIN_DIRECTIONS = 10


def reduced_chi_squared_limit(dof: int, noise_dof: float = math.inf) -> float:
    """The upper 10⁻³ quantile of χ²_ν/ν (σ known), or of F(ν, ν₂) (σ² estimated on ν₂ other
    degrees of freedom), without scipy: the cube-root normal approximation of Wilson & Hilferty
    (1931), in Paulson's (1942) form for F, ((1 − b) x − (1 − a)) / √(a + b x²) = z with x = F^{1/3},
    a = 2/(9ν), b = 2/(9ν₂), solved for x. Within 2 % of the exact quantile for ν, ν₂ ≥ 10, and
    above it (fewer false alarms) for smaller ν."""
    z, a, b = _UPPER_QUANTILE_Z, 2 / (9 * dof), 2 / (9 * noise_dof)
    quadratic, linear, constant = (1 - b) ** 2 - z * z * b, -2 * (1 - a) * (1 - b), (1 - a) ** 2 - z * z * a
    root = (-linear + math.sqrt(linear * linear - 4 * quadratic * constant)) / (2 * quadratic)
    return root**3


def against_given_noise(residuals, noise_std, num_unknowns: int):
    """χ²/ν = |r|²/(σ²(N − p)) and its limit; NaN when ν ≤ 0."""
    dof = residuals.size - num_unknowns
    if dof <= 0:
        return jnp.asarray(jnp.nan), math.nan
    return jnp.sum(residuals**2) / (noise_std**2 * dof), reduced_chi_squared_limit(dof)


def against_radial_noise(residuals, predicted, observations, num_unknowns: int):
    """The residuals across the radius (2 of 3 components, ν = 2N/3 − p) against the mean square
    of |q̃| − 1 (N/3 numbers): an F(ν, N/3) ratio for a model that fits, and its limit. NaN for
    fewer than `MIN_DIRECTIONS` directions, ν ≤ 0, or unit-length observations."""
    radial = jnp.linalg.norm(observations, axis=-1) - 1.0
    dof = 2 * radial.size - num_unknowns
    if radial.size < MIN_DIRECTIONS or dof <= 0:
        return jnp.asarray(jnp.nan), math.nan
    radial_variance = jnp.mean(radial**2)
    across = residuals - jnp.sum(residuals * predicted, axis=-1, keepdims=True) * predicted
    value = jnp.sum(across**2) / (dof * radial_variance)
    value = jnp.where(jnp.sqrt(radial_variance) <= UNIT_LENGTH_RMS, jnp.nan, value)
    return value, reduced_chi_squared_limit(dof, radial.size)
