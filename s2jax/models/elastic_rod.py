"""Pure bending of an elastic rod: Lee–Leok–McClamroch 2009 (002), Example 4.

n + 1 rigid rod elements joined by rotational springs; the zeroth is clamped to a wall along a fixed
q₀ ∈ S² (q₀ = e₁ here: 002 does not print q₀), the others are free, so the configuration space is
(S²)ⁿ. Element i has mass m_i, length l_i and direction q_i; e₃ = (0, 0, 1) is the direction of
gravity. M and V are 002's, with the equations of motion (3.24); `params["inertia"]` selects M as
printed (`"printed"`, the default of `paper_params`) or derived for uniform rigid rods
(`"rigid_rods"`). The printed M and V, the derivation of the other M, and the quartic bending term:
docs/api/models.md (and the doubts in docs/papers.md).
"""

import jax.numpy as jnp
import numpy as np

from .._validation import positive_parameters

_INERTIA_MODELS = ("printed", "rigid_rods")


def inertia_matrix(params):
    """M as printed in 002 Example 4, or for uniform rigid rods; see the module docstring."""
    masses, lengths = params["masses"], params["lengths"]
    n = masses.shape[0]
    index = np.arange(n)
    outer = np.maximum.outer(index, index)  # J = max(i, j)
    model = params["inertia"]
    if model == "printed":
        moment = masses * lengths**2
        moment_from = jnp.cumsum(moment[::-1])[::-1]  # Σ_{k ≥ i} m_k l_k²
        off_diagonal = 0.5 * moment_from[outer]
        diagonal = moment / 3.0 + (moment_from - moment)
    elif model == "rigid_rods":
        mass_after = jnp.cumsum(masses[::-1])[::-1] - masses  # Σ_{k > i} m_k
        off_diagonal = jnp.outer(lengths, lengths) * (0.5 * masses + mass_after)[outer]
        diagonal = lengths**2 * (masses / 3.0 + mass_after)
    else:
        raise ValueError(f"params['inertia'] must be one of {_INERTIA_MODELS}, got {model!r}")
    return jnp.where(np.eye(n, dtype=bool), diagonal[:, None], off_diagonal)


def potential(q, params):
    """Gravity on the centres of the free elements plus the bending springs."""
    masses, lengths = params["masses"], params["lengths"]
    links = lengths[:, None] * q
    centres = jnp.cumsum(links, axis=0) - 0.5 * links  # Σ_{j<i} l_j q_j + ½ l_i q_i
    gravity = -params["g"] * jnp.sum(masses * centres[:, 2])
    previous = jnp.concatenate([params["clamped_direction"][None], q[:-1]])
    bending = 0.5 * jnp.sum(
        params["spring_constants"] * (1.0 - jnp.sum(previous * q, axis=-1)) ** 2
    )
    return gravity + bending


@positive_parameters("masses", "lengths")
def lagrangian(q, qdot, params):
    """L = ½ Σ_ij M_ij q̇_i·q̇_j − V(q)."""
    n = params["masses"].shape[0]
    if q.shape != (n, 3):
        raise ValueError(
            f"this rod has {n} free elements: q must have shape ({n}, 3), got {q.shape}"
        )
    kinetic = 0.5 * jnp.einsum("ij,ia,ja->", inertia_matrix(params), qdot, qdot)
    return kinetic - potential(q, params)


def paper_params(n=10, inertia="printed"):
    """Example 4: n free elements (n + 1 in all), m = 55 g, l = 1.1 m in total, κ_i = 1000.

    m_i = m/(n + 1), l_i = l/(n + 1) (0.1 m for n = 10), κ_i = 1000 N·m, g = 9.81 m/s²,
    q₀ = e₁ for the clamped element. `inertia` is `"printed"` or `"rigid_rods"`.
    """
    if inertia not in _INERTIA_MODELS:
        raise ValueError(f"inertia must be one of {_INERTIA_MODELS}, got {inertia!r}")
    return {
        "masses": np.full(n, 0.055 / (n + 1)),
        "lengths": np.full(n, 1.1 / (n + 1)),
        "spring_constants": np.full(n, 1000.0),
        "g": 9.81,
        "clamped_direction": np.array([1.0, 0.0, 0.0]),
        "inertia": inertia,
    }


def paper_state(n=10):
    """Example 4's initial state, exact as printed: the rod straight along e₁, just hit.

    q_i = e₁ for all i (002 prints e₁ = [0, 0, 1], a slip for [1, 0, 0]), ω_i = 0 except
    ω₅ = (0, 0, 10) rad/s (1-based, row 4 here), which is tangent to e₁.

    **Returns:** `(q0, omega0)`, numpy arrays of shape (n, 3).
    """
    if n < 5:
        raise ValueError(f"the printed initial state sets ω₅, so it needs n ≥ 5; got n = {n}")
    q0 = np.tile([1.0, 0.0, 0.0], (n, 1))
    omega0 = np.zeros((n, 3))
    omega0[4] = [0.0, 0.0, 10.0]
    return q0, omega0
