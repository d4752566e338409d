"""General Lagrangians on (S²)ⁿ: `simulate` on systems, the general variational integrator,
its dispatch, and the models with gyroscopic terms or configuration-dependent inertia."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import s2jax as s2

dsp = s2.models.double_spherical_pendulum
rotating = s2.models.rotating_spherical_pendulum
monopole = s2.models.monopole_particle
ellipsoid = s2.models.ellipsoid_pendulum
GENERAL_MODELS = {"rotating": rotating, "monopole": monopole, "ellipsoid": ellipsoid}
Q0, OMEGA0 = dsp.paper_state()


def test_simulate_takes_a_system_bitwise_as_its_lagrangian():
    params = dsp.paper_params()
    options = dict(dt=0.01, num_steps=20)
    by_function = s2.simulate(dsp.lagrangian, Q0, OMEGA0, params, **options)
    by_system = s2.simulate(s2.LagrangianSystem(dsp.lagrangian), Q0, OMEGA0, params, **options)
    np.testing.assert_array_equal(by_system.q, by_function.q)
    np.testing.assert_array_equal(by_system.omega, by_function.omega)
    force = s2.Force(lambda t, q, w, u, p: 0.1 * q[:, ::-1], depends_on_velocity=False)
    forced = s2.simulate(dsp.lagrangian, Q0, OMEGA0, params, force=force, **options)
    forced_system = s2.simulate(s2.LagrangianSystem(dsp.lagrangian, force), Q0, OMEGA0, params, **options)
    np.testing.assert_array_equal(forced_system.q, forced.q)
    assert not np.array_equal(forced.q, by_function.q)


def test_a_system_with_a_second_force_is_an_error():
    force = s2.Force(lambda t, q, w, u, p: jnp.zeros_like(q), depends_on_velocity=False)
    with pytest.raises(ValueError, match="a system carries its own force"):
        s2.simulate(s2.LagrangianSystem(dsp.lagrangian), Q0, OMEGA0, dsp.paper_params(), dt=0.01, num_steps=2,
                    force=force)


def test_a_system_of_the_wrong_form_is_still_checked():
    def anisotropic(q, qdot, p):
        return 0.5 * jnp.sum(jnp.array([[1.0, 2.0, 3.0]]) * qdot**2) + p["g"] * jnp.sum(q[:, 2])

    with pytest.raises(ValueError, match="not M ⊗ I₃"):
        s2.simulate(s2.LagrangianSystem(anisotropic), Q0, OMEGA0, {"g": 9.81}, dt=0.01, num_steps=2)


# ---------------------------------------------------------------------------------------------
# An independent reference: Euler–Lagrange equations in spherical coordinates, scipy DOP853.
# The chart (θ, φ) ↦ (cos θ, sin θ cos φ, sin θ sin φ) has its poles at ±e₁, away from the
# motions tested (each test asserts sin θ > 0.2 along the reference).


def _chart(x):
    theta, phi = x[0::2], x[1::2]
    return jnp.stack([jnp.cos(theta), jnp.sin(theta) * jnp.cos(phi), jnp.sin(theta) * jnp.sin(phi)], axis=-1)


def _reference(lagrangian, params, q0, omega0, times):
    """(q at `times`, min sin θ) by solve_ivp(DOP853, rtol = atol = 1e-12) in the chart."""
    params = {k: jnp.asarray(v) for k, v in params.items()}

    def coordinate_lagrangian(x, xdot):
        q, qdot = jax.jvp(_chart, (x,), (xdot,))
        return lagrangian(q, qdot, params)

    @jax.jit
    def rhs(z):
        x, xdot = jnp.split(z, 2)
        mass = jax.hessian(coordinate_lagrangian, argnums=1)(x, xdot)
        mixed = jax.jacfwd(jax.grad(coordinate_lagrangian, argnums=1), argnums=0)(x, xdot)
        force = jax.grad(coordinate_lagrangian, argnums=0)(x, xdot) - mixed @ xdot
        return jnp.concatenate([xdot, jnp.linalg.solve(mass, force)])

    q0 = np.asarray(q0)
    x0 = np.stack([np.arccos(q0[:, 0]), np.arctan2(q0[:, 2], q0[:, 1])], axis=-1).reshape(-1)
    basis = np.asarray(jax.jacfwd(_chart)(jnp.asarray(x0))).reshape(-1, x0.size)
    qdot0 = np.cross(np.asarray(omega0), q0).reshape(-1)
    xdot0 = np.linalg.lstsq(basis, qdot0, rcond=None)[0]
    np.testing.assert_allclose(basis @ xdot0, qdot0, atol=1e-13)
    solution = solve_ivp(
        lambda t, z: np.asarray(rhs(jnp.asarray(z))), (times[0], times[-1]), np.concatenate([x0, xdot0]),
        method="DOP853", rtol=1e-12, atol=1e-12, t_eval=times, dense_output=True,
    )
    assert solution.success
    dense = solution.sol(np.linspace(times[0], times[-1], 400))
    min_sin = float(np.min(np.abs(np.sin(dense[: x0.size : 2]))))
    return np.asarray(jax.vmap(_chart)(jnp.asarray(solution.y[: x0.size].T))), min_sin


@pytest.mark.parametrize("name", list(GENERAL_MODELS))
@pytest.mark.slow
def test_general_vi_is_second_order_against_a_coordinate_reference(name):
    module = GENERAL_MODELS[name]
    q0, omega0 = module.paper_state()
    params = module.paper_params()
    horizon = 1.0
    reference, min_sin = _reference(module.lagrangian, params, q0, omega0, np.array([0.0, horizon]))
    assert min_sin > 0.2
    steps = [25, 50, 100, 200]
    errors = []
    for num_steps in steps:
        sol = s2.simulate(module.lagrangian, q0, omega0, params, dt=horizon / num_steps, num_steps=num_steps,
                          save_every=num_steps)
        assert sol.integrator == "GeneralVariationalIntegrator"
        np.testing.assert_allclose(np.linalg.norm(sol.q, axis=-1), 1.0, rtol=0, atol=1e-14)
        errors.append(np.max(np.abs(sol.q[-1] - reference[-1])))
    slope = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert -2.15 < slope < -1.85, (errors, slope)
    assert errors[-1] < 1e-3


def _velocity(sol):
    return jnp.cross(sol.omega, sol.q)


@pytest.mark.slow
def test_momentum_maps_of_symmetries_are_exact():
    """Rotations about e₃ leave L_d invariant for both models: J₃ is conserved to round-off."""
    for module, momentum in [(rotating, rotating.vertical_momentum), (monopole, monopole.poincare_vector)]:
        q0, omega0 = module.paper_state()
        params = {k: jnp.asarray(v) for k, v in module.paper_params().items()}
        sol = s2.simulate(module.lagrangian, q0, omega0, params, dt=0.05, num_steps=2000, save_every=10)
        j = np.asarray(momentum(sol.q, _velocity(sol), params))
        vertical = j if j.ndim == 1 else j[:, 0, 2]
        np.testing.assert_allclose(vertical, vertical[0], rtol=0, atol=5e-13 * max(1.0, abs(vertical[0])))
    # J₁, J₂ of the monopole belong to rotations that move the Dirac string (L changes by a total
    # derivative the trapezoidal rule does not integrate exactly): conserved to O(h²), not exactly.
    q0, omega0 = monopole.paper_state()
    params = {k: jnp.asarray(v) for k, v in monopole.paper_params().items()}
    drifts = []
    for dt in (0.02, 0.01):
        sol = s2.simulate(monopole.lagrangian, q0, omega0, params, dt=dt, num_steps=round(20 / dt), save_every=10)
        j = np.asarray(monopole.poincare_vector(sol.q, _velocity(sol), params))[:, 0]
        drifts.append(np.max(np.abs(j - j[0])))
    assert drifts[0] < 5e-3 and 3.0 < drifts[0] / drifts[1] < 5.0, drifts


@pytest.mark.slow
def test_jacobi_integral_is_bounded_over_1e5_steps():
    q0, omega0 = rotating.paper_state()
    params = rotating.paper_params()
    sol = s2.simulate(rotating.lagrangian, q0, omega0, params, dt=0.02, num_steps=100_000, save_every=100)
    system = s2.GeneralLagrangianSystem(rotating.lagrangian)
    args = system.prepare(sol.q[0], {k: jnp.asarray(v) for k, v in params.items()})
    energy = np.asarray(jax.vmap(lambda q, w: system.energy(q, w, args))(sol.q, sol.omega))
    error = np.abs(energy - energy[0])
    # An O(h²) oscillation without drift: the last tenth is no worse than the first.
    assert np.max(error) < 2e-3 * abs(energy[0])
    assert np.max(error[-100:]) < 1.5 * np.max(error[:100]) + 1e-12
    np.testing.assert_allclose(np.linalg.norm(sol.q, axis=-1), 1.0, rtol=0, atol=1e-13)


FORM_2_2_MODELS = ["spherical_pendulum", "double_spherical_pendulum", "chain_pendulum", "coupled_spherical_pendula",
                   "n_body_on_sphere", "elastic_rod", "magnetic_dipoles", "lennard_jones_on_sphere"]


@pytest.mark.parametrize("name", FORM_2_2_MODELS)
@pytest.mark.slow
def test_general_vi_reproduces_the_2_2_vi(name):
    module = getattr(s2.models, name)
    # The paper set-ups (004's h = 0.2 for the spherical pendulum; the stiff rod, shortened to
    # 5 elements as in test_models, needs h = 1e-4), and the Lennard-Jones molecules of one
    # subdivision of the icosahedron (42, not the paper's 642: the general VI's dense Newton
    # solve of 3n unknowns was most of the suite's slowest test, and 42 exercise the same code).
    sizes = {"chain_pendulum": 3, "elastic_rod": 5, "lennard_jones_on_sphere": 1}
    q0, omega0 = module.paper_state(*[sizes[name]] if name in sizes else [])
    params = module.paper_params(*[sizes[name]] if name in sizes else [])
    dt = {"spherical_pendulum": 0.2, "elastic_rod": 1e-4}.get(name, 0.01)
    options = dict(dt=dt, num_steps=10)
    # The implicit VI (3.10)–(3.13) explicitly: for a diagonal M the default is the explicit one.
    special = s2.simulate(module.lagrangian, q0, omega0, params, integrator=s2.VariationalIntegrator(), **options)
    general = s2.simulate(module.lagrangian, q0, omega0, params, integrator=s2.GeneralVariationalIntegrator(),
                          **options)
    assert special.integrator == "VariationalIntegrator"
    assert general.integrator == "GeneralVariationalIntegrator"
    # The same equations (trapezoidal L_d is (3.1)) solved by different Newton iterations:
    # agreement to the solver tolerance, 1e-12, times the 10 steps.
    scale = 1.0 + np.max(np.abs(special.omega))
    np.testing.assert_allclose(general.q, special.q, rtol=0, atol=1e-11)
    np.testing.assert_allclose(general.omega, special.omega, rtol=0, atol=1e-11 * scale)


@pytest.mark.slow
def test_continuous_equations_and_legendre_maps_match_the_2_2_system():
    params = {k: jnp.asarray(v) for k, v in dsp.paper_params().items()}
    q, omega = s2.random_state(jax.random.PRNGKey(3), 2)
    special = s2.LagrangianSystem(dsp.lagrangian)
    general = s2.GeneralLagrangianSystem(dsp.lagrangian)
    args = s2.SystemArgs(params)
    t = jnp.zeros(())
    expected = special.angular_acceleration(t, q, omega, args)
    np.testing.assert_allclose(general.angular_acceleration(t, q, omega, args), expected, rtol=0,
                               atol=1e-12 * float(jnp.max(jnp.abs(expected))))
    p = general.momentum(q, omega, args)
    np.testing.assert_allclose(p, special.momentum(q, omega, args), rtol=0, atol=1e-12)
    np.testing.assert_allclose(general.angular_velocity(q, p, args), omega, rtol=0, atol=1e-12)
    np.testing.assert_allclose(general.energy(q, omega, args), special.energy(q, omega, args), rtol=1e-14)
    np.testing.assert_allclose(general.inertia(q, args), dsp.inertia_matrix(params), rtol=1e-14)


@pytest.mark.slow
def test_continuous_equations_of_the_ellipsoid_pendulum_match_the_coordinate_reference():
    """ω̇ of 001 (11) by autodiff against ẍ of the chart: q̈ = ω̇ × q + ω × q̇ mapped back."""
    params = {k: jnp.asarray(v) for k, v in ellipsoid.paper_params().items()}
    q, omega = ellipsoid.paper_state()
    system = s2.GeneralLagrangianSystem(ellipsoid.lagrangian)
    omega_dot = system.angular_acceleration(jnp.zeros(()), jnp.asarray(q), jnp.asarray(omega), s2.SystemArgs(params))
    qdot = np.cross(omega, q)
    acceleration = np.cross(omega_dot, q) + np.cross(omega, qdot)
    # Finite differences of the coordinate reference over a short time give q̈(0).
    times = np.array([-1e-3, 0.0, 1e-3])
    forward, _ = _reference(ellipsoid.lagrangian, ellipsoid.paper_params(), q, omega, times[1:])
    backward, _ = _reference(ellipsoid.lagrangian, ellipsoid.paper_params(), q, -omega, times[1:])
    central = (forward[-1] + backward[-1] - 2 * np.asarray(q)) / 1e-6
    np.testing.assert_allclose(acceleration, central, rtol=0, atol=1e-5 * np.max(np.abs(acceleration)))


def test_a_step_back_undoes_a_step():
    params = {k: jnp.asarray(v) for k, v in ellipsoid.paper_params().items()}
    q0, omega0 = (jnp.asarray(x) for x in ellipsoid.paper_state())
    system = s2.GeneralLagrangianSystem(ellipsoid.lagrangian)
    integrator = s2.GeneralVariationalIntegrator()
    args = system.prepare(q0, params)
    t, dt = jnp.zeros(()), jnp.asarray(0.05)
    state = integrator.init(system, t, (q0, omega0), args)
    y1, state, result = integrator.step(system, t, dt, (q0, omega0), args, state)
    assert result == s2.RESULTS.successful
    (q, omega), _, result = integrator.step(system, t + dt, -dt, y1, args, state)
    assert result == s2.RESULTS.successful
    assert np.max(np.abs(y1[0] - q0)) > 1e-2
    np.testing.assert_allclose(q, q0, rtol=0, atol=1e-13)
    np.testing.assert_allclose(omega, omega0, rtol=0, atol=1e-12)


@pytest.mark.slow
def test_gradients_match_central_differences():
    q0, omega0 = rotating.paper_state()
    base = rotating.paper_params()
    weights = jnp.array([[1.0, -2.0, 0.5]])

    def loss(rate, scale, adjoint):
        params = dict(base, Omega=rate)
        # Under jax.grad the params are traced, so the form of L cannot be checked before
        # compiling: the general system is named explicitly (simulate's docstring).
        system = s2.GeneralLagrangianSystem(rotating.lagrangian)
        sol = s2.simulate(system, q0, scale * omega0, params, dt=0.02, num_steps=50, adjoint=adjoint, save_every=50)
        return jnp.sum(weights * sol.q[-1]) + jnp.sum(weights * sol.omega[-1])

    rate, scale = jnp.asarray(2.0), jnp.asarray(1.0)
    eps = 1e-6
    central = [
        (loss(rate + eps, scale, s2.DirectAdjoint()) - loss(rate - eps, scale, s2.DirectAdjoint())) / (2 * eps),
        (loss(rate, scale + eps, s2.DirectAdjoint()) - loss(rate, scale - eps, s2.DirectAdjoint())) / (2 * eps),
    ]
    for adjoint in (s2.DirectAdjoint(), s2.ReversibleAdjoint()):
        grads = jax.grad(loss, argnums=(0, 1))(rate, scale, adjoint)
        for grad, fd in zip(grads, central):
            assert abs(fd) > 1e-2
            # central differences with eps = 1e-6 carry ~1e-9 relative round-off
            np.testing.assert_allclose(grad, fd, rtol=1e-6)


def _skewed(q, qdot, p):
    """Anisotropic inertia plus a gyroscopic term: no (2.2) structure at all."""
    return 0.5 * jnp.sum(jnp.array([[1.0, 2.0, 3.0]]) * qdot**2) + 0.3 * jnp.sum(qdot * q[:, ::-1]) + p["g"] * jnp.sum(
        q[:, 2]
    )


@pytest.mark.slow
def test_dispatch_picks_the_integrator_and_says_so():
    options = dict(dt=0.01, num_steps=4)
    assert s2.simulate(dsp.lagrangian, Q0, OMEGA0, dsp.paper_params(), **options).integrator == "VariationalIntegrator"
    general = s2.simulate(_skewed, Q0, OMEGA0, {"g": 9.81}, **options)
    assert general.integrator == "GeneralVariationalIntegrator"
    # Integrators of the equations of motion run a non-(2.2) L as a GeneralLagrangianSystem.
    rk4 = s2.simulate(_skewed, Q0, OMEGA0, {"g": 9.81}, integrator=s2.RungeKutta4(), **options)
    assert rk4.integrator == "RungeKutta4"
    # The same flow: the VI's O(h²) error at h = 0.01 over 0.04 s is ~1e-5 (RK4's far smaller).
    np.testing.assert_allclose(rk4.q, general.q, rtol=0, atol=5e-5)
    by_system = s2.simulate(s2.GeneralLagrangianSystem(_skewed), Q0, OMEGA0, {"g": 9.81}, **options)
    np.testing.assert_array_equal(by_system.q, general.q)
    assert by_system.integrator == "GeneralVariationalIntegrator"
    # A (2.2) system handed to the general integrator runs as a GeneralLagrangianSystem.
    lagrangian_system = s2.simulate(s2.LagrangianSystem(dsp.lagrangian), Q0, OMEGA0, dsp.paper_params(),
                                    integrator=s2.GeneralVariationalIntegrator(), **options)
    assert lagrangian_system.integrator == "GeneralVariationalIntegrator"


@pytest.mark.parametrize(
    "integrator", [s2.VariationalIntegrator(), s2.ExplicitVariationalIntegrator(), s2.Rattle(),
                   s2.Composition(s2.VariationalIntegrator(), order=4)]
)
def test_integrators_of_2_2_reject_other_lagrangians(integrator):
    with pytest.raises(ValueError, match=rf"not M ⊗ I₃.*\n{type(integrator).__name__} needs that form"):
        s2.simulate(_skewed, Q0, OMEGA0, {"g": 9.81}, dt=0.01, num_steps=2, integrator=integrator)
    with pytest.raises(ValueError, match="needs a Lagrangian of the form \\(2.2\\)"):
        s2.simulate(s2.GeneralLagrangianSystem(_skewed), Q0, OMEGA0, {"g": 9.81}, dt=0.01, num_steps=2,
                    integrator=integrator)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="q0 of body 1 is not a unit vector"):
        s2.simulate(_skewed, np.array([[1.0, 0, 0], [0, 0, 1.01]]), OMEGA0 * 0, {"g": 9.81}, dt=0.01, num_steps=2)

    def singular(q, qdot, p):  # no kinetic energy along e₁: not regular
        return 0.5 * jnp.sum(qdot[:, 1:] ** 2) + jnp.sum(q[:, 2])

    # Refused before compiling (issue 29; it used to fail as step 0 of the general VI)
    with pytest.raises(ValueError, match=r"on the tangent spaces .* smallest eigenvalue is 0\.000e\+00"):
        s2.simulate(singular, Q0, OMEGA0, None, dt=0.01, num_steps=2)
    with pytest.raises(ValueError, match="a system carries its own force"):
        s2.simulate(s2.GeneralLagrangianSystem(_skewed), Q0, OMEGA0, {"g": 9.81}, dt=0.01, num_steps=2,
                    force=lambda t, q, w, u, p: q)


@pytest.mark.slow
def test_forces_enter_as_in_the_discrete_lagrange_d_alembert_principle():
    """A constant force F equals the potential −F·q in L: h/2 (f_k + f_{k+1}) is the
    trapezoidal rule's h/2 (∇(F·q)(q_k) + ∇(F·q)(q_{k+1})) exactly. A damping force −c q̇ makes
    the Jacobi integral fall, as RK4 on the same forced equations does."""
    q0, omega0 = rotating.paper_state()
    params = rotating.paper_params()
    push = jnp.array([[0.7, -0.2, 0.0]])
    options = dict(dt=0.02, num_steps=200, save_every=10)
    forced = s2.simulate(rotating.lagrangian, q0, omega0, params, force=s2.Force(
        lambda t, q, w, u, p: push, depends_on_velocity=False), **options)

    def pushed(q, qdot, p):
        return rotating.lagrangian(q, qdot, p) + jnp.sum(push * q)

    potential = s2.simulate(pushed, q0, omega0, params, **options)
    assert forced.integrator == potential.integrator == "GeneralVariationalIntegrator"
    np.testing.assert_allclose(forced.q, potential.q, rtol=0, atol=1e-12)
    assert np.max(np.abs(forced.q - s2.simulate(rotating.lagrangian, q0, omega0, params, **options).q)) > 1e-2

    damping = s2.Force(lambda t, q, w, u, p: -0.3 * jnp.cross(w, q))
    system = s2.GeneralLagrangianSystem(rotating.lagrangian, damping)
    damped = s2.simulate(system, q0, omega0, params, **options)
    rk4 = s2.simulate(system, q0, omega0, params, integrator=s2.RungeKutta4(), dt=0.002, num_steps=2000,
                      save_every=100)
    args = system.prepare(damped.q[0], {k: jnp.asarray(v) for k, v in params.items()})
    energy = np.asarray(jax.vmap(lambda q, w: system.energy(q, w, args))(damped.q, damped.omega))
    reference = np.asarray(jax.vmap(lambda q, w: system.energy(q, w, args))(rk4.q, rk4.omega))
    assert np.all(np.diff(reference) < 0)
    # The VI's O(h²) error at h = 0.02 against RK4 at h = 0.002 (error ~1e-9).
    np.testing.assert_allclose(energy, reference, rtol=0, atol=2e-3 * abs(reference[0]))
    np.testing.assert_allclose(damped.q, rk4.q, rtol=0, atol=5e-3)
