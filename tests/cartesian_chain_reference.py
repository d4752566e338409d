"""A chain of point masses on massless rods, simulated in Cartesian coordinates, for tests.

Independent of s2jax and of the sphere formulation: masses m_i at x_i with the holonomic
constraints |x_1|² = l_1², |x_i − x_{i−1}|² = l_i², gravity m_i g e₃ (e₃ down), a torque τ at
the pivot on the first rod and a force d on the last mass. The massless first rod carries τ to
its mass as the force P with x_1 × P = τ, P = τ × x_1 / l_1². Newton's law with Lagrange
multipliers, M ẍ = F + Gᵀλ, G = ∂g/∂x, with λ from the differentiated constraint
G M⁻¹ (F + Gᵀλ) = −Ġ ẋ (index reduction), solved by scipy's DOP853 at tight tolerances.
"""

import numpy as np
from scipy.integrate import solve_ivp

E3 = np.array([0.0, 0.0, 1.0])


def _constraint_jacobian(x, n):
    """G, shape (n, 3n): row c is ∂g_c/∂x for g_c = |x_c − x_{c−1}|² − l_c² (x_{−1} = 0)."""
    jac = np.zeros((n, 3 * n))
    for c in range(n):
        rel = x[c] - (x[c - 1] if c else 0.0)
        jac[c, 3 * c : 3 * c + 3] = 2 * rel
        if c:
            jac[c, 3 * c - 3 : 3 * c] = -2 * rel
    return jac


def vector_field(t, y, masses, lengths, g, torque, tip):
    n = len(masses)
    x, v = y[: 3 * n].reshape(n, 3), y[3 * n :].reshape(n, 3)
    force = masses[:, None] * g * E3[None, :]
    force[0] += np.cross(torque(t), x[0]) / lengths[0] ** 2
    force[-1] += tip
    jac = _constraint_jacobian(x, n)
    jac_dot = _constraint_jacobian(v, n)  # G is linear in x
    inv_mass = np.repeat(1.0 / masses, 3)
    flat_force = force.ravel()
    lhs = (jac * inv_mass) @ jac.T
    rhs = -jac_dot @ v.ravel() - jac @ (inv_mass * flat_force)
    multipliers = np.linalg.solve(lhs, rhs)
    accel = inv_mass * (flat_force + jac.T @ multipliers)
    return np.concatenate([v.ravel(), accel])


def solve(q0, omega0, masses, lengths, g, torque, tip, t1):
    """(q, ω) at t1 of the chain from (q0, ω0) (sphere variables in, sphere variables out).

    `torque(t)` is the pivot torque (a function of time), `tip` the constant force on the last
    mass. x_i = Σ_{j≤i} l_j q_j, v_i = Σ_{j≤i} l_j ω_j × q_j; back: q_i = (x_i − x_{i−1})/l_i,
    ω_i = q_i × (v_i − v_{i−1})/l_i.
    """
    masses, lengths = np.asarray(masses, float), np.asarray(lengths, float)
    q0, omega0 = np.asarray(q0), np.asarray(omega0)
    x0 = np.cumsum(lengths[:, None] * q0, axis=0)
    v0 = np.cumsum(lengths[:, None] * np.cross(omega0, q0), axis=0)
    solution = solve_ivp(
        vector_field, (0.0, t1), np.concatenate([x0.ravel(), v0.ravel()]), method="DOP853",
        rtol=1e-12, atol=1e-12, args=(masses, lengths, g, torque, np.asarray(tip, float)),
    )
    n = len(masses)
    x, v = solution.y[: 3 * n, -1].reshape(n, 3), solution.y[3 * n :, -1].reshape(n, 3)
    rel_x = np.diff(np.concatenate([np.zeros((1, 3)), x]), axis=0)
    rel_v = np.diff(np.concatenate([np.zeros((1, 3)), v]), axis=0)
    q = rel_x / lengths[:, None]
    return q, np.cross(q, rel_v / lengths[:, None])
