"""The system layer: Legendre map and its inverse, prepared inertia, generalized forces."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2

MODELS = {
    "double_pendulum": s2.models.double_spherical_pendulum,
    "elastic_rod": s2.models.elastic_rod,
}


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.slow
def test_inverse_legendre_map_undoes_the_legendre_map(name):
    model = MODELS[name]
    system = s2.LagrangianSystem(model.lagrangian)
    q0, _ = model.paper_state()
    args = system.prepare(jnp.asarray(q0), model.paper_params())
    n = q0.shape[0]
    for seed in range(3):
        q, omega = s2.random_state(jax.random.PRNGKey(seed), n, scale=2.0)
        p = system.momentum(q, omega, args)
        # p_i ∈ T_{q_i} S² (2.12), to the round-off of q_i·p_i: a few ulps of |p_i| (~10³ here; jaxlib
        # 0.12's XLA, which contracts multiply-adds differently, gave 1.1e-13 where 0.10.2 stays below 1e-13)
        scale = float(jnp.max(jnp.linalg.norm(p, axis=-1)))
        assert float(jnp.max(s2.tangency_error(q, p))) < 8 * np.finfo(np.float64).eps * scale
        np.testing.assert_allclose(system.angular_velocity(q, p, args), omega, rtol=0, atol=1e-12)


def test_prepared_inertia_is_the_autodiff_inertia_and_matches_the_model():
    model = s2.models.double_spherical_pendulum
    system = s2.LagrangianSystem(model.lagrangian)
    q0, _ = model.paper_state()
    params = model.paper_params()
    args = system.prepare(jnp.asarray(q0), params)
    q, _ = s2.random_state(jax.random.PRNGKey(3), 2)
    np.testing.assert_array_equal(system.inertia(q, args), args.inertia.matrix)
    np.testing.assert_allclose(args.inertia.matrix, model.inertia_matrix(params), rtol=1e-14)
    np.testing.assert_allclose(system.inertia(q, s2.SystemArgs(params)), args.inertia.matrix, rtol=1e-14)


def test_generalized_force_adds_the_force_to_minus_grad_v():
    model = s2.models.double_spherical_pendulum
    q, omega = s2.random_state(jax.random.PRNGKey(4), 2)
    params = model.paper_params()
    unforced = s2.LagrangianSystem(model.lagrangian)
    args = unforced.prepare(q, params)
    conservative = unforced.generalized_force(0.0, q, omega, args)
    np.testing.assert_array_equal(conservative, -unforced.potential_gradient(q, args))

    def push(t, q, omega, u, params):
        return jnp.full_like(q, t)

    forced = s2.LagrangianSystem(model.lagrangian, s2.Force(push, depends_on_velocity=False))
    np.testing.assert_array_equal(forced.generalized_force(2.0, q, omega, args), conservative + 2.0)
    assert not forced.force_depends_on_velocity and not unforced.force_depends_on_velocity
