"""Issue 30, item 4: derivatives of an optimum (`s2jax.control.solve`) by the implicit function
theorem on its KKT conditions (`control/_implicit.py`), against central differences of converged
re-solves: the problem's model params, a cost weight closed over by the cost, the bounds, the
initial state; unconstrained, with a terminal constraint and with active bounds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax.models import spherical_pendulum as pendulum

TARGET = jnp.array([[0.6, 0.0, 0.8]])
Q0, OMEGA0 = jnp.array([[0.0, 0.6, 0.8]]), jnp.zeros((1, 3))
# A linear functional of the controls, so that the test sees du*/dθ, not only the cost's envelope.
WEIGHTS = jnp.linspace(-1.0, 1.0, 30).reshape(10, 3)
# Converged to round-off: the differences of re-solves are then limited by ε² and round-off/ε.
SOLVER = s2.control.ILQR(rtol=1e-15, max_steps=100)


def _problem(g, weight, bound=None, constrained=False):
    """The pendulum of test_control's `_reach_problem`, in 10 steps of 0.04 s: towards TARGET."""
    bounds = {} if bound is None else {"lower": -bound * jnp.ones(3), "upper": bound * jnp.ones(3)}
    if constrained:
        bounds["terminal_constraint"] = lambda q, omega: (q - TARGET)[0, :2]
    # The explicit VI (3.17)–(3.18), which the plan picks for this model from concrete params, named:
    # from traced params (g under jax.jacrev) the plan cannot see that M is diagonal and takes the
    # implicit VI, whose Newton solve, stopped at its tolerance, leaves ~1e-7 of noise in the
    # re-solves' controls; the differences below would see it / ε.
    return s2.control.Problem(
        pendulum.lagrangian, {"m": 1.0, "r": 1.0, "g": g}, s2.forces.PivotTorque(0), 0.04, 10,
        running_cost=lambda t, q, omega, u: jnp.sum(u**2),
        terminal_cost=lambda q, omega: weight * jnp.sum((q - TARGET) ** 2) + jnp.sum(omega**2),
        integrator=s2.ExplicitVariationalIntegrator(), **bounds,
    )


def _outputs(x, **options):
    """(J*, Σ WEIGHTS·u*) as functions of x = (g, the terminal weight, the bound, a scale of q0's tilt)."""
    angle = x[3]  # q0 is Q0 rotated by x[3] about e₁
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    rotation = jnp.array([[1.0, 0.0, 0.0], [0.0, cos, -sin], [0.0, sin, cos]])
    q0 = Q0 @ rotation.T
    bound = x[2] if options.pop("bounded", False) else None
    # The constraint met to 1e-10, not the default 1e-6: a difference quotient of re-solves sees it / ε.
    solution = s2.control.solve(
        _problem(x[0], x[1], bound, **options), q0, OMEGA0, solver=SOLVER, throw=False, constraint_tolerance=1e-10
    )
    return jnp.stack([solution.cost, jnp.sum(WEIGHTS * solution.controls)]), solution


def _check_against_differences(options, x, eps=1e-3):
    # One program gives the outputs and their Jacobian (the outputs as jacrev's aux): the re-solves
    # of the differences reuse it, rather than compiling the solve a second time on its own.
    def outputs_and_solution(x):
        outputs, solution = _outputs(x, **options)
        return outputs, (outputs, solution)

    with_jacobian = jax.jit(jax.jacrev(outputs_and_solution, has_aux=True))
    jacobian, (_, solution) = with_jacobian(x)

    def outputs(x):
        return with_jacobian(x)[1][0]

    differences = jnp.stack([(outputs(x + eps * e) - outputs(x - eps * e)) / (2 * eps) for e in jnp.eye(x.size)], 1)
    # ε = 1e-3: truncation O(ε²) ~ 1e-6 relative at most. Not smaller: iLQR's controls carry
    # ~1e-9 of noise from its stopping rule, which at ε = 1e-4 already moved a difference of the
    # controls by 4 % (the cost, stationary, is far less sensitive). Measured agreement at 1e-3:
    # ≤ 4e-8 relative.
    np.testing.assert_allclose(jacobian, differences, rtol=1e-5, atol=1e-5 * float(jnp.max(jnp.abs(differences))))
    return jacobian, solution


@pytest.mark.slow
def test_the_optimum_of_an_unconstrained_problem_is_differentiated_implicitly():
    x = jnp.array([9.81, 100.0, 10.0, 0.0])
    jacobian, _ = _check_against_differences({}, x)
    assert jnp.all(jacobian[:, :2] != 0) and jnp.all(jacobian[:, 3] != 0)


@pytest.mark.slow
def test_the_optimum_with_a_terminal_constraint_and_active_bounds_is_differentiated_implicitly():
    """Two multipliers (q_N's first two components pinned) and bounds that hold: the derivative in
    the bound is that of the controls on it, and of J* its multiplier."""
    x = jnp.array([9.81, 1.0, 8.0, 0.1])  # unbounded, max |u_k,i| falls from 11.6 to 1.2 over the steps
    jacobian, solution = _check_against_differences({"bounded": True, "constrained": True}, x)
    assert solution.result == s2.RESULTS.successful
    on_bound = jnp.abs(jnp.abs(solution.controls) - 8.0) < 1e-9
    assert 0 < int(jnp.sum(on_bound)) < solution.controls.size  # some active, some free
    assert jnp.all(jacobian[:, 2] != 0)


@pytest.mark.slow
def test_an_unconverged_optimum_has_nan_derivatives():
    problem = lambda g: _problem(g, 100.0)  # noqa: E731
    solver = s2.control.ILQR(max_steps=1)

    def cost(g):
        solution = s2.control.solve(problem(g), Q0, OMEGA0, solver=solver, throw=False)
        return solution.cost, solution.result._value

    # The result and the derivative from one compiled program.
    derivative, code = jax.jit(jax.grad(cost, has_aux=True))(9.81)
    assert code == s2.RESULTS.optimisation_not_converged._value
    assert jnp.isnan(derivative)
