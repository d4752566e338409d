"""Issue 29: bad inertia is named (eagerly and in the graph, the same diagnosis), a failed run stops
computing and repeats its last good state bitwise, a force's declaration that it ignores ω is checked,
and the reversible adjoint's accuracy is what its docstring says."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2

dsp = s2.models.double_spherical_pendulum
Q0, OMEGA0 = (jnp.asarray(x) for x in dsp.paper_state())
PARAMS = dsp.paper_params()
NOT_DEFINITE = s2.RESULTS.inertia_not_positive_definite


def _constant_inertia(q, qdot, p):
    """L = ½ Σ M_ij q̇_i·q̇_j + g Σ q_i3, M given in params."""
    return 0.5 * jnp.einsum("ij,ia,ja->", p["M"], qdot, qdot) + p["g"] * jnp.sum(q[:, 2])


# The five inertias of issue 29 that the previous release refused up front, with their smallest
# eigenvalue (M of the double pendulum with m₂ = −1: [[0, −96.2], [−96.2, −96.2]]).
BAD_INERTIAS = {
    "m2 = -1": (dsp.lagrangian, dict(PARAMS, m2=-1.0), "-1.557e+02"),
    "m1 = m2 = 0": (dsp.lagrangian, dict(PARAMS, m1=0.0, m2=0.0), "0.000e+00"),
    "singular M": (_constant_inertia, {"M": np.array([[1.0, 1.0], [1.0, 1.0]]), "g": 9.81}, "0.000e+00"),
    "indefinite M": (_constant_inertia, {"M": np.array([[1.0, 2.0], [2.0, 1.0]]), "g": 9.81}, "-1.000e+00"),
    "M = -I": (_constant_inertia, {"M": -np.eye(2), "g": 9.81}, "-1.000e+00"),
}


@pytest.mark.parametrize("name", list(BAD_INERTIAS))
def test_an_inertia_that_is_not_positive_definite_is_named_before_compiling(name):
    lagrangian, params, smallest = BAD_INERTIAS[name]
    with pytest.raises(ValueError, match=rf"not positive definite: its smallest eigenvalue is {re.escape(smallest)}"):
        s2.simulate(lagrangian, Q0, OMEGA0, params, dt=0.01, num_steps=1)


def test_an_inertia_that_is_not_positive_definite_is_a_result_code_in_the_graph():
    """m₂ = −1 traced: the code, and the initial state repeated bitwise (docs/errors.md), not NaN ω."""
    params = {k: jnp.asarray(v) for k, v in dict(PARAMS, m2=-1.0).items()}
    sol = jax.jit(lambda p: s2.simulate(dsp.lagrangian, Q0, OMEGA0, p, dt=0.01, num_steps=4, throw=False))(params)
    assert sol.result == NOT_DEFINITE
    assert int(sol.failed_step) == 0
    np.testing.assert_array_equal(sol.q, jnp.broadcast_to(Q0, sol.q.shape))
    np.testing.assert_array_equal(sol.omega, jnp.broadcast_to(OMEGA0, sol.omega.shape))


def test_the_adaptive_integrator_repeats_the_initial_state_after_a_code_before_the_first_step():
    """The same for AdaptiveRungeKutta45, which returned inf at every save (diffrax's fill) and ran
    its whole solve on the bad inertia."""
    params = {k: jnp.asarray(v) for k, v in dict(PARAMS, m2=-1.0).items()}
    run = jax.jit(
        lambda p: s2.simulate(
            dsp.lagrangian, Q0, OMEGA0, p, dt=0.01, num_steps=4, integrator=s2.AdaptiveRungeKutta45(), throw=False
        )
    )
    sol = run(params)
    assert sol.result == NOT_DEFINITE
    assert int(sol.failed_step) == 0
    np.testing.assert_array_equal(sol.q, jnp.broadcast_to(Q0, sol.q.shape))
    np.testing.assert_array_equal(sol.omega, jnp.broadcast_to(OMEGA0, sol.omega.shape))
    good = run({k: jnp.asarray(v) for k, v in PARAMS.items()})  # the solve still runs when it may
    assert good.result == s2.RESULTS.successful and int(good.failed_step) == -1
    assert not np.array_equal(good.q[-1], good.q[0])


def test_eager_and_traced_diagnoses_of_a_tiny_length_agree():
    """l₁ = 1e-6: M has eigenvalue 1e-12 against entries ~96, singular in float64. Eagerly a
    ValueError naming it; a batch member with it, `inertia_not_positive_definite` (it was
    `not_lagrangian_form` there and a Newton failure of the general VI eagerly)."""
    with pytest.raises(ValueError, match=r"not positive definite: its smallest eigenvalue is 1\.000e-12"):
        s2.simulate(dsp.lagrangian, Q0, OMEGA0, dict(PARAMS, l1=1e-6), dt=0.01, num_steps=1)
    batch = s2.simulate_batch(
        dsp.lagrangian,
        jnp.stack([Q0, Q0]),
        jnp.stack([OMEGA0, OMEGA0]),
        dict(PARAMS, l1=np.array([9.81, 1e-6])),
        params_axis={"m1": None, "m2": None, "l1": 0, "l2": None, "g": None},
        dt=0.01,
        num_steps=2,
        throw=False,
    )
    assert [int(c) for c in batch.result._value] == [s2.RESULTS.successful._value, NOT_DEFINITE._value]


@pytest.mark.slow
def test_a_general_system_has_its_inertia_checked_where_it_starts():
    system = s2.GeneralLagrangianSystem(dsp.lagrangian)
    bad = dict(PARAMS, m2=-1.0)
    with pytest.raises(ValueError, match=r"on the tangent spaces .* smallest eigenvalue is -1\.557e\+02"):
        s2.simulate(system, Q0, OMEGA0, bad, dt=0.01, num_steps=1)
    with pytest.raises(ValueError, match=r"on the tangent spaces .* smallest eigenvalue is -1\.000e\+00"):
        s2.simulate(
            _constant_inertia,
            Q0,
            OMEGA0,
            BAD_INERTIAS["M = -I"][1],
            dt=0.01,
            num_steps=1,
            integrator=s2.GeneralVariationalIntegrator(),
        )
    # In the graph: traced params, or a traced state (checked at each member's own state).
    traced = {k: jnp.asarray(v) for k, v in bad.items()}
    run = jax.jit(lambda p: s2.simulate(system, Q0, OMEGA0, p, dt=0.01, num_steps=2, throw=False).result)
    assert run(traced) == NOT_DEFINITE
    assert run({k: jnp.asarray(v) for k, v in PARAMS.items()}) == s2.RESULTS.successful
    codes = jax.vmap(lambda w: s2.simulate(system, Q0, w, bad, dt=0.01, num_steps=2, throw=False).result._value)(
        jnp.stack([OMEGA0, -OMEGA0])
    )
    assert np.all(np.asarray(codes) == NOT_DEFINITE._value)


def _counting_force(calls):
    """A zero force that counts its evaluations at run time (through a host callback)."""

    def record():
        calls.append(1)

    def force(t, q, omega, u, p):
        jax.debug.callback(record)
        # NaN from t = 0.055 on: step 5 of a run with h = 0.01 fails (non-finite state)
        return jnp.where(t < 0.055, 0.0, jnp.nan) * q

    return s2.Force(force)  # taken to read ω: no eager check of the declaration evaluates it


def test_a_failed_run_stops_computing():
    """After a failure the steps are skipped, not retried from the frozen state: a run failing at
    step 5 of 40 evaluates its force in steps 0–5 only, one with an invalid initial state under jit
    in none (the whole loop ran both before)."""
    calls = []
    force = _counting_force(calls)

    @jax.jit
    def run(q0, dt):
        return s2.simulate(
            dsp.lagrangian,
            q0,
            OMEGA0,
            PARAMS,
            dt=dt,
            num_steps=40,
            save_every=4,
            force=force,
            integrator=s2.RungeKutta4(),
            throw=False,
        )

    failed = run(Q0, 0.01)
    jax.effects_barrier()
    assert failed.result == s2.RESULTS.nonfinite_state and int(failed.failed_step) == 5
    assert len(calls) == 4 * 6  # four stages a step, steps 0…5
    calls.clear()
    invalid = run(Q0.at[0].multiply(2.0), 0.01)
    jax.effects_barrier()
    assert invalid.result == s2.RESULTS.invalid_initial_state
    assert len(calls) == 0


def test_a_failed_implicit_variational_run_repeats_its_last_state_bitwise():
    """q and ω after a failure are the last good state's bits: ω is not recomputed from the
    momentum at the saves (which gave ω₀ to 2.5e-16 after a failure at step 0)."""
    sol = s2.simulate(
        dsp.lagrangian,
        Q0,
        OMEGA0,
        PARAMS,
        dt=0.5,
        num_steps=8,
        save_every=2,
        integrator=s2.VariationalIntegrator(),
        throw=False,
    )
    assert sol.result == s2.RESULTS.step_too_large and int(sol.failed_step) == 0
    np.testing.assert_array_equal(sol.q, jnp.broadcast_to(Q0, sol.q.shape))
    np.testing.assert_array_equal(sol.omega, jnp.broadcast_to(OMEGA0, sol.omega.shape))
    # A failure inside a block (step 5, saves every 2): ω of the frozen state is computed once.
    force = s2.Force(lambda t, q, w, u, p: jnp.where(t < 0.055, 0.0, jnp.nan) * q, depends_on_velocity=False)
    sol = s2.simulate(
        dsp.lagrangian,
        Q0,
        OMEGA0,
        PARAMS,
        dt=0.01,
        num_steps=12,
        save_every=2,
        force=force,
        integrator=s2.VariationalIntegrator(),
        throw=False,
    )
    assert int(sol.failed_step) == 5
    for x in (sol.q, sol.omega):
        np.testing.assert_array_equal(x[3:], jnp.broadcast_to(x[3], x[3:].shape))
        assert np.all(np.isfinite(x)) and not np.array_equal(x[3], x[2])


def test_a_force_declared_to_ignore_omega_that_reads_it_is_an_error():
    damping = s2.Force(lambda t, q, w, u, p: -0.3 * jnp.cross(w, q), depends_on_velocity=False)
    with pytest.raises(ValueError, match=r"declared depends_on_velocity=False, but it reads ω: .*s2jax\.Force\(fn\)"):
        s2.simulate(dsp.lagrangian, Q0, OMEGA0, PARAMS, dt=0.01, num_steps=2, force=damping)
    # An honest declaration runs, and a force that ignores ω may say so.
    honest = s2.Force(damping.fn)
    assert s2.simulate(dsp.lagrangian, Q0, OMEGA0, PARAMS, dt=0.01, num_steps=2, force=honest).result == (
        s2.RESULTS.successful
    )
    tilt = s2.Force(lambda t, q, w, u, p: 0.3 * q[::-1], depends_on_velocity=False)
    assert s2.simulate(dsp.lagrangian, Q0, OMEGA0, PARAMS, dt=0.01, num_steps=2, force=tilt).result == (
        s2.RESULTS.successful
    )


@pytest.mark.slow
def test_reversible_adjoint_gradient_error_is_within_the_documented_multiple_of_its_reconstruction_error():
    """`ReversibleAdjoint`'s docstring: the gradient's relative error was 0.3–530× the error of the
    rebuilt initial state (78 chaotic runs of Example 1). A short chaotic run (10³ steps, where
    round-off has already grown ~10⁵-fold) is accepted, and within that multiple."""
    num_steps = 1000

    def loss(params, adjoint):
        sol = s2.simulate(
            dsp.lagrangian, Q0, OMEGA0, params, dt=0.01, num_steps=num_steps, save_every=num_steps, adjoint=adjoint
        )
        return jnp.sum(sol.q[-1] * jnp.array([[1.0, 2.0, 3.0]])) + 0.1 * jnp.sum(sol.omega[-1])

    params = {k: jnp.asarray(v) for k, v in PARAMS.items()}
    direct, reversible = (
        np.array(jax.tree_util.tree_leaves(jax.grad(loss)(params, adjoint)))
        for adjoint in (s2.DirectAdjoint(), s2.ReversibleAdjoint())
    )
    # The reconstruction error, as the adjoint reports it when it refuses (tolerance 0)
    with pytest.raises((s2.SimulationError, jax.errors.JaxRuntimeError)) as refused:
        jax.block_until_ready(jax.grad(loss)(params, s2.ReversibleAdjoint(tolerance=0.0)))
    reconstruction = float(re.search(r"relative error of ([0-9.e+-]+),", str(refused.value)).group(1))
    assert 1e-14 < reconstruction <= s2.ReversibleAdjoint().tolerance
    error = np.max(np.abs(reversible - direct)) / np.max(np.abs(direct))
    assert error <= 530 * reconstruction, (error, reconstruction)
