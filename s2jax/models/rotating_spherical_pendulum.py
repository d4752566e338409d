"""A spherical pendulum seen from a frame rotating at a constant rate Ω about the vertical.

A point mass m on a massless link of length r, q ∈ S² pointing from the pivot to the mass, e₃ the
direction of gravity (as in every s2jax model). The mass's inertial velocity is r (q̇ + Ω e₃ × q), so

    L(q, q̇) = ½ m r² |q̇ + Ω e₃ × q|² + m g r e₃·q,

with a term linear in q̇ (Coriolis) and the centrifugal potential: not the form (2.2) of 002. Besides
the Jacobi integral, the momentum map J₃ = e₃·(q × ∂L/∂q̇) (`vertical_momentum`) is conserved exactly
by the variational integrators. L expanded: docs/api/models.md.
"""

import jax.numpy as jnp
import numpy as np

from .._validation import positive_parameters

E3 = (0.0, 0.0, 1.0)


@positive_parameters("m", "r")
def lagrangian(q, qdot, params):
    """L = ½ m r² |q̇ + Ω e₃ × q|² + m g r e₃·q."""
    if q.shape != (1, 3):
        raise ValueError(f"the rotating spherical pendulum has 1 body: q must have shape (1, 3), got {q.shape}")
    m, r, g, rate = params["m"], params["r"], params["g"], params["Omega"]
    frame = rate * jnp.asarray(E3, dtype=q.dtype)
    velocity = qdot + jnp.cross(frame, q)
    return 0.5 * m * r**2 * jnp.sum(velocity**2) + m * g * r * q[0, 2]


def vertical_momentum(q, qdot, params):
    """J₃ = e₃·(q × ∂L/∂q̇) = m r² e₃·(q × (q̇ + Ω e₃ × q)), the momentum map of rotations about e₃."""
    frame = params["Omega"] * jnp.asarray(E3, dtype=q.dtype)
    momentum = params["m"] * params["r"] ** 2 * (qdot + jnp.cross(frame, q))
    return jnp.sum(jnp.cross(q, momentum)[..., 2], axis=-1)


def paper_params():
    """m = 1 kg, r = 1 m, g = 9.81 m/s², Ω = 2 rad/s (our choice; no paper treats this model)."""
    return {"m": 1.0, "r": 1.0, "g": 9.81, "Omega": 2.0}


def paper_state():
    """The bob 60° from the downward vertical, moving horizontally around it.

    q₀ = (sin 60°, 0, cos 60°); ω₀ is the projection onto T_{q₀} S² of 1.5 rad/s about the
    vertical (our choice).

    **Returns:** `(q0, omega0)`, numpy arrays of shape (1, 3).
    """
    q0 = np.array([[np.sin(np.pi / 3), 0.0, np.cos(np.pi / 3)]])
    omega0 = np.array([[0.0, 0.0, 1.5]])
    omega0 = omega0 - np.sum(q0 * omega0, axis=-1, keepdims=True) * q0
    return q0, omega0
