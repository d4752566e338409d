"""The pieces of the optimisation layer that `fit` and trajectory optimisation share: the chart,
multiple shooting, the optax loop."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import s2jax as s2
from s2jax._optimisation.chart import chart_to_state, tangent_basis
from s2jax._optimisation.optax_loop import optax_minimise
from s2jax._optimisation.shooting import MultipleShooting
from s2jax._plan import plan

dsp = s2.models.double_spherical_pendulum


@pytest.mark.slow
def test_chart_maps_onto_the_tangent_bundle_with_full_rank():
    q, omega = s2.random_state(jax.random.PRNGKey(0), 4)
    basis = jnp.asarray(tangent_basis(q))
    np.testing.assert_allclose(jnp.einsum("nkc,nlc->nkl", basis, basis), jnp.broadcast_to(jnp.eye(2), (4, 2, 2)),
                               atol=1e-15)
    assert float(jnp.max(jnp.abs(jnp.einsum("nkc,nc->nk", basis, q)))) < 1e-15
    a, b = 3.0 * jax.random.normal(jax.random.PRNGKey(1), (2, 4, 2))  # far from the base point
    q1, omega1 = chart_to_state(q, omega, basis, a, b)
    assert float(jnp.max(s2.unit_length_error(q1))) < 1e-15
    assert float(jnp.max(s2.tangency_error(q1, omega1))) < 1e-14
    q0, omega0 = chart_to_state(q, omega, basis, jnp.zeros_like(a), jnp.zeros_like(b))
    assert np.array_equal(q0, q) and np.array_equal(omega0, omega)
    jacobian = jax.jacfwd(lambda x: jnp.concatenate([y.ravel() for y in chart_to_state(q, omega, basis, *x)]))(
        (jnp.zeros_like(a), jnp.zeros_like(b))
    )
    flat = jnp.concatenate([j.reshape(24, -1) for j in jacobian], axis=1)
    assert int(jnp.linalg.matrix_rank(flat)) == 4 * 4  # 4 coordinates per body, none redundant


@pytest.mark.slow
def test_segments_started_on_one_trajectory_have_no_jumps():
    q0, omega0 = dsp.paper_state()
    params = dsp.paper_params()
    whole = s2.simulate(dsp.lagrangian, q0, omega0, params, dt=0.01, num_steps=60, save_every=20)
    base_q, base_omega = whole.q[1:-1], whole.omega[1:-1]
    the_plan = plan(dsp.lagrangian, jnp.asarray(q0), jnp.asarray(omega0), params, integrator=s2.VariationalIntegrator())
    shooting = MultipleShooting(
        the_plan, jnp.asarray(0.01), 20, jnp.asarray(q0), jnp.asarray(omega0),
        base_q, base_omega, jnp.asarray(tangent_basis(base_q)), False,
    )
    zeros = jnp.zeros((2, 2, 2))
    q, omega, jumps, failed = shooting.run(jax.tree_util.tree_map(jnp.asarray, params), (zeros, zeros))
    assert q.shape == (3, 21, 2, 3) and not bool(failed)
    # Restarting from a saved state repeats the same steps up to the warm start of Newton.
    assert float(jnp.max(jnp.abs(jumps))) < 1e-12
    np.testing.assert_allclose(q[-1, -1], whole.q[-1], atol=1e-12)


def test_optax_loop_stops_on_its_tolerance():
    target = jnp.array([1.0, -2.0, 0.5])

    def loss(z):
        return jnp.sum((z - target) ** 2) + 1.0

    def minimise(z, optimizer, steps):
        return optax_minimise(loss, z, optimizer, steps, 1e-12, 0.0)

    run = jax.jit(minimise, static_argnums=(1, 2))
    z, values, steps, converged = run(jnp.zeros(3), optax.lbfgs(), 50)
    assert bool(converged) and int(steps) < 50
    np.testing.assert_allclose(z, target, atol=1e-6)
    assert np.all(np.isnan(np.asarray(values)[int(steps):]))
    _, values, steps, converged = run(jnp.zeros(3), optax.adam(1e-3), 5)
    assert not bool(converged) and int(steps) == 5 and np.all(np.isfinite(values))
