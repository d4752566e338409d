"""When the trajectory optimisers stop: at once at an optimum of zero cost, early when the
terminal constraint is out of reach (instead of running every round to its caps)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax.control.examples import UPRIGHT, spherical_pendulum_swing_up
from s2jax.models import spherical_pendulum as pendulum

PARAMS = {"m": 1.0, "r": 1.0, "g": 9.81}


@pytest.mark.slow
def test_ilqr_converges_at_once_at_a_zero_cost_optimum():
    """Upright at rest with the swing-up's terminal constraint (upright at rest) and a tiny bound:
    u = 0 holds the equilibrium, cost 0 and violation 0, an optimum no step can improve on. iLQR
    says `successful` after one iteration of one round (it ran 17 × 20 and said not converged)."""
    problem, _, _, _ = spherical_pendulum_swing_up(horizon=0.2, bound=1e-3)
    solution = s2.control.solve(problem, UPRIGHT[None], np.zeros((1, 3)), solver=s2.control.ILQR(), throw=False)
    assert solution.result == s2.RESULTS.successful
    assert int(solution.num_iterations) == 1 and int(solution.num_outer_iterations) == 1
    assert float(solution.cost) == 0.0 and float(solution.constraint_violation) == 0.0
    np.testing.assert_array_equal(solution.controls, 0.0)


def _unreachable():
    """From hanging at rest to a target 37° away in 0.2 s with |u_i| ≤ 10⁻³ N·m: out of reach."""
    target = jnp.array([[0.6, 0.0, 0.8]])
    return s2.control.Problem(
        pendulum.lagrangian,
        PARAMS,
        s2.forces.PivotTorque(0),
        0.02,
        10,
        running_cost=lambda t, q, omega, u: jnp.sum(u**2),
        terminal_constraint=lambda q, omega: (q - target).ravel(),
        lower=-1e-3 * jnp.ones(3),
        upper=1e-3 * jnp.ones(3),
    )


@pytest.mark.slow
@pytest.mark.parametrize("solver", [s2.control.ILQR(), s2.control.SingleShooting()], ids=["ilqr", "single"])
def test_an_unreachable_target_stops_after_a_round_without_progress(solver):
    """The violation stays at 0.6 whatever ρ does: `solve` stops after the first round that lowers
    neither it nor the cost, far below its caps of 20 rounds (it ran all 20, 340 iLQR iterations),
    and says not converged; with throw=True the error says why it may have stopped early."""
    problem = _unreachable()
    q0, omega0 = np.array([[0.0, 0.0, 1.0]]), np.zeros((1, 3))
    solution = s2.control.solve(problem, q0, omega0, solver=solver, throw=False)
    assert solution.result == s2.RESULTS.optimisation_not_converged
    assert int(solution.num_outer_iterations) <= 3
    assert int(solution.num_iterations) <= 30
    assert float(solution.constraint_violation) > 0.5
    # solve's host check runs inside a `lax.cond`, so JAX may re-raise the SimulationError as its own error
    # The reason once (RESULTS' message), then what it suggests.
    message = "lowered neither the violation nor the cost; stopped early, it means the terminal constraint looks"
    with pytest.raises((s2.SimulationError, jax.errors.JaxRuntimeError), match=message):
        s2.control.solve(problem, q0, omega0, solver=solver)
    # In float64 (the suite's) the error does not blame float32.
    with pytest.raises((s2.SimulationError, jax.errors.JaxRuntimeError)) as raised:
        s2.control.solve(problem, q0, omega0, solver=solver)
    assert "float32" not in str(raised.value)


def test_the_not_converged_error_names_float32_when_x64_is_off():
    """Without `jax_enable_x64` the swing-up example does not converge (tried: the error said only
    "did not meet its tolerances"); the error then says the states are float32 and how to enable
    float64. Read from `jax.config` when the error is raised (`_solve._raise_if_failed`)."""
    from s2jax.control._solve import _not_converged_hint

    assert 'jax.config.update("jax_enable_x64", True)' in _not_converged_hint(False)
    assert "float32" not in _not_converged_hint(True)
