"""Gradients through whole simulations: finite differences, adjoints, forward mode, memory."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2

dsp = s2.models.double_spherical_pendulum
springs = s2.models.coupled_spherical_pendula
WEIGHTS = jnp.linspace(0.5, 2.0, 12)


def _finite_difference(fn, x, direction, eps):
    """Fourth-order central difference of fn along `direction`.

    On these horizons round-off in fn is amplified by the flow (the pendulum is chaotic), so
    a fourth-order stencil with a moderate step is more accurate than the usual second-order
    one with a tiny step (measured: 3e-9 against 4e-8 relative at best).
    """
    def at(s):
        return fn(jax.tree_util.tree_map(lambda a, d: a + s * d, x, direction))

    return (8 * (at(eps) - at(-eps)) - (at(2 * eps) - at(-2 * eps))) / (12 * eps)


CASES = {
    # model, integrator, dt, params to check
    "double_pendulum": (dsp, s2.VariationalIntegrator(), 0.01, ("m1", "m2", "l1", "l2", "g")),
    "coupled_pendula": (
        springs, s2.ExplicitVariationalIntegrator(), 1e-3, ("masses", "lengths", "spring_constants", "g")
    ),
}


def _loss(model, integrator, dt, kind, adjoint, params, delta_omega=None):
    q0, omega0 = (jnp.asarray(x) for x in model.paper_state())
    if delta_omega is not None:
        q0, omega0 = s2.retract_state(q0, omega0, jnp.zeros_like(q0), delta_omega)
    sol = s2.simulate(
        model.lagrangian, q0, omega0, params, dt=dt, num_steps=1000, save_every=100,
        integrator=integrator, adjoint=adjoint,
    )
    weights = WEIGHTS[: 3 * q0.shape[0]].reshape(q0.shape)
    if kind == "final":
        return jnp.sum(weights * sol.q[-1]) + jnp.sum(weights * sol.omega[-1]) / 10
    return jnp.sum(weights[None] * sol.q) / sol.q.shape[0]


def _float_params(model):
    """The paper's params as float64 arrays, strongly typed: a difference `value ± eps d` then has
    the type of `value`, and the runs of a finite difference share one compiled program (a weakly
    typed `jnp.asarray(9.81)` and a strong perturbation of it were two)."""
    return {
        k: (jnp.asarray(v, dtype=float) if isinstance(v, (float, np.ndarray)) else v)
        for k, v in model.paper_params().items()
    }


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kind", ["final", "trajectory"])
@pytest.mark.slow
def test_gradients_match_finite_differences(case, kind):
    """Each param and the initial ω, over 1000 steps, to 1e-6 relative."""
    model, integrator, dt, names = CASES[case]
    params = _float_params(model)
    n = model.paper_state()[0].shape[0]
    zero = jnp.zeros((n, 3))
    # Every evaluation goes through the initial ω retracted by δω (δω = 0 leaves it exactly), so
    # one gradient program serves params and δω, and one primal program every difference.
    loss = functools.partial(_loss, model, integrator, dt, kind, s2.DirectAdjoint())
    grads, grad_omega = eqx.filter_jit(eqx.filter_grad(lambda both: loss(*both)))((params, zero))
    for name in names:
        value = params[name]
        direction = jnp.ones_like(value) * (1.0 + jnp.arange(value.size).reshape(value.shape) / 7)
        eps = 1e-4 * float(jnp.max(jnp.abs(value)))
        fd = _finite_difference(lambda x: loss({**params, name: x}, zero), value, direction, eps)
        ad = jnp.sum(grads[name] * direction)
        assert np.isfinite(ad)
        np.testing.assert_allclose(ad, fd, rtol=1e-6, err_msg=name)
    # The initial angular velocity, along a tangent direction (through `retract_state`).
    direction = jax.random.normal(jax.random.PRNGKey(0), (n, 3))
    ad = jnp.sum(grad_omega * direction)
    fd = _finite_difference(lambda d: loss(params, d), zero, direction, 1e-4)
    np.testing.assert_allclose(ad, fd, rtol=1e-6)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.slow
def test_adjoints_agree(case):
    model, integrator, dt, names = CASES[case]
    params = _float_params(model)
    grads = {
        type(adjoint).__name__: eqx.filter_jit(
            eqx.filter_grad(functools.partial(_loss, model, integrator, dt, "trajectory", adjoint))
        )(params)
        for adjoint in (s2.DirectAdjoint(), s2.CheckpointedAdjoint(), s2.ReversibleAdjoint(), s2.StepwiseAdjoint())
    }
    direct = grads.pop("DirectAdjoint")
    for name, other in grads.items():
        for key in names:
            np.testing.assert_allclose(other[key], direct[key], rtol=1e-8, err_msg=f"{name} {key}")


@pytest.mark.slow
def test_adjoints_agree_under_vmap():
    params = _float_params(dsp)
    lengths = jnp.array([9.0, 9.81, 10.5])

    def gradient(adjoint, l1):
        loss = functools.partial(_loss, dsp, s2.VariationalIntegrator(), 0.01, "final", adjoint)
        return jax.grad(lambda p: loss(p))({**params, "l1": l1})

    direct = jax.jit(jax.vmap(functools.partial(gradient, s2.DirectAdjoint())))(lengths)
    reversible = jax.jit(jax.vmap(functools.partial(gradient, s2.ReversibleAdjoint())))(lengths)
    stepwise = jax.jit(jax.vmap(functools.partial(gradient, s2.StepwiseAdjoint())))(lengths)
    for key in ("m2", "l1", "g"):
        np.testing.assert_allclose(reversible[key], direct[key], rtol=1e-8)
        np.testing.assert_allclose(stepwise[key], direct[key], rtol=1e-8)
    # And each batch member is the unbatched gradient. Not bitwise: XLA compiles the batched
    # and unbatched elementwise code of the closed-form Newton step differently (last-bit
    # differences), which can change when Newton's 1e-12 stopping test passes and so the
    # root by up to that tolerance; 1000 steps of the chaotic pendulum amplify this to
    # ~3e-12 relative (measured), hence 1e-10 (it was 1e-12 while the step was bitwise stable).
    alone = jax.jit(functools.partial(gradient, s2.DirectAdjoint()))(lengths[2])
    np.testing.assert_allclose(direct["l1"][2], alone["l1"], rtol=1e-10)


@pytest.mark.slow
def test_forward_and_reverse_mode_agree():
    params = _float_params(dsp)
    loss = functools.partial(_loss, dsp, s2.VariationalIntegrator(), 0.01, "final", s2.DirectAdjoint())
    tangent = {k: jnp.zeros_like(v) for k, v in params.items()}
    tangent.update(l1=jnp.asarray(1.0), g=jnp.asarray(-0.5))
    _, jvp = jax.jit(lambda p, t: jax.jvp(loss, (p,), (t,)))(params, tangent)
    grads = jax.jit(jax.grad(loss))(params)
    np.testing.assert_allclose(jvp, grads["l1"] - 0.5 * grads["g"], rtol=1e-10)


def _lowered_gradient(adjoint, num_steps):
    """The gradient program of a `num_steps` run with `adjoint`, lowered (not compiled)."""
    q0, omega0 = dsp.paper_state()

    def loss(params):
        sol = s2.simulate(
            dsp.lagrangian, q0, omega0, params, dt=0.01, num_steps=num_steps,
            save_every=num_steps, adjoint=adjoint,
        )
        return jnp.sum(sol.q[-1])

    return jax.jit(jax.grad(loss)).lower(_float_params(dsp))


def _gradient_temp_bytes(adjoint, num_steps):
    return _lowered_gradient(adjoint, num_steps).compile().memory_analysis().temp_size_in_bytes


@pytest.mark.slow
def test_reversible_adjoint_memory_does_not_grow_with_steps():
    small = _gradient_temp_bytes(s2.ReversibleAdjoint(), 1_000)
    large = _gradient_temp_bytes(s2.ReversibleAdjoint(), 10_000)
    assert large == small, (small, large)
    assert large < 1e6
    # The direct adjoint stores every step: its memory does grow.
    assert _gradient_temp_bytes(s2.DirectAdjoint(), 10_000) > 5 * _gradient_temp_bytes(s2.DirectAdjoint(), 1_000)


def test_default_adjoint_checkpoints_long_runs():
    """`default_adjoint`: direct below 500 steps, checkpointed from 500 on."""
    assert s2.default_adjoint(1) == s2.DirectAdjoint()
    assert s2.default_adjoint(499) == s2.DirectAdjoint()
    assert s2.default_adjoint(500) == s2.CheckpointedAdjoint()
    assert s2.default_adjoint(10**6) == s2.CheckpointedAdjoint()


@pytest.mark.slow
def test_simulate_without_an_adjoint_takes_the_default():
    """`simulate(adjoint=None)` compiles the program of `default_adjoint(num_steps)`: the
    direct adjoint's below 500 steps, a checkpointed gradient's (√N states and the Newton roots,
    not every step's intermediates, in memory) from 500 on. The programs are compared as lowered
    (the same program, not only the same memory); only the memory comparison compiles."""
    assert _lowered_gradient(None, 499).as_text() == _lowered_gradient(s2.DirectAdjoint(), 499).as_text()
    assert _lowered_gradient(None, 2000).as_text() == _lowered_gradient(s2.CheckpointedAdjoint(), 2000).as_text()
    checkpointed = _gradient_temp_bytes(None, 2000)
    # 2000 steps of stored intermediates (3.1 MB measured) against 45 states and 2000 roots.
    assert 10 * checkpointed < _gradient_temp_bytes(s2.DirectAdjoint(), 2000)


@pytest.mark.slow
def test_default_adjoint_under_vmap():
    """The default is chosen before tracing, so `jax.vmap` over the params of a 2000-step run
    compiles the checkpointed gradient too, and its per-member gradients are the eager ones."""
    q0, omega0 = dsp.paper_state()
    lengths = jnp.array([9.0, 9.81])

    def loss(l1, adjoint):
        params = dict(_float_params(dsp), l1=l1)
        sol = s2.simulate(dsp.lagrangian, q0, omega0, params, dt=0.01, num_steps=2000, save_every=2000,
                          adjoint=adjoint)
        return jnp.sum(sol.q[-1])

    def lowered(adjoint):
        return jax.jit(jax.vmap(jax.grad(functools.partial(loss, adjoint=adjoint)))).lower(lengths)

    default = lowered(None)
    # The same program (compared as lowered: only the memory comparison compiles).
    assert default.as_text() == lowered(s2.CheckpointedAdjoint()).as_text()
    default = default.compile()
    temp_bytes = default.memory_analysis().temp_size_in_bytes
    assert 10 * temp_bytes < lowered(s2.DirectAdjoint()).compile().memory_analysis().temp_size_in_bytes
    batched = default(lengths)
    for i in range(2):
        alone = jax.grad(functools.partial(loss, adjoint=s2.DirectAdjoint()))(lengths[i])
        # Same trajectory, other programs (batched, checkpointed, compiled): round-off amplified
        # by 20 s of chaotic motion, measured 3.9e-12 and 1.5e-11 relative.
        np.testing.assert_allclose(batched[i], alone, rtol=1e-9)


@functools.cache
def _root_cases():
    """(loss(params, adjoint), params) on each path of Newton's method in the steps: two bodies
    (`two_body_newton`), a chain (`_displacement_newton`), a dense M (chord iterations), and a
    force that depends on ω (the velocity update's Newton, with `jax.jacfwd`'s Jacobian)."""
    chain = s2.models.chain_pendulum

    def case(lagrangian, state, params, **kwargs):
        def loss(params, adjoint):
            sol = s2.simulate(lagrangian, *state, params, dt=0.01, num_steps=300, save_every=300,
                              adjoint=adjoint, **kwargs)
            weights = WEIGHTS[: sol.q.size // sol.q.shape[0]].reshape(sol.q.shape[1:])
            return jnp.sum(weights * sol.q[-1]) + jnp.sum(weights * sol.omega[-1]) / 10

        return loss, params

    chain_params = {k: jnp.asarray(v) for k, v in chain.paper_params(4).items()}
    return {
        "two_bodies": case(dsp.lagrangian, dsp.paper_state(), _float_params(dsp)),
        "chain": case(s2.LagrangianSystem(chain.lagrangian, inertia_structure="chain"), chain.paper_state(4),
                      chain_params),
        "dense": case(chain.lagrangian, chain.paper_state(4), chain_params),
        "damped": case(dsp.lagrangian, dsp.paper_state(), _float_params(dsp), force=s2.forces.LinearDamping(0.3)),
    }


@functools.cache
def _traced_gradient(name, adjoint):
    """`jax.jit(jax.grad(loss))` of a `_root_cases` case traced at its params, once per module
    and worker: the two tests below read its jaxpr and compile it (each traced it anew, ~2 s)."""
    loss, params = _root_cases()[name]
    return jax.jit(jax.grad(functools.partial(loss, adjoint=adjoint))).trace(params)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["two_bodies", "chain", "dense", "damped"])
def test_checkpointed_adjoint_skips_the_newton_iterations_when_recomputing(name):
    """With `save_roots` (the default) the backward pass evaluates each step at the Newton roots
    of the forward pass: the gradient's program holds the Newton loops of one forward pass, as
    `DirectAdjoint`'s does, where without it the recomputation iterates again."""
    loss, params = _root_cases()[name]

    def newton_loops(adjoint):
        return str(_traced_gradient(name, adjoint).jaxpr).count("while[")

    forward = str(jax.make_jaxpr(functools.partial(loss, adjoint=s2.DirectAdjoint()))(params)).count("while[")
    assert forward >= 1
    assert newton_loops(s2.CheckpointedAdjoint()) == newton_loops(s2.DirectAdjoint()) == forward
    assert newton_loops(s2.CheckpointedAdjoint(save_roots=False)) == 2 * forward


@pytest.mark.slow
# The two-body path's checkpointed gradient is compared with the others in `test_adjoints_agree`.
@pytest.mark.parametrize("name", ["chain", "dense", "damped"])
def test_checkpointed_adjoint_with_saved_roots_agrees(name):
    """The gradient at the stored roots is the gradient through recomputed ones, to round-off
    (`DirectAdjoint` against `CheckpointedAdjoint`: `test_adjoints_agree`)."""
    _, params = _root_cases()[name]
    saved, recomputed = (
        _traced_gradient(name, adjoint).lower().compile()(params)
        for adjoint in (s2.CheckpointedAdjoint(), s2.CheckpointedAdjoint(save_roots=False))
    )
    for key in params:
        # Two compiled programs of one trajectory (3 s, chaotic): measured up to 1e-13.
        np.testing.assert_allclose(saved[key], recomputed[key], rtol=1e-10, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("structure", ["two_bodies", "chain"])
def test_hessian_through_a_simulation_matches_differences_of_the_gradient(structure):
    """Second derivatives through the Newton solves of 50 steps (forward over reverse mode, as
    `jax.hessian` takes them), against central differences of `jax.grad`. Before the derivative
    rule wrote the root's dependence as a Newton step (`_newton._root_jvp`) these came out
    wrong without an error: the terms through dx*/dθ were missing (a zero row for ω₀). The rule
    is one for every path; the dense path's chord iterations are checked in `test_newton.py`."""
    chain = s2.models.chain_pendulum
    if structure == "two_bodies":
        model, system, x = dsp, dsp.lagrangian, jnp.array([1.0, 9.81])
    else:
        model, x = chain, jnp.array([1.0, 9.81])
        system = s2.LagrangianSystem(chain.lagrangian, inertia_structure="chain")
    q0, omega0 = (jnp.asarray(v) for v in (model.paper_state() if model is dsp else chain.paper_state(3)))
    params = _float_params(dsp) if model is dsp else {k: jnp.asarray(v) for k, v in chain.paper_params(3).items()}

    def loss(x):
        # x = (a scale of ω₀, g)
        sol = s2.simulate(system, q0, x[0] * omega0, {**params, "g": x[1]}, dt=0.01, num_steps=50, save_every=50)
        return jnp.sum(sol.q[-1] * jnp.arange(1.0, 4.0)[None]) + jnp.sum(sol.omega[-1])

    hessian = jax.jit(jax.hessian(loss))(x)
    gradient = jax.jit(jax.grad(loss))
    eps = 1e-5
    differences = jnp.stack([(gradient(x + eps * e) - gradient(x - eps * e)) / (2 * eps) for e in jnp.eye(2)])
    # Central differences of the gradient: O(eps²) truncation and round-off/eps, measured up to
    # 2e-8 relative to the largest entry.
    np.testing.assert_allclose(hessian, differences, rtol=1e-6, atol=1e-6 * float(jnp.max(jnp.abs(differences))))


@pytest.mark.slow
def test_hessian_through_the_reversible_adjoint():
    """`jax.hessian` (forward over reverse) through a custom_vjp adjoint, whose backward pass is
    differentiated in forward mode (`ReversibleAdjoint`; `StepwiseAdjoint` runs the same
    backward loop on stored states), agrees with the checkpointed one (`DirectAdjoint`'s Hessian
    is checked against differences above)."""
    q0, omega0 = dsp.paper_state()
    params = _float_params(dsp)

    def loss(x, adjoint):
        sol = s2.simulate(dsp.lagrangian, q0, omega0, {**params, "g": x[0], "l1": x[1]}, dt=0.01,
                          num_steps=10, save_every=10, adjoint=adjoint)
        return jnp.sum(WEIGHTS.reshape(2, 6)[:, :3] * sol.q[-1])

    x = jnp.array([9.81, 9.81])
    hessians = [
        jax.jit(jax.hessian(functools.partial(loss, adjoint=adjoint)))(x)
        for adjoint in (s2.CheckpointedAdjoint(), s2.ReversibleAdjoint())
    ]
    # Two programs of one trajectory (0.1 s): round-off, and the reversible adjoint's
    # reconstruction to the Newton tolerance.
    np.testing.assert_allclose(hessians[1], hessians[0], rtol=1e-8, atol=1e-12)


@pytest.mark.slow
def test_stepwise_adjoint_stores_states_not_intermediates():
    stepwise = _gradient_temp_bytes(s2.StepwiseAdjoint(), 10_000)
    direct = _gradient_temp_bytes(s2.DirectAdjoint(), 10_000)
    # 10⁴ states of (q, −∂V/∂q, A(q)ω, f/h, d(f/h)/dt, h), 5 · 6 + 1 floats of 8 bytes each:
    # 2.48 MB, and a little more. ω itself is not kept: with A(q)ω carried (`ImplicitState`), no
    # step of this conservative system reads ω back. The direct adjoint keeps every
    # intermediate value of every step: 15.5 MB measured, 6.2× (11.7 MB, 4.7×, before the
    # two-body Newton in tangent-plane coordinates, whose scalar algebra has more, smaller
    # intermediates; 18 MB, 9.5×, before the step carried A(q)ω), hence 4× here as a bound.
    state_bytes = 10_000 * (5 * 6 + 1) * 8
    assert state_bytes <= stepwise < 1.1 * state_bytes, stepwise
    assert 4 * stepwise < direct, (stepwise, direct)


@pytest.mark.slow
def test_stepwise_adjoint_with_damping_matches_finite_differences():
    """A force that depends on ω (which `ReversibleAdjoint` refuses): d loss/d(c, g, ω₀)."""
    q0, omega0 = (jnp.asarray(x) for x in dsp.paper_state())
    params = _float_params(dsp)

    def loss(x):
        damping, g, kick = x
        start = s2.retract_state(q0, omega0, jnp.zeros_like(q0), kick * jnp.ones_like(q0))
        sol = s2.simulate(
            dsp.lagrangian, *start, {**params, "g": g}, dt=0.01, num_steps=200, save_every=20,
            force=s2.forces.LinearDamping(damping), adjoint=s2.StepwiseAdjoint(),
        )
        return jnp.sum(WEIGHTS.reshape(2, 6)[:, :3] * sol.q[-1]) + jnp.sum(sol.omega) / 10

    x = (jnp.asarray(0.3), jnp.asarray(9.81), jnp.asarray(0.0))
    grads = jax.grad(loss)(x)
    for i, value in enumerate(x):
        direction = tuple(jnp.asarray(float(j == i)) for j in range(3))
        eps = 1e-4 * max(1.0, abs(float(value)))
        fd = _finite_difference(loss, x, direction, eps)
        np.testing.assert_allclose(grads[i], fd, rtol=1e-6, err_msg=f"argument {i}")


@pytest.mark.slow
def test_reversible_reconstruction_error_grows_on_chaotic_horizons():
    """Stepping back with −h recovers the initial state to round-off on a short horizon; on
    the chaotic double pendulum the error is amplified like e^{λt} (the caveat in
    `ReversibleAdjoint`'s docstring)."""
    q0, omega0 = dsp.paper_state()
    params = dsp.paper_params()

    def back_and_forth(num_steps):
        forward = s2.simulate(dsp.lagrangian, q0, omega0, params, dt=0.01, num_steps=num_steps, save_every=num_steps)
        # The VI is symmetric: running the final state with reversed velocity retraces it.
        back = s2.simulate(
            dsp.lagrangian, forward.q[-1], -forward.omega[-1], params, dt=0.01,
            num_steps=num_steps, save_every=num_steps,
        )
        return float(jnp.max(jnp.abs(back.q[-1] - q0)))

    short, long = back_and_forth(100), back_and_forth(10_000)
    assert short < 1e-12
    assert long > 100 * short


@pytest.mark.slow
def test_no_nan_gradients_at_rest_and_collinear():
    params = _float_params(dsp)
    q0 = jnp.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])  # hanging straight: q1 = q2
    for integrator in (s2.VariationalIntegrator(), s2.RungeKutta4()):
        def loss(p, omega0):
            sol = s2.simulate(
                dsp.lagrangian, q0, omega0, p, dt=0.01, num_steps=20, save_every=20, integrator=integrator
            )
            return jnp.sum(sol.q[-1] ** 2) + jnp.sum(sol.omega[-1])

        grads = jax.grad(loss, argnums=(0, 1))(params, jnp.zeros((2, 3)))
        assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree_util.tree_leaves(grads))
    diagonal = _float_params(springs)
    q0 = jnp.tile(jnp.array([0.0, 0.0, 1.0]), (4, 1))

    def loss(p):
        sol = s2.simulate(
            springs.lagrangian, q0, jnp.zeros((4, 3)), p, dt=1e-3, num_steps=20, save_every=20,
            integrator=s2.ExplicitVariationalIntegrator(),
        )
        return jnp.sum(sol.q[-1])

    grads = eqx.filter_grad(loss)(diagonal)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree_util.tree_leaves(grads))


