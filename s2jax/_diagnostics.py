"""Diagnostics of a trajectory: energy, momentum maps, unit-length and tangency errors.

Every function takes states with any leading axes (a time series (S, n, 3), a batch
(B, S, n, 3), or a single state (n, 3)) and returns one value per state.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._custom_types import Array, Float, Lagrangian, Params
from ._geometry import dot
from ._system import LagrangianSystem, SystemArgs

# The most entries of a pairwise potential's (states × n × n [× 3]) intermediates that one
# vmapped evaluation may hold: 2²² float64 values, 32 MB. Unbounded, the energies of 10³ states
# of 642 molecules (002 Example 6) would need gigabytes at once.
_CHUNK_ENTRIES = 2**22


@eqx.filter_jit
def _over_states(fn, q, omega):
    """`fn` of each state, the leading axes flattened and restored: one compiled program per
    function (a `jax.tree_util.Partial` of a module-level one, so equal calls share it) and shapes,
    where an eager `jax.vmap` would run, and compile, an operation at a time."""
    lead, n = q.shape[:-2], q.shape[-2]
    return jax.vmap(fn)(q.reshape(-1, n, 3), omega.reshape(-1, n, 3)).reshape(lead)


def _per_state(fn, q, omega):
    q = jnp.asarray(q)
    omega = jnp.asarray(omega)
    lead = q.shape[:-2]
    n = q.shape[-2]
    num_states = math.prod(lead)
    chunk = max(1, _CHUNK_ENTRIES // (3 * n * n))
    if num_states <= chunk:
        return _over_states(fn, q, omega)
    # Many chunks: one program for one chunk shape (the last is padded).
    q = q.reshape(-1, n, 3)
    omega = omega.reshape(-1, n, 3)
    pad = -num_states % chunk
    q = jnp.concatenate([q, jnp.broadcast_to(q[-1:], (pad, n, 3))])
    omega = jnp.concatenate([omega, jnp.broadcast_to(omega[-1:], (pad, n, 3))])
    pieces = [_over_states(fn, q[i : i + chunk], omega[i : i + chunk]) for i in range(0, num_states, chunk)]
    return jnp.concatenate(pieces)[:num_states].reshape(lead)


def _energy_at(system, params, q, omega):
    return system.energy(q, omega, SystemArgs(params))


def _momentum_about(system, params, axis, q, omega):
    return jnp.sum(system.ambient_momentum(q, omega, SystemArgs(params)) * jnp.cross(axis, q))


def energy(lagrangian: Lagrangian, q: Float[Array, "... n 3"], omega: Float[Array, "... n 3"], params: Params):
    """The total energy E = Σ_i q̇_i·∂L/∂q̇_i − L at q̇_i = ω_i × q_i."""
    return _per_state(jax.tree_util.Partial(_energy_at, LagrangianSystem(lagrangian), params), q, omega)


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
    e = np.asarray(axis, dtype=jnp.asarray(q).dtype)  # numpy: jnp.asarray compiles a program of its own
    return _per_state(jax.tree_util.Partial(_momentum_about, system, params, e), q, omega)


def unit_length_error(q: Float[Array, "... n 3"]) -> Float[Array, "..."]:
    """max_i ||q_i| − 1|, the distance of q from (S²)ⁿ."""
    return jnp.max(jnp.abs(jnp.linalg.norm(q, axis=-1) - 1.0), axis=-1)


def tangency_error(q: Float[Array, "... n 3"], omega: Float[Array, "... n 3"]) -> Float[Array, "..."]:
    """max_i |q_i·ω_i|, the distance of ω from the tangent spaces T_{q_i} S²."""
    return jnp.max(jnp.abs(dot(q, omega)), axis=-1)


def figures_of_merit(lagrangian: Lagrangian, q, omega, params, *, energies=None) -> dict[str, float]:
    """The figures 002 §3.5 reports, defined (the paper does not define them):

    - `mean_energy_error`: mean over the saved states of |E_k − E₀|;
    - `mean_relative_energy_error`: the same divided by |E₀|;
    - `max_energy_error`: max_k |E_k − E₀|;
    - `mean_unit_length_error`: mean over the saved states of max_i ||q_i| − 1|;
    - `max_unit_length_error`.

    `energies`, if given, are `energy(lagrangian, q, omega, params)`, already computed.
    """
    e = energy(lagrangian, q, omega, params) if energies is None else jnp.asarray(energies)
    error = jnp.abs(e - e[0])
    unit = unit_length_error(q)
    return {
        "mean_energy_error": float(jnp.mean(error)),
        "mean_relative_energy_error": float(jnp.mean(error) / jnp.abs(e[0])),
        "max_energy_error": float(jnp.max(error)),
        "mean_unit_length_error": float(jnp.mean(unit)),
        "max_unit_length_error": float(jnp.max(unit)),
    }
