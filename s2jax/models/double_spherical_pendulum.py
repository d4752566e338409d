"""The double spherical pendulum of Lee–Leok–McClamroch 2009 (002), Example 1.

Two point masses m₁, m₂ on massless rigid links of lengths l₁, l₂; q₁ points from the pivot
to the first mass, q₂ from the first mass to the second, e₃ = (0, 0, 1) is the direction of
gravity. The inertia matrix is M₁₁ = (m₁ + m₂) l₁², M₁₂ = m₂ l₁ l₂, M₂₂ = m₂ l₂², and

    V(q₁, q₂) = −(m₁ + m₂) g l₁ e₃·q₁ − m₂ g l₂ e₃·q₂,

giving the equations of motion (3.19)–(3.20). See docs/api/models.md.
"""

import jax.numpy as jnp
import numpy as np

from .._validation import positive_parameters


def inertia_matrix(params):
    """M of Example 1."""
    m1, m2, l1, l2 = params["m1"], params["m2"], params["l1"], params["l2"]
    return jnp.array([[(m1 + m2) * l1**2, m2 * l1 * l2], [m2 * l1 * l2, m2 * l2**2]])


@positive_parameters("m1", "m2", "l1", "l2")
def lagrangian(q, qdot, params):
    """L = ½ Σ M_ij q̇_i·q̇_j + (m₁ + m₂) g l₁ q₁₃ + m₂ g l₂ q₂₃."""
    if q.shape != (2, 3):
        raise ValueError(f"the double spherical pendulum has 2 bodies: q must have shape (2, 3), got {q.shape}")
    m1, m2, l1, l2, g = params["m1"], params["m2"], params["l1"], params["l2"], params["g"]
    kinetic = 0.5 * jnp.einsum("ij,ia,ja->", inertia_matrix(params), qdot, qdot)
    potential = -(m1 + m2) * g * l1 * q[0, 2] - m2 * g * l2 * q[1, 2]
    return kinetic - potential


def paper_params():
    """m₁ = m₂ = 1 kg, l₁ = l₂ = 9.81 m, g = 9.81 m/s² (002 Example 1)."""
    return {"m1": 1.0, "m2": 1.0, "l1": 9.81, "l2": 9.81, "g": 9.81}


def paper_state():
    """The initial state of Example 1, made exact.

    002 prints q₁₀ = (0.8660, 0, 0.5) and ω₁₀ = (−0.4330, 0, 0.75): rounded values with
    |q₁₀| ≠ 1 and q₁₀·ω₁₀ ≈ 2e-5, which the equations of motion do not allow. We use
    q₁₀ = (√3/2, 0, 1/2) and the projection of the printed ω₁₀ onto T_{q₁₀} S²;
    q₂₀ = (0, 0, 1), ω₂₀ = (0, 1, 0) are exact as printed.

    **Returns:** `(q0, omega0)`, numpy arrays of shape (2, 3).
    """
    q0 = np.array([[np.sqrt(3.0) / 2.0, 0.0, 0.5], [0.0, 0.0, 1.0]])
    omega_printed = np.array([[-0.4330, 0.0, 0.75], [0.0, 1.0, 0.0]])
    omega0 = omega_printed - np.sum(q0 * omega_printed, axis=-1, keepdims=True) * q0
    return q0, omega0
