"""Issue 31, item 1: a control solution's estimate of how far the continuous system, driven by its
controls, ends from it (`ControlSolution.continuous_miss`), against an independent tight solve
of the continuous equations (a point mass on a rod in Cartesian coordinates, DOP853 at 1e-12,
`cartesian_chain_reference`), the controls held over each step."""

import cartesian_chain_reference as cartesian
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax.models import spherical_pendulum as pendulum

TARGET = jnp.array([[0.6, 0.0, 0.8]])


def _solve(num_steps):
    """test_control's reach problem (0.4 s towards TARGET), in `num_steps` steps."""
    problem = s2.control.Problem(
        pendulum.lagrangian, {"m": 1.0, "r": 1.0, "g": 9.81}, s2.forces.PivotTorque(0), 0.4 / num_steps, num_steps,
        running_cost=lambda t, q, omega, u: jnp.sum(u**2),
        terminal_cost=lambda q, omega: 100.0 * jnp.sum((q - TARGET) ** 2) + jnp.sum(omega**2),
    )
    q0, omega0 = np.array([[0.0, 0.6, 0.8]]), np.zeros((1, 3))
    return problem, s2.control.solve(problem, q0, omega0, solver=s2.control.ILQR())


def _continuous_final_state(problem, solution):
    """The Cartesian reference, one solve per step with that step's control held."""
    q, omega = np.asarray(solution.q[0]), np.asarray(solution.omega[0])
    for u in np.asarray(solution.controls):
        q, omega = cartesian.solve(q, omega, [1.0], [1.0], 9.81, lambda t, u=u: u, np.zeros(3), problem.dt)
    return q, omega


@pytest.mark.slow
@pytest.mark.parametrize("num_steps", [10, 20])
def test_the_estimated_miss_is_the_continuous_systems(num_steps):
    problem, solution = _solve(num_steps)
    miss_q, miss_omega = solution.continuous_miss(problem)
    q, omega = _continuous_final_state(problem, solution)
    true_q = np.max(np.linalg.norm(np.asarray(solution.q[-1]) - q, axis=-1))
    true_omega = np.max(np.linalg.norm(np.asarray(solution.omega[-1]) - omega, axis=-1))
    assert true_q > 1e-4  # the VI's O(h²) miss at this step: a check that can fail
    # The estimate's own error is RK4's at h/8, O(h⁴/8⁴): measured 2.4e-7 (10 steps) and 6e-8 (20
    # steps) of the miss, which falls 4× per halving of h (1.17e-3, 2.9e-4, 7.3e-5 for 10, 20, 40).
    np.testing.assert_allclose(miss_q, true_q, rtol=1e-5)
    np.testing.assert_allclose(miss_omega, true_omega, rtol=1e-5)
    with pytest.raises(TypeError, match="must be the s2jax.control.Problem solved"):
        solution.continuous_miss("problem")
    with pytest.raises(ValueError, match="`refinement` must be a positive int"):
        solution.continuous_miss(problem, refinement=0)
