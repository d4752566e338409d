"""Forces and controls in `simulate`: 001 §V's chain against an independent Cartesian solve.

The chain pendulum (001 §V, n = 3) with a pivot torque τ and a tip force d is simulated by
every integrator and compared with `cartesian_chain_reference` (point masses on rods with
Lagrange multipliers, scipy DOP853 at 1e-12), which shares nothing with s2jax's formulation.
"""

import functools

import cartesian_chain_reference as cartesian
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax.models import chain_pendulum as chain

N_LINKS = 3
PARAMS = chain.paper_params(N_LINKS)  # m_i = 1, l_i = 9.81, g = 9.81
TORQUE = np.array([0.0, 40.0, 10.0])  # N·m, ~0.14 of the chain's m g l_1 Σm
TIP = np.array([3.0, -2.0, 1.0])  # N
HORIZON = 2.0


@functools.cache
def _reference(n):
    q0, omega0 = chain.paper_state(n)
    params = chain.paper_params(n)
    return cartesian.solve(q0, omega0, params["masses"], params["lengths"], params["g"], lambda t: TORQUE, TIP, HORIZON)


def _run(dt, integrator=s2.VariationalIntegrator(), force=None, n=N_LINKS):
    q0, omega0 = chain.paper_state(n)
    params = chain.paper_params(n)
    num_steps = round(HORIZON / dt)
    force = chain.base_torque_and_tip_force(params, TIP) if force is None else force
    return s2.simulate(
        chain.lagrangian, q0, omega0, params, dt=dt, num_steps=num_steps, integrator=integrator, force=force,
        controls=np.tile(TORQUE, (num_steps, 1)), save_every=num_steps,
    )


def _error(sol, n=N_LINKS):
    q_ref, omega_ref = _reference(n)
    return max(float(np.max(np.abs(sol.q[-1] - q_ref))), float(np.max(np.abs(sol.omega[-1] - omega_ref))))


@pytest.mark.slow
def test_forced_variational_integrator_is_second_order():
    """Errors at T = 2 s for h = 0.02, 0.01, 0.005: log–log slope 2 ± 0.1."""
    steps = np.array([0.02, 0.01, 0.005])
    errors = [_error(_run(float(dt))) for dt in steps]
    slope = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert abs(slope - 2.0) < 0.1, (slope, errors)
    assert errors[-1] < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize(
    ("integrator", "n"),
    [(s2.RungeKutta4(), 3), (s2.RKMK4(), 3), (s2.CommutatorFreeRK4(), 3), (s2.LieEulerHeun(), 3),
     (s2.Composition(s2.VariationalIntegrator()), 3), (s2.ExplicitVariationalIntegrator(), 1), (s2.Rattle(), 1),
     (s2.StormerVerlet(), 1), (s2.DiscreteHamelIntegrator(), 1)],
    ids=lambda x: type(x).__name__ if not isinstance(x, int) else f"n{x}",
)
def test_every_integrator_takes_the_forces_at_its_order(integrator, n):
    """Halving h divides the error by 2^order (within a factor 1.5 of it).

    Integrators that need a diagonal inertia run the single pendulum (n = 1) with the same loads.
    """
    errors = [_error(_run(dt, integrator, n=n), n) for dt in (0.01, 0.005)]
    ratio = errors[0] / errors[1]
    assert 2**integrator.order / 1.5 < ratio < 2**integrator.order * 1.5, (errors, ratio)


@pytest.mark.slow
def test_moments_printed_in_001_are_not_the_generalized_forces():
    """001 §V prints f₁ = τ + l₁ S(q₁) d, f_j = l_j S(q_j) d (moments); they miss the reference by O(1).

    Ours (f₁ = τ × q₁ + l₁ d, f_j = l_j d) agree with it to 1e-4 at h = 0.005 (the second-order
    test above); the printed ones are off by more than 0.1 in q at T = 2 s.
    """
    lengths = jnp.asarray(PARAMS["lengths"])

    def printed(t, q, omega, u, params):
        return (lengths[:, None] * jnp.cross(q, jnp.asarray(TIP)[None, :])).at[0].add(u)

    assert _error(_run(0.005, force=s2.Force(printed, depends_on_velocity=False))) > 0.1
    assert _error(_run(0.005)) < 1e-4


