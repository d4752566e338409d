"""General Lagrangians on (S²)ⁿ: `simulate` on systems, the general variational integrator,
its dispatch, and the models with gyroscopic terms or configuration-dependent inertia."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import s2jax as s2

dsp = s2.models.double_spherical_pendulum
rotating = s2.models.rotating_spherical_pendulum
monopole = s2.models.monopole_particle
ellipsoid = s2.models.ellipsoid_pendulum
GENERAL_MODELS = {"rotating": rotating, "monopole": monopole, "ellipsoid": ellipsoid}
Q0, OMEGA0 = dsp.paper_state()


def test_simulate_takes_a_system_bitwise_as_its_lagrangian():
    params = dsp.paper_params()
    options = dict(dt=0.01, num_steps=20)
    by_function = s2.simulate(dsp.lagrangian, Q0, OMEGA0, params, **options)
    by_system = s2.simulate(s2.LagrangianSystem(dsp.lagrangian), Q0, OMEGA0, params, **options)
    np.testing.assert_array_equal(by_system.q, by_function.q)
    np.testing.assert_array_equal(by_system.omega, by_function.omega)
    force = s2.Force(lambda t, q, w, u, p: 0.1 * q[:, ::-1], depends_on_velocity=False)
    forced = s2.simulate(dsp.lagrangian, Q0, OMEGA0, params, force=force, **options)
    forced_system = s2.simulate(s2.LagrangianSystem(dsp.lagrangian, force), Q0, OMEGA0, params, **options)
    np.testing.assert_array_equal(forced_system.q, forced.q)
    assert not np.array_equal(forced.q, by_function.q)


def test_a_system_with_a_second_force_is_an_error():
    force = s2.Force(lambda t, q, w, u, p: jnp.zeros_like(q), depends_on_velocity=False)
    with pytest.raises(ValueError, match="a system carries its own force"):
        s2.simulate(s2.LagrangianSystem(dsp.lagrangian), Q0, OMEGA0, dsp.paper_params(), dt=0.01, num_steps=2,
                    force=force)


def test_a_system_of_the_wrong_form_is_still_checked():
    def anisotropic(q, qdot, p):
        return 0.5 * jnp.sum(jnp.array([[1.0, 2.0, 3.0]]) * qdot**2) + p["g"] * jnp.sum(q[:, 2])

    with pytest.raises(ValueError, match="not M ⊗ I₃"):
        s2.simulate(s2.LagrangianSystem(anisotropic), Q0, OMEGA0, {"g": 9.81}, dt=0.01, num_steps=2)


# ---------------------------------------------------------------------------------------------
# An independent reference: Euler–Lagrange equations in spherical coordinates, scipy DOP853.
# The chart (θ, φ) ↦ (cos θ, sin θ cos φ, sin θ sin φ) has its poles at ±e₁, away from the
# motions tested (each test asserts sin θ > 0.2 along the reference).


def _chart(x):
    theta, phi = x[0::2], x[1::2]
    return jnp.stack([jnp.cos(theta), jnp.sin(theta) * jnp.cos(phi), jnp.sin(theta) * jnp.sin(phi)], axis=-1)


def _reference(lagrangian, params, q0, omega0, times):
    """(q at `times`, min sin θ) by solve_ivp(DOP853, rtol = atol = 1e-12) in the chart."""
    params = {k: jnp.asarray(v) for k, v in params.items()}

    def coordinate_lagrangian(x, xdot):
        q, qdot = jax.jvp(_chart, (x,), (xdot,))
        return lagrangian(q, qdot, params)

    @jax.jit
    def rhs(z):
        x, xdot = jnp.split(z, 2)
        mass = jax.hessian(coordinate_lagrangian, argnums=1)(x, xdot)
        mixed = jax.jacfwd(jax.grad(coordinate_lagrangian, argnums=1), argnums=0)(x, xdot)
        force = jax.grad(coordinate_lagrangian, argnums=0)(x, xdot) - mixed @ xdot
        return jnp.concatenate([xdot, jnp.linalg.solve(mass, force)])

    q0 = np.asarray(q0)
    x0 = np.stack([np.arccos(q0[:, 0]), np.arctan2(q0[:, 2], q0[:, 1])], axis=-1).reshape(-1)
    basis = np.asarray(jax.jacfwd(_chart)(jnp.asarray(x0))).reshape(-1, x0.size)
    qdot0 = np.cross(np.asarray(omega0), q0).reshape(-1)
    xdot0 = np.linalg.lstsq(basis, qdot0, rcond=None)[0]
    np.testing.assert_allclose(basis @ xdot0, qdot0, atol=1e-13)
    solution = solve_ivp(
        lambda t, z: np.asarray(rhs(jnp.asarray(z))), (times[0], times[-1]), np.concatenate([x0, xdot0]),
        method="DOP853", rtol=1e-12, atol=1e-12, t_eval=times, dense_output=True,
    )
    assert solution.success
    dense = solution.sol(np.linspace(times[0], times[-1], 400))
    min_sin = float(np.min(np.abs(np.sin(dense[: x0.size : 2]))))
    return np.asarray(jax.vmap(_chart)(jnp.asarray(solution.y[: x0.size].T))), min_sin


@pytest.mark.parametrize("name", list(GENERAL_MODELS))
@pytest.mark.slow
def test_general_vi_is_second_order_against_a_coordinate_reference(name):
    module = GENERAL_MODELS[name]
    q0, omega0 = module.paper_state()
    params = module.paper_params()
    horizon = 1.0
    reference, min_sin = _reference(module.lagrangian, params, q0, omega0, np.array([0.0, horizon]))
    assert min_sin > 0.2
    steps = [25, 50, 100, 200]
    errors = []
    for num_steps in steps:
        sol = s2.simulate(module.lagrangian, q0, omega0, params, dt=horizon / num_steps, num_steps=num_steps,
                          save_every=num_steps)
        assert sol.integrator == "GeneralVariationalIntegrator"
        np.testing.assert_allclose(np.linalg.norm(sol.q, axis=-1), 1.0, rtol=0, atol=1e-14)
        errors.append(np.max(np.abs(sol.q[-1] - reference[-1])))
    slope = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert -2.15 < slope < -1.85, (errors, slope)
    assert errors[-1] < 1e-3
