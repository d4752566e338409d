"""The n-body problem on the sphere of Lee–Leok–McClamroch 2009 (002), Example 2.

n point masses m_i on the unit sphere, M_ij = m_i δ_ij, under the potential of Kozlov and
Harin (002's reference [9]), the analogue of gravity on S²:

    V(q) = −γ/2 Σ_{i≠j} (q_i·q_j) / √(1 − (q_i·q_j)²),

whose equations of motion are (3.21): the pair potential −γ cot θ_ij (θ_ij the angle between q_i
and q_j) blows up when two bodies collide (θ → 0) or are antipodal (θ → π). M is diagonal, so 002
uses the explicit integrator (3.17)–(3.18). See docs/api/models.md.
"""

import jax.numpy as jnp
import numpy as np

from .._system import LagrangianSystem
from .._validation import positive_parameters


def inertia_matrix(params):
    """M = diag(m_1, …, m_n)."""
    return jnp.diag(params["masses"])


def potential(q, params):
    """V(q) = −γ/2 Σ_{i≠j} c_ij / √(1 − c_ij²), c_ij = q_i·q_j, over all ordered pairs.

    The diagonal c_ii = 1 would divide by zero; it is replaced by 0 *before* the square root
    and the division, and masked out after them, so that neither the value nor the gradient
    sees the singular diagonal.
    """
    n = q.shape[0]
    off_diagonal = ~np.eye(n, dtype=bool)
    cosine = jnp.where(off_diagonal, q @ q.T, 0.0)
    pair = cosine / jnp.sqrt(1.0 - cosine**2)
    return -0.5 * params["gamma"] * jnp.sum(jnp.where(off_diagonal, pair, 0.0))


@positive_parameters("masses")
def lagrangian(q, qdot, params):
    """L = ½ Σ_i m_i |q̇_i|² − V(q)."""
    n = params["masses"].shape[0]
    if q.shape != (n, 3):
        raise ValueError(
            f"this n-body problem has {n} bodies: q must have shape ({n}, 3), got {q.shape}"
        )
    kinetic = 0.5 * jnp.sum(params["masses"] * jnp.sum(qdot**2, axis=-1))
    return kinetic - potential(q, params)


def system(force=None):
    """The `LagrangianSystem` of `lagrangian` with `force`, declaring M diagonal for every
    params, so a run with traced params does not probe it (`LagrangianSystem.inertia_structure`)."""
    return LagrangianSystem(lagrangian, force, inertia_structure="diagonal")


def paper_params():
    """n = 3, m_1 = m_2 = m_3 = 1, γ = 1 (002 Example 2)."""
    return {"masses": np.ones(3), "gamma": 1.0}


def paper_state():
    """The initial state of Example 2, exact as printed.

    q₁₀ = (0, −1, 0), q₂₀ = (0, 0, 1), q₃₀ = (−1, 0, 0), ω₁₀ = (0, 0, −1.1), ω₂₀ = (1, 0, 0),
    ω₃₀ = (0, 1, 0): unit and tangent without rounding.

    **Returns:** `(q0, omega0)`, numpy arrays of shape (3, 3).
    """
    q0 = np.array([[0.0, -1.0, 0.0], [0.0, 0.0, 1.0], [-1.0, 0.0, 0.0]])
    omega0 = np.array([[0.0, 0.0, -1.1], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    return q0, omega0