def _energy(sol):
    return np.asarray(s2.energy(chain.lagrangian, sol.q, sol.omega, PARAMS))


def _power(force, t, q, omega, u):
    """Σ_i f_i·q̇_i, q̇_i = ω_i × q_i."""
    return jnp.sum(force(t, q, omega, u, PARAMS) * jnp.cross(omega, q), axis=(-2, -1))


@pytest.mark.slow
def test_work_energy_balance_is_second_order():
    """E_N − E₀ equals the trapezoidal work Σ_k h/2 (P_k + P_{k+1}) (both with u_k) to O(h²).

    A damped chain with a time-varying pivot torque (zero-order hold of a smooth u(t)): the
    energy balance defect shrinks by 4 ± 0.6 per halving of h over three halvings.
    """
    q0, omega0 = chain.paper_state(N_LINKS)
    force = s2.forces.PivotTorque(0) + s2.forces.LinearDamping(jnp.array([40.0, 20.0, 10.0]))
    defects = []
    for dt in (0.04, 0.02, 0.01, 0.005):
        num_steps = round(HORIZON / dt)
        t = dt * np.arange(num_steps)
        controls = np.stack([30 * np.sin(2 * t), 20 * np.cos(3 * t), 5 * t], axis=1)
        sol = s2.simulate(chain.lagrangian, q0, omega0, PARAMS, dt=dt, num_steps=num_steps, force=force,
                          controls=controls)
        power = jax.vmap(_power, in_axes=(None, 0, 0, 0, 0))
        start = power(force, sol.t[:-1], sol.q[:-1], sol.omega[:-1], controls)
        end = power(force, sol.t[1:], sol.q[1:], sol.omega[1:], controls)
        work = float(jnp.sum(0.5 * dt * (start + end)))
        energy = _energy(sol)
        assert abs(work) > 50.0  # the forces do real work (|E₀| ≈ 190)
        defects.append(abs(energy[-1] - energy[0] - work))
    ratios = np.array(defects[:-1]) / np.array(defects[1:])
    assert np.all(np.abs(ratios - 4.0) < 0.6), (defects, ratios)


@pytest.mark.slow
@pytest.mark.parametrize("integrator", [s2.VariationalIntegrator(), s2.RungeKutta4()], ids=lambda i: type(i).__name__)
def test_zero_controls_give_the_unforced_run(integrator):
    q0, omega0 = chain.paper_state(N_LINKS)
    forced = s2.simulate(chain.lagrangian, q0, omega0, PARAMS, dt=0.01, num_steps=100, integrator=integrator,
                         force=s2.forces.PivotTorque(0), controls=np.zeros((100, 3)))
    free = s2.simulate(chain.lagrangian, q0, omega0, PARAMS, dt=0.01, num_steps=100, integrator=integrator)
    # Not bitwise: with XLA's CPU loops compiled as one function each (s2jax/_jit.py), LLVM may
    # contract a·b + 0 into a fused multiply–add in one program and not in the other, so the
    # two runs may differ in the last bit at some step (for RK4 1.1e-16 in ω after 100 steps;
    # for the VI, whose lazy steps leave ω to the saves, 3e-15 in ω from step 45 on). This
    # motion amplifies such differences: q₀ moved by 1e-16 gives q 5e-14 and ω 1.3e-13 apart
    # after 100 steps (measured). So: round-off, amplified, within a few times that.
    np.testing.assert_allclose(forced.q, free.q, rtol=0, atol=2e-13)
    np.testing.assert_allclose(forced.omega, free.omega, rtol=0, atol=5e-13)


def _terminal_loss(sol):
    return jnp.sum(sol.q[-1] * jnp.array([[0.3, -0.2, 1.0]])) + 0.01 * jnp.sum(sol.omega[-1] ** 2)


