"""`jax.vmap(simulate)` with the members along the last axis (`s2jax._member_program`), against JAX's
own batching of the same program (`plain_vmap`), and every transformation around it."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax._member_program import chunk_members, plain_vmap

dsp = s2.models.double_spherical_pendulum
PARAMS = dsp.paper_params()


def _states(members, n=2, seed=0, scale=1.0):
    q0, omega0 = jax.vmap(lambda key: s2.random_state(key, n))(jax.random.split(jax.random.PRNGKey(seed), members))
    return q0, scale * omega0


def _final(q0, omega0, params=PARAMS, num_steps=30, **options):
    return s2.simulate(dsp.lagrangian, q0, omega0, params, dt=0.01, num_steps=num_steps, save_every=10, **options)


def test_vmap_of_simulate_runs_members_last(built, compilations):
    """130 members (three chunks of 44, padded to 132) along the last axis: the run of `jax.vmap`
    to round-off, every field, with no primitive left to `jax.vmap`; new values do not recompile."""
    q0, omega0 = _states(130)
    assert chunk_members(2) == 64
    ours = jax.vmap(_final)(q0, omega0)
    assert len(built) == 1 and built[0].vmapped == frozenset()
    with plain_vmap():
        theirs = jax.vmap(_final)(q0, omega0)
    assert len(built) == 1  # within `plain_vmap` the program is vmapped
    for field in ("t", "q", "omega", "failed_step"):
        np.testing.assert_allclose(getattr(ours, field), getattr(theirs, field), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(ours.result._value, theirs.result._value)
    assert ours.q.shape == (130, 4, 2, 3)
    slower = 0.5 * omega0
    assert compilations(lambda: jax.vmap(_final)(q0, slower).q.block_until_ready()) == 0


def test_shared_and_batched_arguments():
    """One initial state for all, a length per member (`in_axes`), inside `jax.jit`."""
    q0, omega0 = _states(1)
    lengths = jnp.linspace(5.0, 12.0, 9)

    def run(l1):
        return _final(q0[0], omega0[0], dict(PARAMS, l1=l1)).q[-1]

    ours = jax.jit(jax.vmap(run))(lengths)
    with plain_vmap():
        theirs = jax.jit(jax.vmap(run))(lengths)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)
    assert float(jnp.min(jnp.abs(ours[1:] - ours[:-1]))) > 1e-3  # the members differ


def _depth_loss(q0, omega0):
    """The summed depth of the second bobs after 30 steps, as a function of l1, over a vmapped batch."""

    def loss(l1):
        p = dict(PARAMS, l1=l1)
        return jnp.sum(jax.vmap(lambda q, w: _final(q, w, p).q[-1, 1, 2])(q0, omega0))

    return loss


def test_gradient_after_the_vmap():
    """`jax.grad` of a vmapped batch (the `custom_jvp` around the members-last evaluation): the
    derivative of the vmapped program (custom derivatives of the Newton solves included) to
    round-off."""
    loss = _depth_loss(*_states(5, seed=1))
    l1 = PARAMS["l1"]
    with plain_vmap():
        reference = jax.grad(loss)(l1)
    np.testing.assert_allclose(jax.grad(loss)(l1), reference, rtol=1e-12)
    assert abs(float(reference)) > 1e-4


@pytest.mark.slow
def test_derivatives_in_every_order():
    """`jax.grad` through a `jax.jit` of the vmap, `jax.jacfwd`, and the derivative taken before the
    `jax.vmap` (no batched program): the vmapped program's derivative, which a central difference
    confirms."""
    q0, omega0 = _states(5, seed=1)
    loss = _depth_loss(q0, omega0)
    l1 = PARAMS["l1"]
    with plain_vmap():
        reference = jax.grad(loss)(l1)
    for gradient in (jax.grad(jax.jit(loss))(l1), jax.jacfwd(loss)(l1)):
        np.testing.assert_allclose(gradient, reference, rtol=1e-12)
    step = 1e-5
    central = (loss(l1 + step) - loss(l1 - step)) / (2 * step)
    # the central difference's rounding, ~|loss| 1e-16 / 1e-5 ≈ 1e-10, on a derivative of ~7e-4
    np.testing.assert_allclose(reference, central, rtol=1e-6)

    def member_gradient(q, w):
        return jax.grad(lambda l1: _final(q, w, dict(PARAMS, l1=l1)).q[-1, 1, 2])(l1)

    ours = jax.vmap(member_gradient)(q0, omega0)  # the derivative taken first: no batched program
    np.testing.assert_allclose(jnp.sum(ours), reference, rtol=1e-12)


def test_failed_members_are_named(built):
    """A member that fails (ω × 300) fails alone, with its code and step as under `jax.vmap`, and
    `throw=True` names its batch index."""
    q0, omega0 = _states(6, seed=2)
    omega0 = omega0.at[4].multiply(300.0)
    ours = jax.vmap(lambda q, w: _final(q, w, throw=False))(q0, omega0)
    with plain_vmap():
        theirs = jax.vmap(lambda q, w: _final(q, w, throw=False))(q0, omega0)
    assert len(built) == 1
    assert np.flatnonzero(np.asarray(ours.result._value)).tolist() == [4]
    np.testing.assert_array_equal(ours.result._value, theirs.result._value)
    np.testing.assert_array_equal(ours.failed_step, theirs.failed_step)
    good = np.arange(6) != 4
    np.testing.assert_allclose(ours.q[good], theirs.q[good], rtol=0, atol=1e-12)
    # raised in a host callback, which JAX re-raises as its runtime error with the message
    with pytest.raises((s2.SimulationError, jax.errors.JaxRuntimeError), match=r"batch index \(4,\)"):
        jax.vmap(_final)(q0, omega0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "integrator",
    [s2.ExplicitVariationalIntegrator(), s2.Rattle(), s2.RungeKutta4(), s2.GeneralVariationalIntegrator(),
     s2.AdaptiveRungeKutta45()],
    ids=["explicit VI", "Rattle", "RK4", "general VI", "RK45"],
)
def test_every_integrator_batches_members_last(built, integrator):
    """Each kind of integrator (a diagonal M for the explicit VI: a spherical pendulum per body) to
    round-off against `jax.vmap`."""
    if isinstance(integrator, s2.ExplicitVariationalIntegrator):
        def lagrangian(q, qdot, p):
            return 0.5 * jnp.sum(qdot**2) + p["g"] * jnp.sum(q[:, 2])

        params = {"g": 9.81}
    else:
        lagrangian, params = dsp.lagrangian, PARAMS
    q0, omega0 = _states(7, seed=3)

    def run(q, w):
        return s2.simulate(lagrangian, q, w, params, dt=0.01, num_steps=20, integrator=integrator).q

    ours = jax.vmap(run)(q0, omega0)
    with plain_vmap():
        theirs = jax.vmap(run)(q0, omega0)
    assert len(built) == 1
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-11)


@pytest.mark.slow
def test_a_dense_inertia_keeps_the_vmap(built):
    """A program that would batch LAPACK's Cholesky by `jax.vmap` (a dense M of 8 bodies) is vmapped
    as a whole (its evaluation with the members last noted the fallback, so it was not used): the
    values of `plain_vmap`."""
    rng = np.random.default_rng(0)
    root = rng.normal(size=(8, 8))
    params = {"M": jnp.asarray(root @ root.T + 8 * np.eye(8))}

    def lagrangian(q, qdot, p):
        return 0.5 * jnp.einsum("ij,ia,ja->", p["M"], qdot, qdot) - jnp.sum(q[:, 2])

    q0, omega0 = _states(3, n=8, seed=4)

    def run(q, w):
        return s2.simulate(lagrangian, q, w, params, dt=0.01, num_steps=5).q

    ours = jax.vmap(run)(q0, omega0)
    assert len(built) == 1 and "cholesky" in built[0].vmapped
    with plain_vmap():
        theirs = jax.vmap(run)(q0, omega0)
    # Not bit for bit: two compilations of the one vmapped program, which at the suite's XLA level 0
    # round differently by an ulp (measured 2.2e-16) since the VI's Newton steps after a stalled
    # chord solve by LAPACK's LU (`dense_block_solve`); with the unrolled elimination they agreed.
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-15)


class _Damper(eqx.Module):
    """A feedback u = −k ω₀ (a torque on body 0), its gain an array of the policy."""

    gain: jax.Array

    def __call__(self, t, q, omega, params):
        return -self.gain * omega[0]


@pytest.mark.slow
def test_controls_and_policies_batch_members_last(built):
    """A force reading the controls, open loop (a control sequence per member) and by a feedback
    policy (an equinox Module whose array all members share): both to round-off against
    `jax.vmap`, both with the members last."""
    q0, omega0 = _states(6, seed=5)
    torques = 0.5 * jax.random.normal(jax.random.PRNGKey(6), (6, 20, 3))
    options = dict(dt=0.01, num_steps=20, force=s2.forces.PivotTorque(0))

    def open_loop(q, w, u):
        return s2.simulate(dsp.lagrangian, q, w, PARAMS, controls=u, **options).q

    def feedback(q, w):
        return s2.simulate(dsp.lagrangian, q, w, PARAMS, controls=_Damper(jnp.asarray(2.0)), **options).q

    for fn, args in ((open_loop, (q0, omega0, torques)), (feedback, (q0, omega0))):
        ours = jax.vmap(fn)(*args)
        with plain_vmap():
            theirs = jax.vmap(fn)(*args)
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)
    assert len(built) == 2 and not any(b.vmapped for b in built)
    free = jax.vmap(lambda q, w: s2.simulate(dsp.lagrangian, q, w, PARAMS, dt=0.01, num_steps=20).q)(q0, omega0)
    assert float(jnp.max(jnp.abs(ours - free))) > 1e-6  # the feedback acts


@pytest.mark.slow  # 4 s (20 s in the suite): kept out of the fast tier (README, 'Tests')
def test_a_program_traced_in_one_mesh_context_is_not_reused_in_another():
    """`simulate` keeps the programs it traces for `member_program_p` (`_simulate._PROGRAMS`). A
    `jax.set_mesh` context is part of every traced value's type, so one traced in a context with
    an `Explicit` axis cannot run in one with an `Auto` axis (JAX: "context mesh … should match the
    aval mesh"): the context is part of the key. `jax.jit(simulate)` in each (one device): the
    same value, to the bit."""
    q0, omega0 = (jnp.asarray(x) for x in dsp.paper_state())

    def height(l1):
        return _final(q0, omega0, dict(PARAMS, l1=l1), num_steps=20).q[-1, 1, 2]

    runs = []
    for axis_type in (jax.sharding.AxisType.Explicit, jax.sharding.AxisType.Auto):
        with jax.set_mesh(jax.make_mesh((1,), ("x",), axis_types=(axis_type,))):
            runs.append(jax.jit(height)(PARAMS["l1"]))
    np.testing.assert_array_equal(runs[0], runs[1])
    assert -1.0 <= float(runs[0]) <= 1.0 and float(runs[0]) != 0.0
