"""s2jax compiles its entry points with `s2.compiler_options()` only at the top level."""

import jax
import jax.numpy as jnp
import numpy as np

import s2jax as s2
from s2jax.models import double_spherical_pendulum as model


def _final_q(params):
    q0, omega0 = model.paper_state()
    return s2.simulate(model.lagrangian, q0, omega0, params, dt=0.01, num_steps=50).q[-1]


def test_compiler_options_are_accepted_by_jax_jit():
    options = s2.compiler_options()
    assert isinstance(options, dict)
    # The options must compile (an unknown option raises); `simulate` relies on it.
    out = jax.jit(lambda x: 2.0 * x, compiler_options=options or None)(jnp.arange(3.0))
    np.testing.assert_array_equal(out, [0.0, 2.0, 4.0])


def test_simulate_runs_the_same_eagerly_and_inside_transformations():
    params = {k: jnp.asarray(v) for k, v in model.paper_params().items()}
    eager = _final_q(params)
    # Inside a user's jit, scan or checkpoint JAX refuses compiler options on the inner
    # compilation: simulate must compile without them there, not raise.
    jitted = jax.jit(_final_q)(params)
    scanned = jax.lax.scan(lambda c, _: (c, _final_q(params)), 0.0, length=1)[1][0]
    checkpointed = jax.checkpoint(_final_q)(params)
    # Different fusions round differently; 50 steps keep that at the level of round-off.
    for other in (jitted, scanned, checkpointed):
        np.testing.assert_allclose(other, eager, rtol=0, atol=1e-13)


def test_gradients_eager_and_jitted_agree():
    params = {k: jnp.asarray(v) for k, v in model.paper_params().items()}

    def loss(p):
        return _final_q(p)[1, 0]

    eager = jax.grad(loss)(params)
    jitted = jax.jit(jax.grad(loss))(params)
    for key in params:
        np.testing.assert_allclose(jitted[key], eager[key], rtol=1e-10, atol=1e-14)
