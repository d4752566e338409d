"""A bead sliding on an ellipsoid with a spherical pendulum hanging from it: inertia m_ij(q).

Body 1 is a bead of mass m₁ on the ellipsoid Σ_a x_a²/s_a² = 1 (frictionless, two-sided), located by
its direction q₁ ∈ S² from the centre: x₁ = ρ(q₁) q₁ with ρ(q) = (Σ_a q_a²/s_a²)^{−1/2}. Body 2 is a
point mass m₂ on a massless link of length l hanging from the bead, x₂ = x₁ + l q₂. e₃ is the
direction of gravity. With D₁ = ∂x₁/∂q₁ (formed by autodiff),

    L = ½ m₁ |D₁q̇₁|² + ½ m₂ |D₁q̇₁ + l q̇₂|² + m₁ g e₃·x₁ + m₂ g e₃·x₂,

the configuration-dependent inertia of 001 (11). Its derivation: docs/api/models.md.
"""

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import positive_parameters


def bead_position(q1, params):
    """x₁ = q₁ (Σ_a q_a²/s_a²)^{−1/2}: the point of the ellipsoid in the direction of q₁."""
    return q1 / jnp.sqrt(jnp.sum((q1 / params["axes"]) ** 2))


def positions(q, params):
    """(x₁, x₂), the bead and the pendulum mass in ℝ³, shape (2, 3)."""
    x1 = bead_position(q[0], params)
    return jnp.stack([x1, x1 + params["l"] * q[1]])


@positive_parameters("m1", "m2", "l", "axes")
def lagrangian(q, qdot, params):
    """L = ½ m₁ |ẋ₁|² + ½ m₂ |ẋ₂|² + g e₃·(m₁ x₁ + m₂ x₂), ẋ = ∂x/∂q q̇ by a Jacobian–vector product."""
    if q.shape != (2, 3):
        raise ValueError(f"the ellipsoid pendulum has 2 bodies: q must have shape (2, 3), got {q.shape}")
    x, xdot = jax.jvp(lambda c: positions(c, params), (q,), (qdot,))
    masses = jnp.stack([params["m1"], params["m2"]])
    kinetic = 0.5 * jnp.sum(masses * jnp.sum(xdot**2, axis=-1))
    return kinetic + params["g"] * jnp.sum(masses * x[:, 2])


def paper_params():
    """m₁ = 1, m₂ = 0.5 kg, l = 1 m, semi-axes (1.5, 1, 0.75) m, g = 9.81 m/s² (our choice)."""
    return {"m1": 1.0, "m2": 0.5, "l": 1.0, "axes": np.array([1.5, 1.0, 0.75]), "g": 9.81}


def paper_state():
    """The bead 50° from the lowest direction e₃, the pendulum 30° off the vertical, both moving.

    **Returns:** `(q0, omega0)`, numpy arrays of shape (2, 3), ω₀ tangent.
    """
    a, b = np.deg2rad(50.0), np.deg2rad(30.0)
    q0 = np.array([[np.sin(a), 0.0, np.cos(a)], [0.0, np.sin(b), np.cos(b)]])
    omega0 = np.array([[0.3, 1.0, 0.0], [0.5, 0.0, 0.2]])
    omega0 = omega0 - np.sum(q0 * omega0, axis=-1, keepdims=True) * q0
    return q0, omega0
