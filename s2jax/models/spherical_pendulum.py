"""The spherical pendulum of Zenkov–Leok–Bloch 2012 (004), written in the variables of 002.

A point mass m on a massless rigid link of length r. q ∈ S² points from the pivot to the
mass and e₃ = (0, 0, 1) is the direction of gravity, as in every s2jax model (002 Example 1).
The inertia matrix is M₁₁ = m r² and V(q) = −m g r e₃·q, so (2.9)–(2.10) of 002 read
q̇ = ω × q, m r² ω̇ = m g r q × e₃. This is the chain pendulum of 001 §V with n = 1.
004 writes the pendulum as a rigid body of attitude R with variables (Γ, Ω): q = R e₃, ω = R Ω and
R Γ = −e₃. The conventions of 004 and why the two agree: docs/api/models.md.
"""

import jax.numpy as jnp
import numpy as np

from .._validation import positive_parameters


def inertia_matrix(params):
    """M = [m r²]."""
    return jnp.reshape(params["m"] * params["r"] ** 2, (1, 1))


def potential(q, params):
    """V(q) = −m g r e₃·q, e₃ the direction of gravity."""
    return -params["m"] * params["g"] * params["r"] * q[0, 2]


@positive_parameters("m", "r")
def lagrangian(q, qdot, params):
    """L = ½ m r² |q̇|² + m g r e₃·q."""
    if q.shape != (1, 3):
        raise ValueError(
            f"the spherical pendulum has 1 body: q must have shape (1, 3), got {q.shape}"
        )
    kinetic = 0.5 * params["m"] * params["r"] ** 2 * jnp.sum(qdot**2)
    return kinetic - potential(q, params)


def paper_params():
    """m = 1 kg, r = 9.8 m (004 §VII), g = 9.8 m/s².

    004 does not print g; 9.8 m/s² is our choice (it makes g/r = 1 s⁻²).
    """
    return {"m": 1.0, "r": 9.8, "g": 9.8}


def body_to_inertial(gamma):
    """The attitude R₀ ∈ SO(3) that we choose for 004's initial condition.

    R₀ must map 004's upward vertical Γ̂₀ to −e₃; it is fixed only up to rotations about the
    vertical, a symmetry of the pendulum. We take the rotation by π about the bisector u of
    Γ̂₀ and −e₃, R₀ = 2uuᵀ − I, u = (Γ̂₀ − e₃)/|Γ̂₀ − e₃|, which swaps Γ̂₀ and −e₃, hence
    maps the link direction e₃ of the body frame to q₀ = R₀ e₃ = −Γ̂₀.

    **Arguments:** `gamma`: Γ₀, any non-zero vector not along +e₃ (normalised here).

    **Returns:** R₀, a numpy array of shape (3, 3).
    """
    gamma = np.asarray(gamma, dtype=float)
    gamma = gamma / np.linalg.norm(gamma)
    u = gamma - np.array([0.0, 0.0, 1.0])
    u = u / np.linalg.norm(u)
    return 2.0 * np.outer(u, u) - np.eye(3)


def paper_state():
    """004 §VII's initial condition, made exact and mapped to (q, ω).

    004 prints Γ₀ = (0.3, 0.2, −0.932738) and Ω₀ = (0.6, 0) rad/s. The printed Γ₀³ is −√0.87
    rounded to six digits (|Γ₀| − 1 ≈ 1e-7): we use Γ₀ = (0.3, 0.2, −√0.87), normalised. Under
    the attitude R₀ of `body_to_inertial`,

        q₀ = R₀ e₃ = −Γ̂₀ ≈ (−0.3, −0.2, 0.932738),    ω₀ = R₀ (0.6, 0, 0),

    i.e. the bob starts 21.1° from the downward vertical e₃. ω₀ is tangent up to round-off
    (ω₀·q₀ = Ω₀³ = 0) and is projected onto T_{q₀} S² to make that exact.

    **Returns:** `(q0, omega0)`, numpy arrays of shape (1, 3).
    """
    gamma = np.array([0.3, 0.2, -np.sqrt(0.87)])
    rotation = body_to_inertial(gamma)
    q0 = rotation @ np.array([0.0, 0.0, 1.0])
    q0 = q0 / np.linalg.norm(q0)
    omega0 = rotation @ np.array([0.6, 0.0, 0.0])
    omega0 = omega0 - np.dot(q0, omega0) * q0
    return q0[None], omega0[None]
