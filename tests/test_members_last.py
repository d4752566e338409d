"""A batch with the members along the last axis (`s2jax._members_last`, `simulate_batch`'s CPU path),
against JAX's own batching (`jax.vmap`) of the same per-member function."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import s2jax as s2
from s2jax._members_last import SMALL_PRODUCT, members_last

dsp = s2.models.double_spherical_pendulum


def _every_rule(x, y, k):
    """One member's function through every rule of `_members_last` (x: (2, 3), y: (3,), k: ())."""
    a = jnp.sin(x) * y[None, :] * x[:, :1] + k  # elementwise, size-1 axes broadcast in the jaxpr itself
    b = jnp.sum(a, axis=1) + jnp.max(a, axis=0)[:2] + jnp.cumsum(y)[1:]  # reductions, slices
    c = jnp.concatenate([a, jnp.pad(a[:1], ((0, 0), (1, 0)))[:, :3]], axis=0)  # concatenate, pad
    d = jnp.transpose(c).reshape(1, 9) @ jnp.ones((9, 2)) + x[:, :2] @ x[:, :2].T  # small dots, one and both batched
    big = jnp.outer(jnp.tile(y, 30), jnp.tile(y, 30))  # a dot too large for products and sums
    e = jnp.stack([d, d.T], axis=-1).sum() + (big @ jnp.tile(y, 30)).sum() / 1e3
    parts = jnp.split(jnp.tile(y, 2), 2)
    f = lax.dynamic_update_slice(lax.dynamic_slice(c, (1, 0), (2, 3)), parts[1][None], (0, 0))
    # a loop whose trip count differs between members
    count = lax.while_loop(lambda s: s[0] < 3.0 + k, lambda s: (s[0] + 1.0, s[1] * 1.1), (0.0, f))[1]
    scanned = lax.scan(lambda carry, row: (carry + row, carry * row), jnp.zeros(3), count)[1]
    g = lax.cond(k > 0.5, lambda v: jnp.cos(v), lambda v: v**2, scanned)  # a batched predicate
    h = lax.switch(1, [jnp.sin, jnp.cos], g)  # an unbatched index
    soft = jax.custom_jvp(lambda v: jnp.tanh(v))
    soft.defjvp(lambda primals, tangents: (soft(primals[0]), tangents[0]))
    i = jax.checkpoint(lambda v: soft(v) * 2.0)(h)
    j = jnp.take(y, jnp.array([2, 0]))  # a gather: batched by jax.vmap itself
    return e + jnp.sum(i) + jnp.sum(j) + jnp.sum(b), i, jnp.argmax(y)


def test_every_rule_matches_vmap():
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    members = 5
    x, y = (jax.random.normal(key, (*shape, members)) for key, shape in zip(keys, ((2, 3), (3,))))
    k = jax.random.uniform(keys[2], (members,))
    assert 30 * 30 * 3 * 30 > SMALL_PRODUCT  # `big` takes XLA's dot
    batched = members_last(_every_rule, x[..., 0], y[..., 0], k[0])
    ours = batched(x, y, k)
    assert batched.vmapped == {"gather"}  # the one primitive on batched values without a rule
    theirs = jax.vmap(_every_rule, in_axes=-1, out_axes=-1)(x, y, k)
    for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)
    assert len({int(n) for n in np.asarray(k > 0.5)}) == 2  # both branches of the cond taken


def test_collectives_reduce_over_the_members():
    def fn(x):
        return lax.pmin(x, "m") + lax.psum(jnp.ones(()), "m") + lax.pmax(2.0 * x, "m")

    x = jnp.arange(12.0).reshape(3, 4)
    ours = members_last(fn, x[:, 0], axis_name="m", members=4)(x)
    np.testing.assert_array_equal(ours, jax.vmap(fn, in_axes=-1, out_axes=-1, axis_name="m")(x))


def _models():
    chain = s2.models.chain_pendulum
    rng = np.random.default_rng(0)
    root = rng.normal(size=(8, 8))
    inertia = root @ root.T + 8 * np.eye(8)  # a dense SPD M of 8 bodies (LAPACK's Cholesky: by vmap)

    def dense(q, qdot, params):
        return 0.5 * jnp.einsum("ij,ia,ja->", params["M"], qdot, qdot) - jnp.sum(q[:, 2])

    return {
        "double pendulum": (dsp.lagrangian, dsp.paper_params(), 2),
        "16-link chain": (chain.lagrangian, chain.paper_params(16), 16),
        "dense M, 8 bodies": (dense, {"M": jnp.asarray(inertia)}, 8),
    }


