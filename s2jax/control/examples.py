"""Ready trajectory-optimisation problems, with their initial states and initial guesses."""

import jax.numpy as jnp
import numpy as np

from .. import forces
from ..models import spherical_pendulum
from ._problem import Problem

UPRIGHT = np.array([0.0, 0.0, -1.0])  # e₃ points down (gravity), so upright is −e₃


def spherical_pendulum_swing_up(horizon: float = 6.0, dt: float = 0.02, bound: float = 0.3):
    """Swing a spherical pendulum (m = 1 kg, r = 1 m, g = 9.81 m/s²) from hanging at rest to
    upright at rest with a pivot torque |u_i| ≤ `bound`·m g r per component.

    With bound = 0.3 the torque cannot lift the bob directly (that needs m g r): the solution
    pumps energy over several swings. The end state is a terminal constraint,
    c = (q_N − (−e₃), ω_N) = 0; the running cost is 0.01 |u|² (N·m)² per second.

    Hanging at rest with u = 0 is a stationary point of the cost (by the symmetry about the
    vertical, every first-order change of u leaves q_N·e₃ unchanged), so the initial guess is
    a small torque about e₁ at the pendulum's natural frequency √(g/r).

    **Returns:** `(problem, q0, omega0, init)`.
    """
    params = {"m": 1.0, "r": 1.0, "g": 9.81}
    limit = bound * params["m"] * params["g"] * params["r"]
    num_steps = round(horizon / dt)
    up = jnp.asarray(UPRIGHT)[None]
    problem = Problem(
        spherical_pendulum.lagrangian, params, forces.PivotTorque(0), dt, num_steps,
        running_cost=lambda t, q, omega, u: 0.01 * jnp.sum(u**2),
        terminal_constraint=lambda q, omega: jnp.concatenate([(q - up).ravel(), omega.ravel()]),
        lower=-limit * jnp.ones(3), upper=limit * jnp.ones(3),
    )
    t = dt * np.arange(num_steps)
    init = np.zeros((num_steps, 3))
    init[:, 0] = 0.2 * limit * np.sin(np.sqrt(params["g"] / params["r"]) * t)
    return problem, np.array([[0.0, 0.0, 1.0]]), np.zeros((1, 3)), init
