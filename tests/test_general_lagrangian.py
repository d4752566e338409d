"""General Lagrangians on (S²)ⁿ: `simulate` on systems, the general variational integrator,
its dispatch, and the models with gyroscopic terms or configuration-dependent inertia."""

import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2

dsp = s2.models.double_spherical_pendulum
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
