"""`receding_horizon` reports a plant step that fails, and does not go on from its state."""

import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax.models import spherical_pendulum as pendulum

PARAMS = {"m": 1.0, "r": 1.0, "g": 9.81}
DT = 0.02
Q0 = np.array([[np.sin(0.3), 0.0, np.cos(0.3)]])
OMEGA0 = np.array([[0.0, 1.0, 0.0]])


def _problem(force=None, dt=DT):
    return s2.control.Problem(
        pendulum.lagrangian,
        PARAMS,
        s2.forces.PivotTorque(0) if force is None else force,
        dt,
        4,
        running_cost=lambda t, q, w, u: jnp.sum(u**2),
        terminal_cost=lambda q, w: jnp.sum(w**2),
    )


def _closed_loop(plant):
    return s2.control.receding_horizon(
        _problem(), Q0, OMEGA0, solver=s2.control.ILQR(max_steps=2), num_solves=3, steps_per_solve=2, plant=plant
    )


def _nan_after(t, q, omega, u, params):
    """No force up to t = 0.05, NaN from there on: the plant's step 2 (t 0.04 → 0.06) fails."""
    return jnp.where(t > 0.05, jnp.nan, 0.0) * jnp.ones_like(q)


def _assert_failed_at(closed, code, step):
    # the state freezes at the last good step, as `simulate`'s does
    assert bool(jnp.all(jnp.isfinite(closed.q))) and bool(jnp.all(jnp.isfinite(closed.omega)))
    assert closed.result == code
    assert int(closed.failed_step) == step
    # the solve whose plant steps failed, and every later one, carry the plant's code
    solve = step // 2
    np.testing.assert_array_equal(closed.results._value[solve:], code._value)
    np.testing.assert_array_equal(closed.q[step + 1 :], jnp.broadcast_to(closed.q[step], closed.q[step + 1 :].shape))
    np.testing.assert_array_equal(
        closed.omega[step + 1 :], jnp.broadcast_to(closed.omega[step], closed.omega[step + 1 :].shape)
    )


@pytest.mark.slow
def test_a_plant_whose_force_is_nan_is_not_successful():
    force = s2.forces.PivotTorque(0) + s2.Force(_nan_after, depends_on_velocity=False)
    closed = _closed_loop(_problem(force))
    _assert_failed_at(closed, s2.RESULTS.nonfinite_state, 2)
    # the failure `simulate` reports for the plant's dynamics under the same controls
    alone = s2.simulate(
        pendulum.lagrangian,
        Q0,
        OMEGA0,
        PARAMS,
        dt=DT,
        num_steps=6,
        force=force,
        controls=closed.controls,
        throw=False,
    )
    assert alone.result == closed.result and int(alone.failed_step) == int(closed.failed_step)
    np.testing.assert_allclose(closed.q, alone.q, rtol=0, atol=1e-14)


@pytest.mark.slow
def test_a_plant_step_too_large_is_not_successful():
    """A plant step of 2 s has |a| = h|ω| = 2 > 1 in (3.17) of the explicit VI: no rotation
    solves it, the first plant step fails and the state stays the initial one."""
    closed = _closed_loop(_problem(dt=2.0))
    _assert_failed_at(closed, s2.RESULTS.step_too_large, 0)
    np.testing.assert_array_equal(closed.q[0], Q0)


@pytest.mark.slow
def test_a_successful_plant_reports_no_failure():
    closed = _closed_loop(_problem())
    assert closed.result == s2.RESULTS.successful and int(closed.failed_step) == -1
    assert bool(jnp.all(closed.results == s2.RESULTS.successful))
