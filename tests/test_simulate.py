"""`simulate` under jax transformations, its compilation cache, and its input checks."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax import _simulate

dsp = s2.models.double_spherical_pendulum


def _run(params, q0=None, omega0=None, **kwargs):
    if q0 is None:
        q0, omega0 = dsp.paper_state()
    options = dict(dt=0.01, num_steps=100)
    options.update(kwargs)
    return s2.simulate(dsp.lagrangian, q0, omega0, params, **options)


@pytest.mark.slow
def test_jit_matches_eager():
    params = dsp.paper_params()
    eager = _run(params)
    jitted = jax.jit(lambda p: _run(p).q)(params)
    # Not bitwise: inside an outer jit XLA fuses the step differently, and the round-off
    # difference (1e-16) grows on the chaotic pendulum to ~1e-13 over these 100 steps.
    np.testing.assert_allclose(jitted, eager.q, rtol=0, atol=1e-11)


@pytest.mark.slow
def test_vmap_over_initial_states_and_params():
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    q0, omega0 = jax.vmap(lambda k: s2.random_state(k, 2))(keys)
    params = dsp.paper_params()
    batched = jax.vmap(lambda q, w: _run(params, q, w).q[-1])(q0, omega0)
    for b in range(4):
        np.testing.assert_allclose(batched[b], _run(params, q0[b], omega0[b]).q[-1], rtol=0, atol=1e-12)
    lengths = jnp.array([9.0, 9.81, 10.5])
    batched = jax.vmap(lambda l1: _run({**params, "l1": l1}).q[-1])(lengths)
    for b, l1 in enumerate(lengths):
        np.testing.assert_allclose(batched[b], _run({**params, "l1": l1}).q[-1], rtol=0, atol=1e-12)


@pytest.mark.slow
def test_grad_runs_and_matches_finite_differences():
    """A first check of gradients through the whole simulation (the IFT through Newton)."""
    params = dsp.paper_params()

    def loss(g):
        sol = _run({**params, "g": g}, num_steps=50)
        return jnp.sum(sol.q[-1, 1] * jnp.array([1.0, 2.0, 3.0]))

    grad = jax.grad(loss)(9.81)
    eps = 1e-5
    fd = (loss(9.81 + eps) - loss(9.81 - eps)) / (2 * eps)
    assert np.isfinite(grad)
    np.testing.assert_allclose(grad, fd, rtol=1e-6)


def test_new_values_do_not_recompile():
    params = dsp.paper_params()
    _run(params)
    before = _simulate.program_count()
    _run({**params, "m2": 1.3}, dt=0.02)
    q0, omega0 = s2.random_state(jax.random.PRNGKey(5), 2)
    _run(params, q0, omega0)
    assert _simulate.program_count() == before


@pytest.mark.parametrize(
    "q0, omega0, match",
    [
        ([[1.0, 0, 0], [0, 0, 1.001]], [[0, 1.0, 0], [0, 1.0, 0]], r"q0 of body 1 is not a unit vector"),
        ([[1.0, 0, 0], [0, 0, 1.0]], [[0.1, 1.0, 0], [0, 1.0, 0]], r"omega0 of body 0 is not tangent.*project_tangent"),
        ([[1.0, 0, 0], [0, 0, 1.0]], [[0, 1.0, 0], [0, np.nan, 0]], r"omega0 of body 1 is not finite"),
        ([[1.0, 0, 0]], [[0, 1.0, 0]], r"has 2 bodies: q must have shape \(2, 3\)"),
        ([[1.0, 0, 0, 0], [0, 0, 1.0, 0]], [[0, 1.0, 0, 0], [0, 1.0, 0, 0]], r"q0 must have shape \(n, 3\)"),
        ([[1.0, 0, 0], [0, 0, 1.0]], [[0, 1.0, 0]], r"omega0 must have the shape of q0"),
    ],
)
def test_bad_initial_states_raise_naming_the_body(q0, omega0, match):
    with pytest.raises(ValueError, match=match):
        _run(dsp.paper_params(), jnp.asarray(q0), jnp.asarray(omega0))


def test_paper_rounded_state_is_rejected():
    """002 prints rounded q₁₀, ω₁₀ (papers/README.md); s2jax must not accept them silently."""
    q0 = np.array([[0.8660, 0.0, 0.5], [0.0, 0.0, 1.0]])
    omega0 = np.array([[-0.4330, 0.0, 0.75], [0.0, 1.0, 0.0]])
    with pytest.raises(ValueError, match="q0 of body 0 is not a unit vector"):
        _run(dsp.paper_params(), q0, omega0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(dt=0.0), "dt must be a finite positive"),
        (dict(dt=-0.01), "dt must be a finite positive"),
        (dict(num_steps=0), "num_steps must be a positive"),
        (dict(num_steps=10, save_every=3), "must divide"),
    ],
)
def test_bad_options_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _run(dsp.paper_params(), **kwargs)


def test_traced_bad_state_is_a_result_code():
    q0, omega0 = dsp.paper_state()
    bad = jnp.asarray(q0) * 1.01
    run = jax.jit(lambda q: _run(dsp.paper_params(), q, omega0, throw=False).result)
    assert run(bad) == s2.RESULTS.invalid_initial_state
    assert run(jnp.asarray(q0)) == s2.RESULTS.successful


@pytest.mark.slow
def test_failure_under_vmap_names_the_batch_index_and_spares_the_others():
    params = {"m": jnp.array([1.0, 2.0, 0.5]), "g": 9.81}

    def lagrangian(q, qdot, p):
        return 0.5 * jnp.sum(p["m"][:, None] * qdot**2) + jnp.sum(p["m"] * p["g"] * q[:, 2])

    q0, omega0 = s2.random_state(jax.random.PRNGKey(1), 3)
    scales = jnp.array([1.0, 200.0, 1.0])  # batch member 1 needs |a| > 1 in (3.17)

    def run(scale, throw):
        return s2.simulate(
            lagrangian, q0, scale * omega0, params, dt=0.01, num_steps=20,
            integrator=s2.ExplicitVariationalIntegrator(), throw=throw,
        )

    sols = jax.vmap(lambda s: run(s, False))(scales)
    assert [bool(r) for r in sols.result._value == s2.RESULTS.successful._value] == [True, False, True]
    alone = run(1.0, True)
    np.testing.assert_array_equal(sols.q[0], alone.q)
    with pytest.raises(Exception, match=r"batch index \(1,\).*step 0 → 1"):
        jax.block_until_ready(jax.vmap(lambda s: run(s, True).q)(scales))


@pytest.mark.slow
def test_lagrangian_not_of_form_2_2_is_rejected_by_the_2_2_integrator():
    q0, omega0 = dsp.paper_state()

    def configuration_dependent(q, qdot, p):
        return 0.5 * jnp.sum((1.0 + q[:, 2:] ** 2) * qdot**2)

    def anisotropic(q, qdot, p):
        return 0.5 * jnp.sum(jnp.array([[1.0, 2.0, 3.0]]) * qdot**2)

    def negative(q, qdot, p):
        return -0.5 * jnp.sum(qdot**2)

    def quartic(q, qdot, p):
        return 0.5 * jnp.sum(qdot**2) + jnp.sum(qdot**4)

    for lagrangian, match in [
        (configuration_dependent, "depends on the configuration"),
        (anisotropic, r"is not M ⊗ I₃ \(the velocities of body 0"),
        (negative, "not positive definite"),
        (quartic, "not a quadratic form"),
    ]:
        # The (2.2) integrator asked for explicitly; by default such an L runs the general VI
        # (tests/test_general_lagrangian.py).
        with pytest.raises(ValueError, match=match):
            s2.simulate(lagrangian, q0, omega0, None, dt=0.01, num_steps=2, integrator=s2.VariationalIntegrator())


@pytest.mark.slow
def test_adaptive_baseline_runs_on_the_same_grid():
    sol = _run(dsp.paper_params(), integrator=s2.AdaptiveRungeKutta45(rtol=1e-10, atol=1e-10), save_every=10)
    reference = _run(dsp.paper_params(), num_steps=1000, dt=0.001, save_every=100)
    np.testing.assert_allclose(sol.t, reference.t, rtol=0, atol=1e-14)
    # Both are accurate (VI error O(h²) = 1e-6 at h = 1e-3 over 1 s); they agree to that.
    np.testing.assert_allclose(sol.q, reference.q, rtol=0, atol=1e-4)


def test_progress_bar_updates_at_most_fifty_times(capfd):
    _run(dsp.paper_params(), num_steps=20_000, save_every=10, progress=True)
    err = capfd.readouterr().err
    updates = [chunk for chunk in err.split("\r") if "steps" in chunk]
    assert updates[-1].strip().endswith("20000/20000 steps")
    assert 2 <= len(updates) <= 51


def _three_particles():
    params = {"m": jnp.array([1.0, 2.0, 0.5]), "g": 9.81}

    def lagrangian(q, qdot, p):
        return 0.5 * jnp.sum(p["m"][:, None] * qdot**2) + jnp.sum(p["m"] * p["g"] * q[:, 2])

    q0, omega0 = s2.random_state(jax.random.PRNGKey(1), 3)

    def run(scale):
        # scale 200 needs |a| > 1 in (3.17) at the first step
        return s2.simulate(
            lagrangian, q0, scale * omega0, params, dt=0.01, num_steps=20, integrator=s2.ExplicitVariationalIntegrator()
        )

    return run


# What each mode raises (the README's error-handling paragraph): eagerly a SimulationError;
# inside a compiled or vmapped computation JAX re-raises the host check's SimulationError as a
# jax.errors.JaxRuntimeError that carries its message.
_THROW_MODES = {
    "jit": (lambda run: jax.jit(lambda s: run(s).q), jnp.asarray(200.0), ""),
    "filter_jit": (lambda run: eqx.filter_jit(lambda s: run(s).q), jnp.asarray(200.0), ""),
    "vmap": (lambda run: jax.vmap(lambda s: run(s).q), jnp.array([1.0, 200.0]), r"batch index \(1,\)"),
    "jit_vmap": (
        lambda run: jax.jit(jax.vmap(lambda s: run(s).q)), jnp.array([1.0, 1.0, 200.0]), r"batch index \(2,\)"
    ),
    "jit_grad": (lambda run: jax.jit(jax.grad(lambda s: run(s).q[-1, 0, 0])), jnp.asarray(200.0), ""),
}


@pytest.mark.parametrize("mode", _THROW_MODES)
@pytest.mark.slow
def test_throw_survives_compilation(mode):
    """throw=True raises, naming the step (and batch index), under jit, filter_jit, vmap, jit(vmap), jit(grad)."""
    transform, argument, batch = _THROW_MODES[mode]
    fn = transform(_three_particles())
    message = batch + r".*step 0 → 1 \(t = 0\) failed: the step is too large"
    with pytest.raises(jax.errors.JaxRuntimeError, match=message):
        jax.block_until_ready(fn(argument))
    # The same compiled function runs when nothing fails.
    assert bool(jnp.all(jnp.isfinite(fn(jnp.ones_like(argument)))))


def test_invalid_traced_initial_state_raises_under_jit():
    q0, omega0 = dsp.paper_state()
    run = jax.jit(lambda q: _run(dsp.paper_params(), q, omega0).q)
    with pytest.raises(jax.errors.JaxRuntimeError, match="the initial state is not a finite point"):
        jax.block_until_ready(run(jnp.asarray(q0) * 1.01))


@pytest.mark.slow
def test_adaptive_failure_names_the_time_and_freezes_the_state():
    """A Dormand–Prince run that runs out of steps reports the last save interval it reached
    (not "step 0 → 1") and repeats its last state, like a failed fixed step."""
    q0, omega0 = dsp.paper_state()
    options = dict(dt=0.1, num_steps=100, integrator=s2.AdaptiveRungeKutta45(rtol=1e-8, atol=1e-8, max_steps=200))
    sol = _run(dsp.paper_params(), q0, omega0, throw=False, **options)
    assert sol.result == s2.RESULTS.adaptive_solver_failed
    k = int(sol.failed_step)
    assert 0 < k < 99
    assert bool(jnp.all(jnp.isfinite(sol.q))) and bool(jnp.all(jnp.isfinite(sol.omega)))
    assert bool(jnp.all(sol.q[k + 1 :] == sol.q[k][None])) and not bool(jnp.all(sol.q[k] == sol.q[k - 1]))
    with pytest.raises(s2.SimulationError, match=rf"step {k} → {k + 1} \(t = {0.1 * k:.6g}\)"):
        _run(dsp.paper_params(), q0, omega0, **options)
