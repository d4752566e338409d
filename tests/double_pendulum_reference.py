"""The double spherical pendulum (002 Example 1) written out by hand in numpy, for tests.

Independent of s2jax: the equations of motion (3.19)–(3.20) of Lee–Leok–McClamroch 2009 typed
in from the paper, and a scipy DOP853 solve of them.
"""

import numpy as np
from scipy.integrate import solve_ivp

E3 = np.array([0.0, 0.0, 1.0])


def hat(v):
    return np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])


def vector_field(y, m1, m2, l1, l2, g):
    """(3.19)–(3.20) with y = (q1, q2, ω1, ω2)."""
    q1, q2, w1, w2 = y[0:3], y[3:6], y[6:9], y[9:12]
    a = np.zeros((6, 6))
    a[:3, :3] = (m1 + m2) * l1**2 * np.eye(3)
    a[:3, 3:] = -m2 * l1 * l2 * hat(q1) @ hat(q2)
    a[3:, :3] = -m2 * l1 * l2 * hat(q2) @ hat(q1)
    a[3:, 3:] = m2 * l2**2 * np.eye(3)
    b = np.concatenate(
        [
            m2 * l1 * l2 * np.dot(w2, w2) * hat(q1) @ q2 + (m1 + m2) * g * l1 * hat(q1) @ E3,
            m2 * l1 * l2 * np.dot(w1, w1) * hat(q2) @ q1 + m2 * g * l2 * hat(q2) @ E3,
        ]
    )
    wdot = np.linalg.solve(a, b)
    return np.concatenate([np.cross(w1, q1), np.cross(w2, q2), wdot])


def solve(q0, omega0, params, t1, rtol=1e-12, atol=1e-12):
    """(q, ω) at t1 from a DOP853 solve of (3.19)–(3.20)."""
    args = (params["m1"], params["m2"], params["l1"], params["l2"], params["g"])
    y0 = np.concatenate([np.ravel(q0), np.ravel(omega0)])
    sol = solve_ivp(
        lambda t, y: vector_field(y, *args), (0.0, t1), y0, method="DOP853", rtol=rtol, atol=atol
    )
    assert sol.success
    y = sol.y[:, -1]
    return y[:6].reshape(2, 3), y[6:].reshape(2, 3)