def _central_difference(fn, x, direction, eps=1e-3):
    """(fn(x + εd) − fn(x − εd)) / 2ε.

    The loss carries Newton's stopping noise (~1e-13), which a step ε adds as ~1e-13/ε: with
    ε = 1e-5 that alone is ~1e-8, as large as the directional derivatives here (~1e-4). ε = 1e-3
    keeps it ~1e-10, and the O(ε²) truncation is below that on these smooth losses (measured:
    ε = 1e-2 and 1e-3 agree with the adjoints to 1e-10 relative).
    """
    return (fn(x + eps * direction) - fn(x - eps * direction)) / (2 * eps)


@pytest.mark.slow
@pytest.mark.parametrize(
    "adjoint", [s2.DirectAdjoint(), s2.CheckpointedAdjoint(), s2.ReversibleAdjoint()], ids=lambda a: type(a).__name__
)
def test_gradient_in_the_controls_matches_finite_differences(adjoint):
    """d loss / d u along two random directions, against central differences (rtol 1e-6)."""
    q0, omega0 = chain.paper_state(2)
    params = chain.paper_params(2)
    num_steps = 60
    force = chain.base_torque_and_tip_force(params, TIP)

    def loss(controls):
        sol = s2.simulate(chain.lagrangian, q0, omega0, params, dt=0.02, num_steps=num_steps, force=force,
                          controls=controls, adjoint=adjoint, save_every=20)
        return _terminal_loss(sol)

    rng = np.random.default_rng(0)
    controls = jnp.asarray(rng.normal(scale=10.0, size=(num_steps, 3)))
    gradient = jax.grad(loss)(controls)
    for _ in range(2):
        direction = jnp.asarray(rng.normal(size=controls.shape))
        expected = _central_difference(loss, controls, direction)
        assert jnp.vdot(gradient, direction) == pytest.approx(float(expected), rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize(
    "adjoint", [s2.DirectAdjoint(), s2.CheckpointedAdjoint(), s2.StepwiseAdjoint()], ids=lambda a: type(a).__name__
)
def test_gradient_in_the_policy_weights_matches_finite_differences(adjoint):
    """A small equinox MLP u = π(q, ω) as a sampled feedback: d loss / d weights along a random direction."""
    q0, omega0 = chain.paper_state(2)
    params = chain.paper_params(2)
    mlp = eqx.nn.MLP(12, 3, width_size=8, depth=1, activation=jnp.tanh, key=jax.random.PRNGKey(0))
    mlp = jax.tree_util.tree_map(lambda x: x.astype(jnp.float64) if eqx.is_inexact_array(x) else x, mlp)
    weights, structure = eqx.partition(mlp, eqx.is_inexact_array)

    def loss(weights):
        network = eqx.combine(weights, structure)

        def policy(t, q, omega, params):
            return 20.0 * network(jnp.concatenate([q.ravel(), omega.ravel()]))

        sol = s2.simulate(chain.lagrangian, q0, omega0, params, dt=0.02, num_steps=50, force=s2.forces.PivotTorque(0),
                          controls=policy, adjoint=adjoint)
        return _terminal_loss(sol)

    gradient = jax.grad(loss)(weights)
    leaves, treedef = jax.tree_util.tree_flatten(weights)
    rng = np.random.default_rng(1)
    direction = jax.tree_util.tree_unflatten(treedef, [jnp.asarray(rng.normal(size=x.shape)) for x in leaves])
    pairs = zip(jax.tree_util.tree_leaves(gradient), jax.tree_util.tree_leaves(direction))
    along = sum(jnp.vdot(g, d) for g, d in pairs)
    # ε = 1e-4, not 1e-3: through tanh the loss is more curved in the weights, and at 1e-3 the
    # O(ε²) truncation alone is 3e-6 relative.
    expected = (loss(jax.tree_util.tree_map(lambda w, d: w + 1e-4 * d, weights, direction))
                - loss(jax.tree_util.tree_map(lambda w, d: w - 1e-4 * d, weights, direction))) / 2e-4
    assert float(along) == pytest.approx(float(expected), rel=1e-6)


@pytest.mark.slow
def test_reversible_gradient_of_a_forced_run_matches_direct():
    """The tip force d (a field of the force, not of params), the masses (params) and ω₀ of a run
    with controls, differentiated by ReversibleAdjoint and DirectAdjoint (rtol 1e-9), and d's
    gradient against central differences."""
    q0, omega0 = chain.paper_state(2)
    params = chain.paper_params(2)

    def loss(tip, masses, omega0, adjoint):
        force = chain.base_torque_and_tip_force(params, tip)
        sol = s2.simulate(chain.lagrangian, q0, omega0, {**params, "masses": masses}, dt=0.02, num_steps=60,
                          force=force, controls=jnp.ones((60, 3)), adjoint=adjoint, save_every=20)
        return _terminal_loss(sol)

    inputs = (jnp.asarray(TIP), jnp.asarray(params["masses"]), jnp.asarray(omega0))
    direct = jax.grad(loss, argnums=(0, 1, 2))(*inputs, s2.DirectAdjoint())
    reversible = jax.grad(loss, argnums=(0, 1, 2))(*inputs, s2.ReversibleAdjoint())
    for r, d in zip(reversible, direct):
        assert float(jnp.max(jnp.abs(d))) > 0
        # atol: the normal part of ω₀ (at q₀ = e_z for body 2) does not enter the motion, so its
        # gradient is 0 (exactly, by DirectAdjoint); the states rebuilt by steps with −h leave
        # round-off there (1.1e-14 measured, against gradients of order 0.5).
        np.testing.assert_allclose(r, d, rtol=1e-9, atol=1e-13)
    along_x = jnp.array([1.0, 0.0, 0.0])
    expected = _central_difference(lambda x: loss(x, *inputs[1:], s2.DirectAdjoint()), inputs[0], along_x)
    assert float(direct[0][0]) == pytest.approx(float(expected), rel=1e-6)


def _simulate_with(**kwargs):
    q0, omega0 = chain.paper_state(2)
    options = dict(dt=0.01, num_steps=10, force=s2.forces.PivotTorque(0), controls=np.zeros((10, 3)))
    options.update(kwargs)
    return s2.simulate(chain.lagrangian, q0, omega0, chain.paper_params(2), **options)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(controls=np.zeros((9, 3))), "one row per step"),
        (dict(force=None), "without a `force`"),
        (dict(controls=np.full((10, 3), np.nan)), "step 0 is not finite"),
        (dict(controls=np.zeros((10, 2))), "shape \\(3,\\)"),
        (dict(controls=lambda t, q, omega, p: jnp.zeros(3), adjoint=s2.ReversibleAdjoint()), "feedback policy"),
        (dict(integrator=s2.AdaptiveRungeKutta45()), "cannot hold controls"),
        (dict(force=lambda t, q, omega, u, p: jnp.zeros(3)), "must return shape \\(2, 3\\)"),
        (dict(force=s2.forces.LinearDamping(1.0), adjoint=s2.ReversibleAdjoint()), "depends on ω"),
    ],
)
def test_bad_controls_and_forces_are_refused_before_compiling(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _simulate_with(**kwargs)


@pytest.mark.parametrize(
    ("integrator", "force", "message"),
    [
        (s2.AdaptiveRungeKutta45(), s2.forces.PivotTorque(0), "cannot hold controls"),
        (s2.Rattle(), s2.forces.PivotTorque(0) + s2.forces.LinearDamping(1.0), "depends on ω"),
    ],
)
def test_a_control_problem_refuses_what_simulate_refuses_before_compiling(integrator, force, message):
    """A planned problem runs its plan without `simulate`'s checks (`simulate_plan`), so `planned`
    makes them: an integrator that cannot hold controls, or cannot take the force."""
    q0, omega0 = chain.paper_state(2)
    problem = s2.control.Problem(
        chain.lagrangian, chain.paper_params(2), force, 0.01, 10,
        running_cost=lambda t, q, omega, u: jnp.sum(u**2), integrator=integrator,
    )
    with pytest.raises(ValueError, match=message):
        s2.control.solve(problem, q0, omega0, solver=s2.control.ILQR())


@pytest.mark.slow
def test_non_finite_controls_under_jit_give_a_result_code():
    run = jax.jit(lambda controls: _simulate_with(controls=controls, throw=False).result)
    assert run(jnp.zeros((10, 3))) == s2.RESULTS.successful
    assert run(jnp.full((10, 3), jnp.nan)) == s2.RESULTS.invalid_controls
