"""A charged particle on the unit sphere around a magnetic monopole at its centre.

A particle of mass m and charge e on S² in the field B = g x/|x|³ of a monopole of strength g, with
the vector potential A(x) = g (−x₂, x₁, 0) / (|x| (|x| + x₃)) (singular on the half-line x₃ = −|x|,
a Dirac string: the particle must not reach the south pole of S²), has L(q, q̇) = ½ m |q̇|² + e A(q)·q̇,
a term linear in q̇: not the form (2.2) of 002. It conserves the energy ½ m |q̇|² and the Poincaré vector
J = q × m q̇ − e g q (`poincare_vector`), the variational integrators J₃ exactly and J₁, J₂ only up to
O(h²) (why: docs/api/models.md).
"""

import jax.numpy as jnp
import numpy as np

from .._validation import positive_parameters


def vector_potential(q, params):
    """A(q) = g (−q₂, q₁, 0) / (|q| (|q| + q₃)), per body, the monopole's potential with its string along −e₃."""
    radius = jnp.linalg.norm(q, axis=-1, keepdims=True)
    swirl = jnp.stack([-q[..., 1], q[..., 0], jnp.zeros_like(q[..., 0])], axis=-1)
    return params["g"] * swirl / (radius * (radius + q[..., 2:]))


@positive_parameters("m")
def lagrangian(q, qdot, params):
    """L = ½ m |q̇|² + e A(q)·q̇."""
    if q.shape != (1, 3):
        raise ValueError(f"the monopole particle is 1 body: q must have shape (1, 3), got {q.shape}")
    return 0.5 * params["m"] * jnp.sum(qdot**2) + params["e"] * jnp.sum(vector_potential(q, params) * qdot)


def poincare_vector(q, qdot, params):
    """J = q × m q̇ − e g q, shape (…, 1, 3): conserved by the continuous motion."""
    return jnp.cross(q, params["m"] * qdot) - params["e"] * params["g"] * q


def paper_params():
    """m = 1, e = 1, g = 0.8 (our choice: a strong field, e g comparable to m |q × q̇|)."""
    return {"m": 1.0, "e": 1.0, "g": 0.8}


def paper_state():
    """q₀ 40° from e₃, moving along the parallel at 1.2 (our choice).

    The particle circles a cone of half-angle 56° about −J, which stays 28° away from the
    string at −e₃ (and from ±e₃, the poles of spherical coordinates).

    **Returns:** `(q0, omega0)`, numpy arrays of shape (1, 3).
    """
    angle = np.deg2rad(40.0)
    q0 = np.array([[np.sin(angle), 0.0, np.cos(angle)]])
    # q̇₀ = ω₀ × q₀ = (0, 1.2, 0) for ω₀ = q₀ × q̇₀.
    omega0 = 1.2 * np.array([[-np.cos(angle), 0.0, np.sin(angle)]])
    return q0, omega0
