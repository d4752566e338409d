"""Generalized forces through the seam: a damped spherical pendulum against an independent solve."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import s2jax as s2
from s2jax.models import spherical_pendulum as pendulum

PARAMS = pendulum.paper_params()  # m = 1, r = 9.8, g = 9.8
DAMPING = 5.0  # c in (m r²)/s: the energy halves in about m r²/(2c) ≈ 10 s


def _reference(q0, omega0, t1, c):
    """m r² ω̇ = m g r q × e₃ − c ω, q̇ = ω × q (for ω ⊥ q, q × (ω × q) = ω), typed in numpy."""
    m, r, g = PARAMS["m"], PARAMS["r"], PARAMS["g"]
    e3 = np.array([0.0, 0.0, 1.0])

    def field(t, y):
        q, omega = y[:3], y[3:]
        return np.concatenate([np.cross(omega, q), (m * g * r * np.cross(q, e3) - c * omega) / (m * r**2)])

    y0 = np.concatenate([np.ravel(q0), np.ravel(omega0)])
    solution = solve_ivp(field, (0.0, t1), y0, method="DOP853", rtol=1e-12, atol=1e-12)
    return solution.y[:3, -1], solution.y[3:, -1]


@pytest.mark.parametrize("integrator", [s2.VariationalIntegrator(), s2.ExplicitVariationalIntegrator()])
@pytest.mark.slow
def test_damped_pendulum_is_second_order(integrator):
    """Error at T = 2 s against DOP853 has log–log slope 2 ± 0.2 over four steps."""
    q0, omega0 = pendulum.paper_state()
    q_ref, omega_ref = _reference(q0, omega0, 2.0, DAMPING)
    steps = np.array([0.04, 0.02, 0.01, 0.005])
    errors = []
    for dt in steps:
        sol = s2.simulate(
            pendulum.lagrangian, q0, omega0, PARAMS, dt=float(dt), num_steps=round(2.0 / dt),
            integrator=integrator, force=s2.forces.LinearDamping(DAMPING),
        )
        errors.append(max(np.max(np.abs(sol.q[-1, 0] - q_ref)), np.max(np.abs(sol.omega[-1, 0] - omega_ref))))
    slope = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert abs(slope - 2.0) < 0.2, (slope, errors)


def test_damping_dissipates_energy_and_keeps_the_geometry():
    """dE/dt = −c |q̇|² ≤ 0: the energy falls at every saved step; |q| = 1 and q·ω = 0 hold."""
    q0, omega0 = pendulum.paper_state()
    sol = s2.simulate(
        pendulum.lagrangian, q0, omega0, PARAMS, dt=0.01, num_steps=2000, save_every=10,
        force=s2.forces.LinearDamping(DAMPING),
    )
    energy = np.asarray(s2.energy(pendulum.lagrangian, sol.q, sol.omega, PARAMS))
    assert np.all(np.diff(energy) < 0)
    assert float(jnp.max(s2.unit_length_error(sol.q))) < 1e-14
    assert float(jnp.max(s2.tangency_error(sol.q, sol.omega))) < 1e-12


def test_zero_damping_is_bitwise_the_unforced_run():
    """Bitwise in the programs users run: compiled at XLA's default optimisation level (3), which
    conftest lowers for the rest of the suite. Without LLVM's passes the two programs round one
    product differently from step 117 on (1 ulp)."""
    q0, omega0 = pendulum.paper_state()
    # The explicit VI, as eagerly: inside a jit the params are traced and the choice is the implicit one.
    options = dict(dt=0.05, num_steps=200, integrator=s2.ExplicitVariationalIntegrator())

    def runs():
        free = s2.simulate(pendulum.lagrangian, q0, omega0, PARAMS, **options)
        damped = s2.simulate(pendulum.lagrangian, q0, omega0, PARAMS, force=s2.forces.LinearDamping(0.0), **options)
        return free, damped

    free, damped = jax.jit(runs).lower().compile({"xla_backend_optimization_level": 3, **s2.compiler_options()})()
    assert np.array_equal(free.q, damped.q) and np.array_equal(free.omega, damped.omega)


@pytest.mark.slow
def test_gradient_in_the_damping_coefficient_matches_finite_differences():
    q0, omega0 = pendulum.paper_state()

    def final_height(c):
        sol = s2.simulate(
            pendulum.lagrangian, q0, omega0, PARAMS, dt=0.02, num_steps=100, force=s2.forces.LinearDamping(c)
        )
        return sol.q[-1, 0, 2]

    c = jnp.asarray(DAMPING)
    gradient = jax.grad(final_height)(c)
    eps = 1e-3
    central = (final_height(c + eps) - final_height(c - eps)) / (2 * eps)
    # Central differences: O(eps²) truncation plus (Newton's 1e-12 tolerance)/eps noise, both
    # ~1e-9 relative at eps = 1e-3; the gradient is exact (implicit function theorem).
    np.testing.assert_allclose(gradient, central, rtol=1e-7)


def test_velocity_dependent_force_is_refused_where_it_cannot_act():
    q0, omega0 = pendulum.paper_state()
    damping = s2.forces.LinearDamping(DAMPING)
    with pytest.raises(ValueError, match="Rattle cannot take a force that depends on ω"):
        s2.simulate(pendulum.lagrangian, q0, omega0, PARAMS, dt=0.01, num_steps=10, integrator=s2.Rattle(),
                    force=damping)
    with pytest.raises(ValueError, match="ReversibleAdjoint cannot take a force that depends on ω"):
        s2.simulate(pendulum.lagrangian, q0, omega0, PARAMS, dt=0.01, num_steps=10, adjoint=s2.ReversibleAdjoint(),
                    force=damping)


@pytest.mark.parametrize(
    "force, n, match",
    [
        (s2.forces.PivotTorque(5, torque=jnp.array([1.0, 0.0, 0.0])), 1, r"PivotTorque\(body=5\).*n = 1 bod"),
        (
            s2.forces.PointForce(4, jnp.ones(2), force=jnp.array([1.0, 0.0, 0.0])),
            2,
            r"PointForce\(body=4\).*n = 2 bod",
        ),
    ],
)
def test_a_ready_force_on_a_body_that_does_not_exist_is_refused(force, n, match):
    """Before compiling, naming the force, the body and n (an out-of-range body was dropped, or
    PointForce acted at the tip)."""
    params = s2.models.chain_pendulum.paper_params(n)
    q0, omega0 = s2.models.chain_pendulum.paper_state(n)
    with pytest.raises(ValueError, match=match):
        s2.simulate(s2.models.chain_pendulum.lagrangian, q0, omega0, params, dt=0.01, num_steps=2, force=force)
    # also where no eager force check runs before the trace (the control solvers)
    problem = s2.control.Problem(
        s2.models.chain_pendulum.lagrangian, params, force, 0.01, 2, running_cost=lambda t, q, w, u: jnp.sum(q**2)
    )
    with pytest.raises(ValueError, match=match):
        s2.control.solve(problem, q0, omega0, solver=s2.control.SingleShooting())


def test_point_force_lengths_must_have_one_per_body():
    q0, omega0 = s2.models.chain_pendulum.paper_state(2)
    force = s2.forces.PointForce(1, jnp.ones(3), force=jnp.array([1.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match=r"PointForce: `lengths` has shape \(3,\); the system has n = 2"):
        s2.simulate(
            s2.models.chain_pendulum.lagrangian,
            q0,
            omega0,
            s2.models.chain_pendulum.paper_params(2),
            dt=0.01,
            num_steps=2,
            force=force,
        )


@pytest.mark.parametrize("make", [lambda: s2.forces.PivotTorque(-1), lambda: s2.forces.PointForce(-1, jnp.ones(2))])
def test_a_negative_body_index_is_refused(make):
    with pytest.raises(ValueError, match=r"body must be an int ≥ 0; got -1"):
        make()


def test_negative_damping_is_refused():
    with pytest.raises(ValueError, match=r"LinearDamping: the coefficient c must be finite and ≥ 0.*-0.5"):
        s2.forces.LinearDamping(-0.5)
    with pytest.raises(ValueError, match=r"LinearDamping: the coefficient c must be finite and ≥ 0.*body 1"):
        s2.forces.LinearDamping(jnp.array([1.0, -2.0]))
    s2.forces.LinearDamping(0.0)  # zero is no damping, allowed
