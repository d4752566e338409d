"""Spherical pendula joined by springs: Lee–Leok–McClamroch 2009 (002), Example 3.

n point masses m_i on massless links of lengths l_i, hanging from pivots p_i in a horizontal plane (q_i from the
i-th pivot to the i-th mass, e₃ = (0, 0, 1) the direction of gravity); pairs (i, j) ∈ Ξ are joined by linear
springs of stiffness κ_ij attached at the centres of the links. With r_ij = p_j − p_i, M_ij = m_i l_i² δ_ij and

    V(q) = −Σ_i m_i g l_i q_i·e₃ + Σ_{(i,j)∈Ξ} ½ κ_ij (|r_ij + ½ l_j q_j − ½ l_i q_i| − |r_ij|)²,

whose equations of motion are (3.22)–(3.23); M is diagonal, so 002 uses the explicit integrator (3.17)–(3.18).
How `params` holds Ξ (`connections`): docs/api/models.md; 002's slips in this example: docs/papers.md.
"""

import jax.numpy as jnp
import numpy as np

from .._system import LagrangianSystem
from .._validation import positive_parameters


def inertia_matrix(params):
    """M = diag(m_i l_i²)."""
    return jnp.diag(params["masses"] * params["lengths"] ** 2)


def _pairs(connections):
    pairs = np.asarray(connections, dtype=int).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def potential(q, params):
    """Gravity plus the springs of Ξ, all springs at once by gathering their end bodies."""
    masses, lengths, pivots = params["masses"], params["lengths"], params["pivots"]
    gravity = -params["g"] * jnp.sum(masses * lengths * q[:, 2])
    first, second = _pairs(params["connections"])
    rest = pivots[second] - pivots[first]  # r_ij
    half_lengths = 0.5 * lengths[:, None]
    spring = rest + half_lengths[second] * q[second] - half_lengths[first] * q[first]
    extension = jnp.linalg.norm(spring, axis=-1) - jnp.linalg.norm(rest, axis=-1)
    return gravity + 0.5 * jnp.sum(params["spring_constants"] * extension**2)


@positive_parameters("masses", "lengths")
def lagrangian(q, qdot, params):
    """L = ½ Σ_i m_i l_i² |q̇_i|² − V(q)."""
    n = params["masses"].shape[0]
    if q.shape != (n, 3):
        raise ValueError(f"this system has {n} pendula: q must have shape ({n}, 3), got {q.shape}")
    kinetic = 0.5 * jnp.sum(params["masses"] * params["lengths"] ** 2 * jnp.sum(qdot**2, axis=-1))
    return kinetic - potential(q, params)


def system(force=None):
    """The `LagrangianSystem` of `lagrangian` with `force`, declaring M diagonal for every
    params, so a run with traced params does not probe it (`LagrangianSystem.inertia_structure`)."""
    return LagrangianSystem(lagrangian, force, inertia_structure="diagonal")


def paper_params():
    """Example 3: four pendula, m_i = 0.1 kg, l_i = 0.1 m, g = 9.81 m/s², a square of springs.

    Ξ = {(1, 2), (2, 3), (3, 4), (4, 1)} (0-based in `connections`), κ = 10, 20, 30, 40 N/m.
    The pivot offsets r₁₂ = −r₃₄ = l e₁ and r₂₃ = −r₄₁ = −l e₂ place the pivots at the
    corners of a square of side l = 0.1 m: p₁ = 0, p₂ = l e₁, p₃ = l (e₁ − e₂), p₄ = −l e₂.
    """
    length = 0.1
    pivots = length * np.array(
        [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, -1.0, 0.0], [0.0, -1.0, 0.0]]
    )
    return {
        "masses": np.full(4, 0.1),
        "lengths": np.full(4, length),
        "g": 9.81,
        "pivots": pivots,
        "connections": ((0, 1), (1, 2), (2, 3), (3, 0)),
        "spring_constants": np.array([10.0, 20.0, 30.0, 40.0]),
    }


def paper_state():
    """The initial state of Example 3, made exact.

    q₁₀ = q₂₀ = q₄₀ = e₃ (hanging), ω₁₀ = (−10, 4, 0) rad/s, ω₂₀ = ω₃₀ = ω₄₀ = 0. The printed
    q₃₀ = (0.4698, 0.1710, 0.8660) has |q₃₀| − 1 ≈ −4e-5; it is (sin 30° cos 20°,
    sin 30° sin 20°, cos 30°) rounded to four digits (all three components agree), so we use
    those exact values (30° from the downward vertical, azimuth 20°), normalised against
    round-off. They differ from the normalised printed vector by less than 3e-5.

    **Returns:** `(q0, omega0)`, numpy arrays of shape (4, 3).
    """
    polar, azimuth = np.deg2rad(30.0), np.deg2rad(20.0)
    q3 = np.array([np.sin(polar) * np.cos(azimuth), np.sin(polar) * np.sin(azimuth), np.cos(polar)])
    q0 = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0], q3 / np.linalg.norm(q3), [0.0, 0.0, 1.0]])
    omega0 = np.zeros((4, 3))
    omega0[0] = [-10.0, 4.0, 0.0]
    return q0, omega0