@pytest.mark.slow
@pytest.mark.parametrize("model", ["double pendulum", "16-link chain", "dense M, 8 bodies"])
@pytest.mark.parametrize("integrator", [None, s2.Rattle(), s2.RungeKutta4()], ids=["VI", "Rattle", "RK4"])
def test_simulate_batch_members_last_equals_vmap(model, integrator):
    """The same run along either axis, to round-off, with one member failing (ω × 300 at step 0
    for all but RK4, which does not fail, so for it member 5 is only fast): codes and failed
    steps equal."""
    lagrangian, params, n = _models()[model]
    q0, omega0 = jax.vmap(lambda key: s2.random_state(key, n))(jax.random.split(jax.random.PRNGKey(1), 7))
    omega0 = omega0.at[5].multiply(300.0)
    options = dict(dt=0.01, num_steps=20, save_every=5, integrator=integrator, throw=False, chunk_size=3)
    last, first = (s2.simulate_batch(lagrangian, q0, omega0, params, members_last=m, **options) for m in (True, False))
    np.testing.assert_array_equal(last.result._value, first.result._value)
    np.testing.assert_array_equal(last.failed_step, first.failed_step)
    if integrator is None or isinstance(integrator, s2.Rattle):
        assert np.flatnonzero(np.asarray(last.result._value)).tolist() == [5]
    # Relative too: RK4's member 5 leaves the sphere and grows without bound (|q| up to 10⁴⁴ in
    # 20 steps), which amplifies round-off in proportion. Its relative gap stays below 1e-13 on
    # jaxlib 0.10.2; up to 3e-12 was seen on 0.12, whose XLA contracts multiply-adds differently
    # in the two layouts. So that member is held to 1e-10 under RK4, every other to 1e-13.
    runaway = 1e-10 if isinstance(integrator, s2.RungeKutta4) else 1e-13
    for field in ("t", "q", "omega"):
        a, b = np.asarray(getattr(last, field)), np.asarray(getattr(first, field))
        np.testing.assert_allclose(np.delete(a, 5, axis=0), np.delete(b, 5, axis=0), rtol=1e-13, atol=1e-11)
        np.testing.assert_allclose(a[5], b[5], rtol=runaway, atol=1e-11)


@pytest.mark.slow
def test_members_last_under_transformations(compilations):
    """Inside `jax.jit` and under `jax.grad` too (`simulate`'s batching rule keeps the vmapped
    batch's derivatives): the eager values to round-off, a gradient as a central difference gives
    it, and new values do not recompile."""
    q0, omega0 = jax.vmap(lambda key: s2.random_state(key, 2))(jax.random.split(jax.random.PRNGKey(2), 4))
    params = dsp.paper_params()

    def run(omega0, members_last=None):
        return s2.simulate_batch(dsp.lagrangian, q0, omega0, params, dt=0.01, num_steps=5, members_last=members_last)

    with pytest.raises(ValueError, match="members_last must be True, False or None"):
        run(omega0, members_last="yes")
    for layout in (None, True):
        inside = jax.jit(lambda w, m=layout: run(w, members_last=m).q)(omega0)
        np.testing.assert_allclose(inside, run(omega0).q, rtol=0, atol=1e-13)

    def height(scale, members_last=None):
        return jnp.sum(run(scale * omega0, members_last).q[:, -1, :, 2])

    gradient = jax.grad(height)(1.0)
    np.testing.assert_allclose(gradient, jax.grad(height)(1.0, members_last=False), rtol=1e-13)
    step = 1e-6
    central = (height(1.0 + step) - height(1.0 - step)) / (2 * step)
    np.testing.assert_allclose(gradient, central, rtol=1e-6)
    run(omega0).q.block_until_ready()
    slower = 0.5 * omega0
    assert compilations(lambda: run(slower).q.block_until_ready()) == 0


@pytest.mark.slow
def test_a_dense_inertia_keeps_the_vmap(built):
    """By default a member whose program batches a primitive by `jax.vmap` on batched values (LAPACK's
    Cholesky of a dense M, every step) runs vmapped: the same bits as `members_last=False`."""
    lagrangian, params, n = _models()["dense M, 8 bodies"]
    q0, omega0 = jax.vmap(lambda key: s2.random_state(key, n))(jax.random.split(jax.random.PRNGKey(3), 3))
    options = dict(dt=0.01, num_steps=5)
    default = s2.simulate_batch(lagrangian, q0, omega0, params, **options)
    assert len(built) == 1 and "cholesky" in built[0].vmapped
    vmapped = s2.simulate_batch(lagrangian, q0, omega0, params, members_last=False, **options)
    np.testing.assert_array_equal(default.q, vmapped.q)
