"""Diagnostics of a trajectory: energy, momentum maps, unit-length and tangency errors.

Every function takes states with any leading axes (a time series (S, n, 3), a batch
(B, S, n, 3), or a single state (n, 3)) and returns one value per state.
"""

import jax
import jax.numpy as jnp

from ._custom_types import Array, Float, Lagrangian, Params
from ._geometry import dot
from ._system import LagrangianSystem


def _per_state(fn, q, omega):
    q = jnp.asarray(q)
    omega = jnp.asarray(omega)
    lead = q.shape[:-2]
    flat = jax.vmap(fn)(q.reshape(-1, *q.shape[-2:]), omega.reshape(-1, *omega.shape[-2:]))
    return flat.reshape(lead)


def energy(lagrangian: Lagrangian, q: Float[Array, "... n 3"], omega: Float[Array, "... n 3"], params: Params):
    """The total energy E = Σ_i q̇_i·∂L/∂q̇_i − L at q̇_i = ω_i × q_i."""
    system = LagrangianSystem(lagrangian)
    return _per_state(lambda x, w: system.energy(x, w, params), q, omega)


def momentum_map(
    lagrangian: Lagrangian,
    q: Float[Array, "... n 3"],
    omega: Float[Array, "... n 3"],
    params: Params,
    axis: Float[Array, "3"] = (0.0, 0.0, 1.0),
):
    """The momentum map of the rotations about `axis` e: J = Σ_i (∂L/∂q̇_i)·(e × q_i).

    The infinitesimal generator of the rotation q_i ↦ exp(s ê) q_i is e × q_i, so by Noether's
    theorem J is conserved when L is invariant under these rotations; for e = e₃ and gravity
    along e₃ it is the vertical angular momentum. ∂L/∂q̇ comes from automatic differentiation.
    """
    system = LagrangianSystem(lagrangian)
    e = jnp.asarray(axis, dtype=jnp.asarray(q).dtype)

    def one(x, w):
        return jnp.sum(system.momentum(x, w, params) * jnp.cross(e, x))

    return _per_state(one, q, omega)


def unit_length_error(q: Float[Array, "... n 3"]) -> Float[Array, "..."]:
    """max_i ||q_i| − 1|, the distance of q from (S²)ⁿ."""
    return jnp.max(jnp.abs(jnp.linalg.norm(q, axis=-1) - 1.0), axis=-1)


def tangency_error(q: Float[Array, "... n 3"], omega: Float[Array, "... n 3"]) -> Float[Array, "..."]:
    """max_i |q_i·ω_i|, the distance of ω from the tangent spaces T_{q_i} S²."""
    return jnp.max(jnp.abs(dot(q, omega)), axis=-1)


def figures_of_merit(lagrangian: Lagrangian, q, omega, params) -> dict[str, float]:
    """The figures 002 §3.5 reports, defined (the paper does not define them):

    - `mean_energy_error`: mean over the saved states of |E_k − E₀|;
    - `mean_relative_energy_error`: the same divided by |E₀|;
    - `max_energy_error`: max_k |E_k − E₀|;
    - `mean_unit_length_error`: mean over the saved states of max_i ||q_i| − 1|;
    - `max_unit_length_error`.
    """
    e = energy(lagrangian, q, omega, params)
    error = jnp.abs(e - e[0])
    unit = unit_length_error(q)
    return {
        "mean_energy_error": float(jnp.mean(error)),
        "mean_relative_energy_error": float(jnp.mean(error) / jnp.abs(e[0])),
        "max_energy_error": float(jnp.max(error)),
        "mean_unit_length_error": float(jnp.mean(unit)),
        "max_unit_length_error": float(jnp.max(unit)),
    }
