"""Pure bending of an elastic rod: Lee–Leok–McClamroch 2009 (002), Example 4.

n + 1 rigid rod elements joined by rotational springs; the zeroth is clamped to a wall along
a fixed q₀ ∈ S² (q₀ = e₁ here: the rod starts horizontal, along the clamped element, and
002 does not print q₀), the others are free, so the configuration space is (S²)ⁿ. Element i
has mass m_i and length l_i; q_i is its direction. e₃ = (0, 0, 1) is the direction of
gravity. 002 prints

    M_ii = ⅓ m_i l_i² + Σ_{k>i} m_k l_k²,    M_ij = Σ_{k ≥ max(i,j)} ½ m_k l_k²  (i ≠ j),

    V(q) = −Σ_{i=1}^n m_i g (Σ_{j<i} l_j q_j + ½ l_i q_i)·e₃ + Σ_{i=1}^n ½ κ_i (1 − q_{i−1}·q_i)²,

and the equations of motion (3.24), the q̈ form (2.8), whose matrix (with m_i = m/(n+1),
l_i = l/(n+1)) repeats the printed M. The gravity term sums
from j = 1: the clamped element adds the constant l₀ q₀ to every centre, which moves V by a
constant (zero for a horizontal q₀).

**Doubt about the printed inertia.** For uniform rods with the centres x_i = Σ_{j<i} l_j q_j +
½ l_i q_i that the potential uses, T = ½ Σ_i (m_i |ẋ_i|² + m_i l_i²/12 |q̇_i|²) gives the
printed diagonal (with l_i² for the printed l_k², equal for equal elements) but

    M_ij = (½ m_J + Σ_{k>J} m_k) l_i l_j,    J = max(i, j),

not Σ_{k≥J} ½ m_k l_k²: the ½ belongs to the k = J term only. For equal elements the printed
M₁₂ is (n − 1)/2 · m_i l_i², the rigid-rod one (n − 3/2) · m_i l_i². Both are symmetric
positive definite. `params["inertia"]` selects `"printed"` (the default of `paper_params`,
what 002 simulated as far as the text tells) or `"rigid_rods"` (the derivation above).

**The bending term** as printed is quartic in the joint angle θ_i, ½ κ_i (1 − cos θ_i)² ≈
κ_i θ_i⁴/8, so the straight rod has no linear stiffness; we keep it as printed.
"""

import jax.numpy as jnp
import numpy as np

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
