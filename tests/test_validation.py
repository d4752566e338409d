"""Bad input gets a clear error, eagerly or as a result code under jit, vmap and grad."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2

dsp = s2.models.double_spherical_pendulum
Q0, OMEGA0 = dsp.paper_state()


def _traced_params(**changes):
    return {k: jnp.asarray(v) for k, v in dict(dsp.paper_params(), **changes).items()}


def _gram_dependent(q, qdot, p):
    """Inertia 1 + (q₁·q₂)²: the same at q, −q and any common rotation of q, so only a
    configuration that changes the Gram matrix shows that it is not constant."""
    return 0.5 * (1.0 + jnp.dot(q[0], q[1]) ** 2) * jnp.sum(qdot**2) + p["g"] * jnp.sum(q[:, 2])


def _anisotropic(q, qdot, p):
    return 0.5 * jnp.sum(jnp.array([[1.0, 2.0, 3.0]]) * qdot**2) + p["g"] * jnp.sum(q[:, 2])


def _quartic(q, qdot, p):
    return 0.5 * jnp.sum(qdot**2) + jnp.sum(qdot**4) + p["g"] * jnp.sum(q[:, 2])


def test_inertia_depending_on_the_gram_matrix_is_rejected():
    with pytest.raises(ValueError, match="of body 0 depends on the configuration"):
        s2.simulate(_gram_dependent, Q0, OMEGA0, {"g": 9.81}, dt=0.01, num_steps=2,
                    integrator=s2.VariationalIntegrator())


@pytest.mark.parametrize("lagrangian", [_gram_dependent, _anisotropic, _quartic])
@pytest.mark.slow
def test_form_is_checked_in_graph_under_jit_vmap_and_grad(lagrangian):
    """Where the check cannot run before compiling (traced params or state), it runs inside."""
    params = {"g": jnp.asarray(9.81)}

    def run(p, omega0, throw=False, integrator=None):
        return s2.simulate(lagrangian, Q0, omega0, p, dt=0.01, num_steps=5, throw=throw, integrator=integrator)

    not_form = s2.RESULTS.not_lagrangian_form
    assert jax.jit(lambda p: run(p, OMEGA0).result)(params) == not_form
    batch = {"g": jnp.array([9.81, 1.0])}
    batched = jax.vmap(lambda p: run(p, OMEGA0).result._value)(batch)
    assert np.all(np.asarray(batched) == not_form._value)
    # With known params and a traced state the form is checked before compiling (M of (2.2)
    # does not depend on q), at a fixed random state of the same shape.
    with pytest.raises(ValueError, match="not of the form|depends on the configuration|not M ⊗ I₃"):
        jax.vmap(lambda w: run({"g": 9.81}, w, integrator=s2.VariationalIntegrator()).result._value)(
            jnp.stack([jnp.asarray(OMEGA0)] * 2)
        )
    # jax.grad without jit runs eagerly: the error is raised as it is.
    with pytest.raises(s2.SimulationError, match="before the first step: the Lagrangian is not of the form"):
        jax.grad(lambda p: run(p, OMEGA0, throw=True).q[-1, 0, 0])(params)
    with pytest.raises(jax.errors.JaxRuntimeError, match="before the first step: the Lagrangian is not of the form"):
        jax.block_until_ready(jax.jit(jax.grad(lambda p: run(p, OMEGA0, throw=True).q[-1, 0, 0]))(params))


@pytest.mark.slow
def test_form_check_in_graph_passes_a_model_of_form_2_2():
    result = jax.jit(lambda p: s2.simulate(dsp.lagrangian, Q0, OMEGA0, p, dt=0.01, num_steps=5).result)
    assert result(_traced_params()) == s2.RESULTS.successful


@pytest.mark.slow
def test_non_finite_params_are_named():
    with pytest.raises(ValueError, match=r"params\['l1'\] is not finite: nan"):
        s2.simulate(dsp.lagrangian, Q0, OMEGA0, dict(dsp.paper_params(), l1=float("nan")), dt=0.01, num_steps=2)
    traced = jax.jit(lambda p: s2.simulate(dsp.lagrangian, Q0, OMEGA0, p, dt=0.01, num_steps=2, throw=False).result)
    assert traced(_traced_params(g=np.inf)) == s2.RESULTS.invalid_parameters


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(params=dict(dsp.paper_params(), m1=1.0 + 1e-3j)), r"params\['m1'\] is complex"),
        (dict(q0=Q0 + 0j), "q0 is complex"),
        (dict(omega0=OMEGA0 * (1 + 0j)), "omega0 is complex"),
    ],
)
def test_complex_input_is_rejected(change, match):
    inputs = {"q0": Q0, "omega0": OMEGA0, "params": dsp.paper_params(), **change}
    with pytest.raises(ValueError, match=match):
        s2.simulate(dsp.lagrangian, inputs["q0"], inputs["omega0"], inputs["params"], dt=0.01, num_steps=2)


def test_float32_is_named():
    """With x64 off, the paper's own model must be refused for its dtype, not for its form."""
    script = (
        "import s2jax as s2\n"
        "m = s2.models.double_spherical_pendulum\n"
        "s2.simulate(m.lagrangian, *m.paper_state(), m.paper_params(), dt=0.01, num_steps=2)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "s2jax computes in float64" in run.stderr and "jax_enable_x64" in run.stderr, run.stderr[-500:]


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(dt="0.01"), r"dt must be a real number; got '0.01' \(a str\)"),
        (dict(dt=True), r"dt must be a real number; got True \(a bool\)"),
        (dict(q0=np.ones((2, 3), bool)), r"q0 must be an array of real numbers; got dtype bool"),
        (dict(omega0=np.zeros((2, 3), bool)), r"omega0 must be an array of real numbers; got dtype bool"),
        (dict(q0=np.zeros((0, 3)), omega0=np.zeros((0, 3))), r"q0 has no bodies, shape \(0, 3\); n ≥ 1"),
    ],
)
def test_arguments_of_the_wrong_kind_are_named(change, match):
    inputs = {"q0": Q0, "omega0": OMEGA0, "dt": 0.01, **change}
    with pytest.raises(ValueError, match=match):
        s2.simulate(dsp.lagrangian, inputs["q0"], inputs["omega0"], dsp.paper_params(), dt=inputs["dt"], num_steps=2)