@pytest.mark.slow
def test_retract_state_stays_on_the_tangent_bundle():
    q, omega = s2.random_state(jax.random.PRNGKey(1), 5)
    dq, domega = jax.random.normal(jax.random.PRNGKey(2), (2, 5, 3))
    q1, omega1 = s2.retract_state(q, omega, 3.0 * dq, domega)
    assert float(jnp.max(s2.unit_length_error(q1))) < 1e-15
    assert float(jnp.max(s2.tangency_error(q1, omega1))) < 1e-14
    # Its derivative at zero is the tangent projection.
    tangent = jax.jvp(lambda d: s2.retract_state(q, omega, d, jnp.zeros_like(d))[0], (jnp.zeros_like(dq),), (dq,))[1]
    np.testing.assert_allclose(tangent, s2.project_tangent(q, dq), atol=1e-14)


def test_reversible_adjoint_needs_a_symmetric_integrator():
    with pytest.raises(ValueError, match="symmetric integrator"):
        s2.simulate(
            dsp.lagrangian, *dsp.paper_state(), dsp.paper_params(), dt=0.01, num_steps=10,
            integrator=s2.RungeKutta4(), adjoint=s2.ReversibleAdjoint(),
        )


@pytest.mark.parametrize("integrator", [s2.Rattle(), s2.DiscreteHamelIntegrator()])
@pytest.mark.slow
def test_reversible_adjoint_of_other_symmetric_integrators(integrator):
    """RATTLE and the discrete Hamel integrator declare `is_symmetric`: their reversible
    gradients agree with the stored trajectory's."""
    model = s2.models.n_body_on_sphere
    q0, omega0 = model.paper_state()

    def loss(params, adjoint):
        sol = s2.simulate(
            model.lagrangian, q0, omega0, params, dt=1e-3, num_steps=200, save_every=50,
            integrator=integrator, adjoint=adjoint,
        )
        return jnp.sum(WEIGHTS[:9].reshape(3, 3)[None] * sol.q)

    params = _float_params(model)
    direct = eqx.filter_grad(loss)(params, s2.DirectAdjoint())
    reversible = eqx.filter_grad(loss)(params, s2.ReversibleAdjoint())
    for key, value in direct.items():
        if value is not None:
            np.testing.assert_allclose(reversible[key], value, rtol=1e-9, err_msg=key)


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3])
def test_rattle_gradients_are_the_variational_integrators(n):
    """RATTLE with the full M is the map of the VI (3.10)–(3.13) (`Rattle`): so are its
    gradients, taken through its own Newton solve of the multipliers (implicit function theorem),
    by the default (checkpointed, saved roots) and the reversible adjoints. Two bodies take
    RATTLE's written-out solves, three its unrolled elimination (reversible adjoint only, for the
    suite's time: it transposes the same solve)."""
    model = dsp if n == 2 else s2.models.chain_pendulum
    tilt = jnp.array([[0.15, 0.0, 0.0], [0.2, 0.05, 0.0], [0.1, -0.1, 0.0]])[:n]
    q0 = s2.cayley_rotate(tilt, jnp.array([[0.0, 0.0, 1.0]] * n))
    omega0 = s2.project_tangent(q0, jnp.array([[0.0, 0.2, 0.0], [0.1, 0.0, 0.0], [0.0, 0.0, 0.1]])[:n])

    def loss(params, integrator, adjoint):
        sol = s2.simulate(model.lagrangian, q0, omega0, params, dt=0.02, num_steps=600, save_every=200,
                          integrator=integrator, adjoint=adjoint)
        return jnp.sum(WEIGHTS[: 3 * n].reshape(n, 3)[None] * sol.q) + jnp.sum(sol.omega[-1] ** 2)

    params = _float_params(dsp) if n == 2 else {k: jnp.asarray(v, float) for k, v in model.paper_params(n).items()}
    vi = eqx.filter_grad(loss)(params, s2.VariationalIntegrator(), s2.CheckpointedAdjoint())
    adjoints = (s2.CheckpointedAdjoint(), s2.ReversibleAdjoint()) if n == 2 else (s2.ReversibleAdjoint(),)
    for adjoint in adjoints:
        rattle = eqx.filter_grad(loss)(params, s2.Rattle(), adjoint)
        for key, value in vi.items():
            if value is not None:
                np.testing.assert_allclose(rattle[key], value, rtol=1e-9, err_msg=f"{key}, {adjoint}")


