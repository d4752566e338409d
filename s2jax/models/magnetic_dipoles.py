"""A planar array of magnetic dipoles: Lee–Leok–McClamroch 2009 (002), Example 5.

n thin rod magnets (spherical compasses) of mass m_i and length l_i, each free to turn about
its centre, a fixed pivot p_i; q_i is the direction of its north pole and ν_i q_i its dipole
moment. With r_ij = p_j − p_i and μ the permeability, M_ij = (1/12) m_i l_i² δ_ij and

    V(q) = ½ Σ_{i≠j} μ ν_i ν_j / (4π |r_ij|³) [q_i·q_j − 3 (q_i·r_ij)(q_j·r_ij) / |r_ij|²],

the dipole–dipole energy, whose equations of motion are (3.25)–(3.26); there is no gravity (each magnet turns
about its centre). M is diagonal, so 002 uses the explicit integrator (3.17)–(3.18) (docs/api/models.md).
"""

import jax.numpy as jnp
import numpy as np

from .._system import LagrangianSystem
from .._validation import positive_parameters


def inertia_matrix(params):
    """M = diag(m_i l_i² / 12)."""
    return jnp.diag(params["masses"] * params["lengths"] ** 2 / 12.0)


def potential(q, params):
    """The dipole–dipole energy over all ordered pairs i ≠ j, as one (n, n) array.

    r_ii = 0 on the diagonal would divide by zero; |r_ii|² is replaced by 1 *before* the
    divisions and the diagonal masked out after them, so that neither the value nor the
    gradient (in q or in the pivots) sees it.
    """
    moments, pivots = params["moments"], params["pivots"]
    n = q.shape[0]
    off_diagonal = ~np.eye(n, dtype=bool)
    offset = pivots[None, :, :] - pivots[:, None, :]  # offset[i, j] = r_ij
    distance2 = jnp.where(off_diagonal, jnp.sum(offset**2, axis=-1), 1.0)
    strength = (
        params["permeability"] * jnp.outer(moments, moments) / (4.0 * jnp.pi * distance2**1.5)
    )
    along_i = jnp.einsum("ia,ija->ij", q, offset)  # q_i·r_ij
    along_j = jnp.einsum("ja,ija->ij", q, offset)  # q_j·r_ij
    pair = strength * (q @ q.T - 3.0 * along_i * along_j / distance2)
    return 0.5 * jnp.sum(jnp.where(off_diagonal, pair, 0.0))


@positive_parameters("masses", "lengths", "permeability")
def lagrangian(q, qdot, params):
    """L = ½ Σ_i (m_i l_i²/12) |q̇_i|² − V(q)."""
    n = params["masses"].shape[0]
    if q.shape != (n, 3):
        raise ValueError(f"this array has {n} dipoles: q must have shape ({n}, 3), got {q.shape}")
    inertia = params["masses"] * params["lengths"] ** 2 / 12.0
    kinetic = 0.5 * jnp.sum(inertia * jnp.sum(qdot**2, axis=-1))
    return kinetic - potential(q, params)


def system(force=None):
    """The `LagrangianSystem` of `lagrangian` with `force`, declaring M diagonal for every
    params, so a run with traced params does not probe it (`LagrangianSystem.inertia_structure`)."""
    return LagrangianSystem(lagrangian, force, inertia_structure="diagonal")


def grid_pivots(rows, columns, spacing):
    """Pivots on a rows × columns square grid in the plane x₃ = 0, numbered row by row.

    Dipole k (0-based) sits at spacing · (k mod columns, k div columns, 0).
    """
    k = np.arange(rows * columns)
    return spacing * np.stack([k % columns, k // columns, np.zeros_like(k)], axis=-1).astype(float)


def paper_params():
    """Example 5: 16 dipoles, m_i = 0.05 kg, l_i = 0.02 m, ν_i = 0.1 A·m², μ = 4π·10⁻⁷ N/A².

    The pivots are the vertices of a 4 × 4 square grid of spacing 1.2 l_i = 0.024 m; 002 does
    not say which plane or numbering, we take the plane x₃ = 0 numbered row by row
    (`grid_pivots`), so dipole 16 (row 15 here) is a corner.
    """
    length = 0.02
    return {
        "masses": np.full(16, 0.05),
        "lengths": np.full(16, length),
        "moments": np.full(16, 0.1),
        "permeability": 4.0 * np.pi * 1e-7,
        "pivots": grid_pivots(4, 4, 1.2 * length),
    }


def paper_state():
    """The initial state of Example 5, made exact.

    q_i = e₁ = (1, 0, 0), ω_i = 0, except dipole 16 (row 15): the printed
    q₁₆₀ = (0.3536, 0.3536, −0.8660) is (sin 30° cos 45°, sin 30° sin 45°, −cos 30°) =
    (√2/4, √2/4, −√3/2) rounded to four digits, which we use (normalised against round-off;
    it differs from the normalised printed vector by less than 5e-5). The printed
    ω₁₆₀ = (0, 0.5, 0) rad/s is not tangent (ω₁₆₀·q₁₆₀ = √2/8): we project it onto
    T_{q₁₆₀} S², which leaves q̇₁₆₀ = ω₁₆₀ × q₁₆₀ unchanged.

    **Returns:** `(q0, omega0)`, numpy arrays of shape (16, 3).
    """
    q0 = np.tile([1.0, 0.0, 0.0], (16, 1))
    omega0 = np.zeros((16, 3))
    q16 = np.array([np.sqrt(2.0) / 4.0, np.sqrt(2.0) / 4.0, -np.sqrt(3.0) / 2.0])
    q0[15] = q16 / np.linalg.norm(q16)
    printed = np.array([0.0, 0.5, 0.0])
    omega0[15] = printed - np.dot(q0[15], printed) * q0[15]
    return q0, omega0