_MISSING_G = {k: v for k, v in dsp.paper_params().items() if k != "g"}
def _two_steps(model, p):
    return s2.simulate(model, Q0, OMEGA0, p, dt=0.01, num_steps=2)


_RUNS_WITHOUT_G = {
    "eager": lambda p: _two_steps(dsp.lagrangian, p),
    # Traced params: the model is first called inside the computation (it raised KeyError: 'g').
    "jit": lambda p: jax.jit(lambda p: _two_steps(dsp.lagrangian, p).q)(p),
    "grad": lambda p: jax.grad(lambda p: _two_steps(dsp.lagrangian, p).q[-1, 0, 0])(p),
    "general system": lambda p: _two_steps(s2.GeneralLagrangianSystem(dsp.lagrangian), p),
    "batch": lambda p: s2.simulate_batch(dsp.lagrangian, Q0[None], OMEGA0[None], p, dt=0.01, num_steps=2),
}


@pytest.mark.parametrize("run", list(_RUNS_WITHOUT_G))
def test_a_missing_params_key_is_named(run):
    """The model's own KeyError ('g') becomes a ValueError naming the key and the keys given, before
    compiling, whether the params are concrete or traced."""
    with pytest.raises(ValueError, match=r"params has no key 'g'.*keys given: \['l1', 'l2', 'm1', 'm2'\]"):
        _RUNS_WITHOUT_G[run]({k: jnp.asarray(v) for k, v in _MISSING_G.items()})


def test_a_length_the_model_declares_positive_is_checked():
    """l₁ < 0 gives a positive definite M and a run that looks healthy (the pendulum with q₁ → −q₁):
    only the model's declaration (`s2.positive_parameters`) can refuse it. Eagerly a ValueError
    naming the key (and the element of an array), traced `invalid_parameters` with the initial
    state repeated bitwise; the same Lagrangian undeclared runs."""
    params = dict(dsp.paper_params(), l1=-1.0)
    with pytest.raises(ValueError, match=r"params\['l1'\] = -1.0 must be > 0: the model declares 'l1' positive"):
        s2.simulate(dsp.lagrangian, Q0, OMEGA0, params, dt=0.01, num_steps=2)
    traced = {k: jnp.asarray(v) for k, v in params.items()}
    sol = jax.jit(lambda p: s2.simulate(dsp.lagrangian, Q0, OMEGA0, p, dt=0.01, num_steps=3, throw=False))(traced)
    assert sol.result == s2.RESULTS.invalid_parameters
    assert int(sol.failed_step) == 0
    np.testing.assert_array_equal(sol.q, jnp.broadcast_to(Q0, sol.q.shape))
    np.testing.assert_array_equal(sol.omega, jnp.broadcast_to(OMEGA0, sol.omega.shape))

    chain = s2.models.chain_pendulum
    chain_params = chain.paper_params(3)
    chain_params["lengths"][1] = -2.0
    with pytest.raises(ValueError, match=r"params\['lengths'\]\[1\] = -2.0 must be > 0"):
        s2.simulate(chain.system(), *chain.paper_state(3), chain_params, dt=0.01, num_steps=2)

    def undeclared(q, qdot, p):
        return dsp.lagrangian(q, qdot, p)

    assert s2.simulate(undeclared, Q0, OMEGA0, params, dt=0.01, num_steps=2).result == s2.RESULTS.successful
    declared = s2.positive_parameters("l1")(undeclared)
    with pytest.raises(ValueError, match=r"params\['l1'\] = -1.0 must be > 0"):
        s2.simulate(declared, Q0, OMEGA0, params, dt=0.01, num_steps=2)
    with pytest.raises(TypeError, match="keys of params as str"):
        s2.positive_parameters(1)