@pytest.mark.slow
def test_reversible_adjoint_refuses_an_untrustworthy_reconstruction():
    """After 10⁴ steps of the chaotic 002 Example 1 the backward pass rebuilds the initial state
    only to ~6e-7 (gradient error ~4e-5): raised with throw=True, NaN with throw=False."""
    q0, omega0 = dsp.paper_state()

    def loss(params, adjoint, throw):
        sol = s2.simulate(
            dsp.lagrangian, q0, omega0, params, dt=0.01, num_steps=10_000, save_every=10_000,
            adjoint=adjoint, throw=throw,
        )
        return sol.q[-1, 1, 2]

    params = _float_params(dsp)
    grad = jax.jit(jax.grad(loss), static_argnums=(1, 2))
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"rebuilt the initial state with a relative error of"):
        jax.block_until_ready(grad(params, s2.ReversibleAdjoint(), True))
    assert all(bool(jnp.isnan(g)) for g in jax.tree_util.tree_leaves(grad(params, s2.ReversibleAdjoint(), False)))
    # A tolerance the user loosens knowingly gives the (approximate) gradient.
    loose = grad(params, s2.ReversibleAdjoint(tolerance=1e-5), True)
    direct = grad(params, s2.DirectAdjoint(), True)
    np.testing.assert_allclose(loose["l1"], direct["l1"], rtol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("n", [3, 9])
def test_dense_path_forward_and_reverse_mode_agree_with_differences(n):
    """The dense path of the implicit VI (chord iterations from a factorisation that carries no
    derivative; the root differentiated by the implicit function theorem with the closed-form
    Jacobian `cayley_jacobian`): `jax.jvp` and `jax.grad` agree under `jax.jit` and `jax.vmap`
    and match central differences, for n = 3 (the unrolled block elimination) and n = 9 (LU, with
    integer pivots that the derivative rule must not close over); at n = 9 the stepwise and
    reversible adjoints give the same gradient."""
    chain = s2.models.chain_pendulum
    params = jax.tree_util.tree_map(jnp.asarray, chain.paper_params(n))
    q0, omega0 = (jnp.asarray(x) for x in chain.paper_state(n))
    system = s2.LagrangianSystem(chain.lagrangian, inertia_structure="dense")  # the dense path, on a chain

    def loss(scale, adjoint=None):
        p = {**params, "masses": params["masses"].at[0].multiply(scale)}
        sol = s2.simulate(system, q0, omega0, p, dt=0.01, num_steps=40, save_every=40, adjoint=adjoint)
        return jnp.sum(sol.q[-1] * jnp.arange(3.0)[None]) + jnp.sum(sol.omega[-1])

    scales = jnp.array([0.9, 1.1])
    reverse = jax.jit(jax.vmap(jax.grad(loss)))(scales)
    forward = jax.jit(jax.vmap(lambda s: jax.jvp(loss, (s,), (jnp.ones_like(s),))[1]))(scales)
    np.testing.assert_allclose(forward, reverse, rtol=1e-10)
    eps = 1e-4
    # Central differences: truncation ~eps² (1e-8 relative here), round-off ~1e-13/eps.
    central = jnp.array([(loss(s + eps) - loss(s - eps)) / (2 * eps) for s in scales])
    np.testing.assert_allclose(reverse, central, rtol=1e-6)
    assert float(jnp.min(jnp.abs(reverse))) > 1e-3
    if n >= 8:
        # From 8 bodies the VI's state carries the Cholesky factor of M⁻¹ ∘ Gram(q) (its chord and
        # its solve of (3.13) share it): the adjoints that keep or rebuild states take it along.
        # Both against the direct adjoint's gradient above (vmapped): round-off (measured
        # 1.4e-11; 7.5e-13 against an unbatched direct gradient), and the
        # reversible adjoint's reconstruction to the Newton tolerance (1.3e-9: the states are
        # rebuilt to ~1e-12 relative, the gradient is small), the same before the factor was
        # carried.
        for adjoint, rtol in ((s2.StepwiseAdjoint(), 1e-10), (s2.ReversibleAdjoint(), 1e-8)):
            stored = jax.jit(jax.grad(loss), static_argnums=1)(scales[0], adjoint)
            np.testing.assert_allclose(stored, reverse[0], rtol=rtol)