@pytest.mark.parametrize("block_size", [0, -2, 2.5, True])
def test_checkpointed_adjoint_needs_a_positive_block_size(block_size):
    with pytest.raises(ValueError, match=r"CheckpointedAdjoint\(block_size\) must be a positive Python int"):
        s2.CheckpointedAdjoint(block_size=block_size)
    assert s2.CheckpointedAdjoint(block_size=None).block_size is None  # None: √save_every


@pytest.mark.parametrize(
    "options, match",
    [
        (dict(rtol=-1e-3), r"AdaptiveRungeKutta45: rtol must be finite and ≥ 0; got -0.001"),
        (dict(atol=float("nan")), r"AdaptiveRungeKutta45: atol must be finite and ≥ 0; got nan"),
        (dict(rtol=0.0, atol=0.0), r"AdaptiveRungeKutta45: rtol and atol are both 0"),
        (dict(max_steps=0), r"AdaptiveRungeKutta45\(max_steps\) must be a positive Python int"),
    ],
)
def test_adaptive_tolerances_are_checked(options, match):
    with pytest.raises(ValueError, match=match):
        s2.AdaptiveRungeKutta45(**options)


_PENDULUM = s2.models.spherical_pendulum
_TOO_LARGE = {"m": 1.0, "r": 1.0, "g": 9.81}, np.array([[np.sin(0.3), 0.0, np.cos(0.3)]]), np.array([[0.0, 1.0, 0.0]])


@pytest.mark.parametrize(
    "integrator, condition",
    [
        (
            s2.VariationalIntegrator(),
            r"too large for VariationalIntegrator: no rotation solves the Cayley equation \(3\.16\)",
        ),
        (s2.Rattle(), r"too large for Rattle: RATTLE's position constraints \|q_\{i,k\+1\}\|² = 1"),
        (s2.StormerVerlet(), r"too large for StormerVerlet: the quadratic .* for s = \|v_\{n\+1/2\}\|²"),
        (
            s2.ExplicitVariationalIntegrator(),
            r"too large for ExplicitVariationalIntegrator: 1 − \|a_i\|² < 0 in \(3\.17\)",
        ),
    ],
)
def test_a_step_too_large_is_explained_by_the_integrators_own_condition(integrator, condition):
    """A pendulum turning 2 rad in one step: each integrator names why its own step fails (the
    implicit VI's and RATTLE's messages used to explain the explicit VI's (3.17))."""
    params, q0, omega0 = _TOO_LARGE
    with pytest.raises(s2.SimulationError, match=condition) as error:
        s2.simulate(_PENDULUM.lagrangian, q0, omega0, params, dt=2.0, num_steps=2, integrator=integrator)
    if not isinstance(integrator, s2.ExplicitVariationalIntegrator):
        assert "(3.17)" not in str(error.value) and "ExplicitVariationalIntegrator" not in str(error.value)
    # the same message from the host check of a compiled run
    run = jax.jit(
        lambda q: s2.simulate(_PENDULUM.lagrangian, q, omega0, params, dt=2.0, num_steps=2, integrator=integrator)
    )
    with pytest.raises(jax.errors.JaxRuntimeError, match=condition):
        jax.block_until_ready(run(jnp.asarray(q0)))


@pytest.mark.slow
def test_traced_params_with_static_leaves_run():
    """The abstract evaluation that names a missing key (above) leaves the static leaves of params
    as they are: the coupled pendula read their `connections` (a tuple of index pairs) with numpy,
    under jit too (a tracer there was a TracerArrayConversionError)."""
    model = s2.models.coupled_spherical_pendula
    params = model.paper_params()
    q0, omega0 = model.paper_state()
    run = jax.jit(
        lambda k: s2.simulate(model.lagrangian, q0, omega0, dict(params, spring_constants=k), dt=1e-3, num_steps=5)
    )
    traced = run(jnp.asarray(params["spring_constants"]))
    eager = s2.simulate(model.lagrangian, q0, omega0, params, dt=1e-3, num_steps=5)
    assert traced.result == s2.RESULTS.successful
    np.testing.assert_allclose(traced.q, eager.q, rtol=0, atol=1e-15)
