"""HamiltonianSystem (001 §IV) and HamiltonianRattle, against independent references.

The closed-form Hamiltonians below are derived here by hand from the models' Lagrangians
(not through s2jax): for the spherical pendulum in a frame rotating at Ω about e₃,
μ = P ∂L/∂q̇ = m r² (q̇ + Ω e₃ × q), so

    H(q, μ) = |μ|²/(2 m r²) − Ω μ·(e₃ × q) − m g r q₃,

non-separable, with e₃·(q × μ) conserved (rotations about e₃); for the charged particle
around a monopole, μ = m q̇ + e P A(q) and H = |μ − e P A(q)|²/(2m).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import s2jax
from s2jax import HamiltonianRattle, HamiltonianSystem, SystemArgs, legendre_transform
from s2jax.models import (
    chain_pendulum,
    double_spherical_pendulum,
    ellipsoid_pendulum,
    monopole_particle,
    rotating_spherical_pendulum,
)

E3 = jnp.array([0.0, 0.0, 1.0])


def rotating_hamiltonian(q, p, params):
    m, r, g, rate = params["m"], params["r"], params["g"], params["Omega"]
    frame = jnp.cross(E3, q)
    return jnp.sum(p**2) / (2 * m * r**2) - rate * jnp.sum(p * frame) - m * g * r * q[0, 2]


def monopole_hamiltonian(q, p, params):
    a = monopole_particle.vector_potential(q, params)
    a = a - jnp.sum(a * q, axis=-1, keepdims=True) * q
    return jnp.sum((p - params["e"] * a) ** 2) / (2 * params["m"])


def _model(module):
    params = jax.tree.map(jnp.asarray, module.paper_params())
    q0, omega0 = (jnp.asarray(x) for x in module.paper_state())
    return params, q0, omega0


def _run(system, integrator, q0, omega0, params, dt, num_steps):
    """(qs, ps, results) of num_steps steps of `integrator`, in one compiled loop."""
    args = SystemArgs(params)

    def body(carry, _):
        y, state = carry
        y, state, result = integrator.step(system, jnp.asarray(0.0), dt, y, args, state)
        return (y, state), (y[0], state.momentum, result._value)

    state = integrator.init(system, jnp.asarray(0.0), (q0, omega0), args)
    _, (qs, ps, results) = jax.lax.scan(body, ((q0, omega0), state), None, length=num_steps)
    return qs, ps, results


def test_legendre_maps_round_trip():
    params, q0, omega0 = _model(monopole_particle)
    system = HamiltonianSystem(monopole_hamiltonian)
    args = SystemArgs(params)
    mu = jax.jit(system.momentum)(q0, omega0, args)
    a = monopole_particle.vector_potential(q0, params)
    expected = params["m"] * jnp.cross(omega0, q0) + params["e"] * (a - jnp.sum(a * q0) * q0)
    np.testing.assert_allclose(mu, expected, atol=1e-14)
    np.testing.assert_allclose(jax.jit(system.angular_velocity)(q0, mu, args), omega0, atol=1e-14)
    assert abs(float(jnp.sum(mu * q0))) < 1e-15
    # H is quadratic in μ, so the Legendre map is inverted by one linear solve: no Newton loop.
    assert "while" not in str(jax.make_jaxpr(system.momentum)(q0, omega0, args))


def _quartic_lagrangian(q, qdot, params):
    """The double pendulum's L plus ε Σ_i |q̇_i|⁴: regular, but ∂L/∂q̇ is not affine in q̇."""
    return double_spherical_pendulum.lagrangian(q, qdot, params) + 0.05 * jnp.sum(jnp.sum(qdot**2, axis=-1) ** 2)


def _lagrangian_with_a_callback(q, qdot, params):
    """The double pendulum's L, calling the host: an effect, which the structural test cannot see
    through, so Newton's loop runs (affine as the map is)."""
    jax.debug.callback(lambda x: None, qdot)
    return double_spherical_pendulum.lagrangian(q, qdot, params)


@pytest.mark.parametrize(
    "module, lagrangian, affine",
    [
        (double_spherical_pendulum, double_spherical_pendulum.lagrangian, True),
        (rotating_spherical_pendulum, rotating_spherical_pendulum.lagrangian, True),
        (double_spherical_pendulum, _quartic_lagrangian, False),
        (double_spherical_pendulum, _lagrangian_with_a_callback, False),
    ],
)
def test_legendre_transform_inverts_the_legendre_map(module, lagrangian, affine):
    """H of `legendre_transform` is L's dual: for a tangent q̇ and μ = (I − q qᵀ) ∂L/∂q̇ (001
    (20)), (I − q qᵀ) ∂H/∂μ(q, μ) = q̇ and H = μ·q̇ − L, eagerly and under `jax.jit`. Where ∂L/∂q̇
    is affine in q̇ (every model) the inverse is one linear solve, no Newton loop in the program;
    for the quartic L, Newton's iterations."""
    params, q, omega = _model(module)
    qdot = 0.7 * jnp.cross(omega, q) + 0.2  # not small, off the tangent plane before projecting
    qdot = s2jax.project_tangent(q, qdot)
    mu = s2jax.project_tangent(q, jax.grad(lagrangian, argnums=1)(q, qdot, params))
    hamiltonian = legendre_transform(lagrangian)

    def dual(q, mu, params):
        value, dhdmu = jax.value_and_grad(hamiltonian, argnums=1)(q, mu, params)
        return value, s2jax.project_tangent(q, dhdmu)

    for value, velocity in (dual(q, mu, params), jax.jit(dual)(q, mu, params)):
        # The affine path is one LU solve (round-off); Newton stops at its tolerance 1e-13.
        np.testing.assert_allclose(velocity, qdot, rtol=0, atol=1e-12)
        np.testing.assert_allclose(value, jnp.sum(mu * qdot) - lagrangian(q, qdot, params), rtol=1e-12)
    program = str(jax.make_jaxpr(dual)(q, mu, params))
    assert ("while" not in program) is affine


@pytest.mark.slow
@pytest.mark.parametrize(
    "module, system_type",
    [
        (double_spherical_pendulum, s2jax.LagrangianSystem),
        (ellipsoid_pendulum, s2jax.GeneralLagrangianSystem),
        (rotating_spherical_pendulum, s2jax.GeneralLagrangianSystem),
    ],
)
def test_legendre_transform_gives_the_lagrangian_vector_field(module, system_type):
    params, q0, omega0 = _model(module)
    lagrangian_system = system_type(module.lagrangian)
    hamiltonian_system = HamiltonianSystem(legendre_transform(module.lagrangian))
    args = SystemArgs(params)

    @jax.jit
    def fields(q, omega):
        mu = hamiltonian_system.momentum(q, omega, args)
        qdot, mudot = hamiltonian_system.hamilton_equations(0.0, q, mu, args)
        qdot_pi, pidot = hamiltonian_system.hamilton_equations_pi(0.0, q, jnp.cross(q, mu), args)
        return (
            mu,
            hamiltonian_system.angular_velocity(q, mu, args),
            hamiltonian_system.angular_acceleration(0.0, q, omega, args),
            hamiltonian_system.energy(q, omega, args),
            (qdot, mudot, qdot_pi, pidot),
        )

    mu, omega_back, omega_dot, energy, (qdot, mudot, qdot_pi, pidot) = fields(q0, omega0)
    np.testing.assert_allclose(mu, lagrangian_system.momentum(q0, omega0, args), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(omega_back, omega0, atol=1e-13)
    reference = lagrangian_system.angular_acceleration(0.0, q0, omega0, args)
    np.testing.assert_allclose(omega_dot, reference, rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(energy, lagrangian_system.energy(q0, omega0, args), rtol=1e-13)
    # (31)–(32) against (23)–(24): π = q × μ, so π̇ = q̇ × μ + q × μ̇.
    np.testing.assert_allclose(qdot_pi, qdot, atol=1e-13)
    np.testing.assert_allclose(pidot, jnp.cross(qdot, mu) + jnp.cross(q0, mudot), rtol=1e-11, atol=1e-11)


def _monopole_reference(q0, qdot0, params, times):
    """m ẍ = e g ẋ × x − m |ẋ|² x (Lorentz force of the monopole plus the constraint force), DOP853."""
    coupling = params["e"] * params["g"] / params["m"]

    def rhs(_, state):
        x, v = state[:3], state[3:]
        return np.concatenate([v, coupling * np.cross(v, x) - np.dot(v, v) * x])

    solution = solve_ivp(rhs, (0.0, times[-1]), np.concatenate([q0, qdot0]), method="DOP853",
                         t_eval=times, rtol=1e-13, atol=1e-13)
    return solution.y[:3].T


@pytest.mark.slow
def test_rattle_second_order_against_scipy():
    params, q0, omega0 = _model(monopole_particle)
    system = HamiltonianSystem(monopole_hamiltonian)
    final_time = 2.0
    reference = _monopole_reference(
        np.asarray(q0[0]), np.asarray(jnp.cross(omega0, q0)[0]), jax.tree.map(float, params), [final_time]
    )[-1]
    run = jax.jit(_run, static_argnums=(0, 1, 6))
    steps = [25, 50, 100, 200]
    errors = []
    for num_steps in steps:
        dt = jnp.asarray(final_time / num_steps)
        qs, _, results = run(system, HamiltonianRattle(), q0, omega0, params, dt, num_steps)
        assert not np.any(results)
        errors.append(float(jnp.max(jnp.abs(qs[-1, 0] - reference))))
    slope = np.polyfit(np.log(final_time / np.array(steps)), np.log(errors), 1)[0]
    assert 1.9 < slope < 2.1, (errors, slope)


def test_energy_bounded_and_symmetry_momentum_conserved():
    """The rotating pendulum, 10⁴ steps of 0.05 s: H bounded at O(h²), e₃·(q × μ) to Newton tolerance."""
    params, q0, omega0 = _model(rotating_spherical_pendulum)
    system = HamiltonianSystem(rotating_hamiltonian)
    qs, ps, results = jax.jit(_run, static_argnums=(0, 1, 6))(
        system, HamiltonianRattle(), q0, omega0, params, jnp.asarray(0.05), 10_000
    )
    assert not np.any(results)
    energy = jax.vmap(rotating_hamiltonian, in_axes=(0, 0, None))(qs, ps, params)
    energy0 = system.energy(q0, omega0, SystemArgs(params))
    drift = jnp.abs(energy - energy0)
    # Bounded, not growing: the second half of the run is no worse than the first (×1.5 for
    # the quasi-periodic oscillation of the modified energy), and small (h² = 2.5e-3).
    assert float(jnp.max(drift)) < 5e-3 * abs(float(energy0))  # measured 2.4e-3 |E₀|
    assert float(jnp.max(drift[5000:])) < 1.5 * float(jnp.max(drift[:5000]))
    vertical = jnp.cross(qs, ps)[:, 0, 2]
    vertical0 = jnp.cross(q0, system.momentum(q0, omega0, SystemArgs(params)))[0, 2]
    assert float(jnp.max(jnp.abs(vertical - vertical0))) < 1e-10
    assert float(jnp.max(jnp.abs(jnp.linalg.norm(qs, axis=-1) - 1.0))) < 1e-14
    assert float(jnp.max(jnp.abs(jnp.sum(qs * ps, axis=-1)))) < 1e-13


@pytest.mark.slow
def test_same_trajectory_as_the_general_variational_integrator():
    """Both methods are of order 2: their difference shrinks ×4 when h halves, energies agree to O(h²)."""
    params, q0, omega0 = _model(rotating_spherical_pendulum)
    system = HamiltonianSystem(rotating_hamiltonian)
    run = jax.jit(_run, static_argnums=(0, 1, 6))
    general = s2jax.GeneralLagrangianSystem(rotating_spherical_pendulum.lagrangian)
    args = SystemArgs(params)
    differences, energy_gaps = [], []
    for num_steps in (100, 200):
        dt = 1.0 / num_steps
        qs, ps, results = run(system, HamiltonianRattle(), q0, omega0, params, jnp.asarray(dt), num_steps)
        assert not np.any(results)
        lagrangian = s2jax.simulate(rotating_spherical_pendulum.lagrangian, q0, omega0, params, dt=dt,
                                    num_steps=num_steps)
        assert lagrangian.integrator == "GeneralVariationalIntegrator"
        differences.append(float(jnp.max(jnp.abs(qs - lagrangian.q[1:]))))
        energy_h = jax.vmap(rotating_hamiltonian, in_axes=(0, 0, None))(qs, ps, params)
        energy_l = jax.vmap(general.energy, in_axes=(0, 0, None))(lagrangian.q[1:], lagrangian.omega[1:], args)
        energy_gaps.append(float(jnp.max(jnp.abs(energy_h - energy_l))))
    assert 3.5 < differences[0] / differences[1] < 4.5, differences
    # The energies of the two runs differ by O(h²) too (each is within O(h²) of the exact one).
    assert 3.0 < energy_gaps[0] / energy_gaps[1] < 5.0, energy_gaps


def test_step_is_symmetric():
    params, q0, omega0 = _model(monopole_particle)
    system = HamiltonianSystem(monopole_hamiltonian)
    integrator = HamiltonianRattle()
    args = SystemArgs(params)

    @jax.jit
    def there_and_back(q, omega):
        state0 = integrator.init(system, 0.0, (q, omega), args)
        y, state, _ = integrator.step(system, jnp.asarray(0.0), jnp.asarray(0.1), (q, omega), args, state0)
        back, back_state, _ = integrator.step(system, jnp.asarray(0.1), jnp.asarray(-0.1), y, args, state)
        return back, back_state.momentum, state0.momentum

    (q, omega), mu, mu0 = there_and_back(q0, omega0)
    np.testing.assert_allclose(q, q0, atol=1e-13)
    np.testing.assert_allclose(mu, mu0, atol=1e-13)


@pytest.mark.slow
def test_runge_kutta_on_the_hamiltonian_system_matches_the_lagrangian():
    """The chain-rule ω̇ lets RungeKutta4 run a HamiltonianSystem: same steps as on the Lagrangian."""
    params, q0, omega0 = _model(rotating_spherical_pendulum)
    general = s2jax.GeneralLagrangianSystem(rotating_spherical_pendulum.lagrangian)
    system = HamiltonianSystem(rotating_hamiltonian)
    args = SystemArgs(params)
    q, omega = jax.vmap(lambda key: s2jax.random_state(key, 1, scale=2.0))(jax.random.split(jax.random.PRNGKey(0), 5))
    accelerations = jax.jit(jax.vmap(lambda x, w: (system.angular_acceleration(0.0, x, w, args),
                                                   general.angular_acceleration(0.0, x, w, args))))
    np.testing.assert_allclose(*accelerations(q, omega), atol=1e-13)
    kwargs = dict(dt=0.01, num_steps=100, integrator=s2jax.RungeKutta4())
    hamiltonian = s2jax.simulate(system, q0, omega0, params, **kwargs)
    lagrangian = s2jax.simulate(rotating_spherical_pendulum.lagrangian, q0, omega0, params, **kwargs)
    # Not to round-off: RK4's stages leave T(S²)ⁿ (|q| − 1 = O(h²) inside a step), where the two
    # systems' ω̇ are different extensions of the same field (equal on it, checked above). The
    # runs differ by ~5e-9 here, far below RK4's own error (~1e-7 at h = 0.01).
    np.testing.assert_allclose(hamiltonian.q, lagrangian.q, atol=1e-8)
    np.testing.assert_allclose(hamiltonian.omega, lagrangian.omega, atol=1e-7)
    rattle = s2jax.simulate(HamiltonianSystem(rotating_hamiltonian), q0, omega0, params, dt=0.01,
                            num_steps=100, integrator=HamiltonianRattle())
    assert rattle.integrator == "HamiltonianRattle"
    # Two order-2/order-4 methods over 1 s at h = 0.01: agree to O(h²).
    assert float(jnp.max(jnp.abs(rattle.q - lagrangian.q))) < 1e-3


@pytest.mark.slow
def test_gradient_matches_finite_differences():
    params, q0, omega0 = _model(rotating_spherical_pendulum)
    system = HamiltonianSystem(rotating_hamiltonian)

    @jax.jit
    def final_height(rate):
        qs, _, _ = _run(system, HamiltonianRattle(), q0, omega0, {**params, "Omega": rate}, jnp.asarray(0.02), 50)
        return qs[-1, 0, 2]

    rate = params["Omega"]
    gradient = jax.grad(final_height)(rate)
    eps = 1e-5
    finite = (final_height(rate + eps) - final_height(rate - eps)) / (2 * eps)
    # Central differences: O(eps²) truncation and O(1e-16/eps) round-off, ~1e-10 here.
    np.testing.assert_allclose(gradient, finite, rtol=1e-7)


@pytest.mark.slow
def test_monopole_poincare_vector():
    """J = q × m q̇ − e g q (conserved by the flow): J₃ exact (rotations about e₃ leave H and
    the constraints invariant), J₁, J₂ to O(h²) (their rotations move the Dirac string of A)."""
    params, q0, omega0 = _model(monopole_particle)
    system = HamiltonianSystem(monopole_hamiltonian)
    args = SystemArgs(params)
    run = jax.jit(_run, static_argnums=(0, 1, 6))
    poincare0 = monopole_particle.poincare_vector(q0, jnp.cross(omega0, q0), params)

    def poincare(qs, ps):
        omegas = jax.vmap(system.angular_velocity, in_axes=(0, 0, None))(qs, ps, args)
        return monopole_particle.poincare_vector(qs, jnp.cross(omegas, qs), params)

    errors = []
    for num_steps in (200, 400):
        qs, ps, results = run(system, HamiltonianRattle(), q0, omega0, params, jnp.asarray(10.0 / num_steps), num_steps)
        assert not np.any(results)
        error = jnp.max(jnp.abs(poincare(qs, ps) - poincare0[None]), axis=(0, 1))
        assert float(error[2]) < 1e-12
        errors.append(float(jnp.max(error[:2])))
    assert 3.5 < errors[0] / errors[1] < 4.5, errors


@pytest.mark.slow
def test_forced_rattle_second_order():
    """A constant force on the rotating pendulum: RATTLE against RK4 on the Lagrangian at h = 1e-3."""
    params, q0, omega0 = _model(rotating_spherical_pendulum)
    push = s2jax.Force(lambda t, q, omega, u, p: jnp.array([[2.0, -1.0, 0.5]]), depends_on_velocity=False)
    reference = s2jax.simulate(
        s2jax.GeneralLagrangianSystem(rotating_spherical_pendulum.lagrangian, push), q0, omega0, params,
        dt=1e-3, num_steps=1000, integrator=s2jax.RungeKutta4(),
    ).q[-1]
    free = s2jax.simulate(s2jax.GeneralLagrangianSystem(rotating_spherical_pendulum.lagrangian), q0, omega0,
                          params, dt=1e-3, num_steps=1000, integrator=s2jax.RungeKutta4()).q[-1]
    assert float(jnp.max(jnp.abs(reference - free))) > 1e-2  # the force matters
    errors = []
    for num_steps in (50, 100):
        sol = s2jax.simulate(HamiltonianSystem(rotating_hamiltonian, push), q0, omega0, params,
                             dt=1.0 / num_steps, num_steps=num_steps, integrator=HamiltonianRattle())
        errors.append(float(jnp.max(jnp.abs(sol.q[-1] - reference))))
    assert 3.5 < errors[0] / errors[1] < 4.5, errors


@pytest.mark.slow
def test_double_pendulum_from_legendre_transform_against_the_variational_integrator():
    """A (2.2) model through legendre_transform: RATTLE and the VI of (3.10)–(3.13) differ at O(h²),
    and so do their energies (both within O(h²) of E₀)."""
    params, q0, omega0 = _model(double_spherical_pendulum)
    system = HamiltonianSystem(legendre_transform(double_spherical_pendulum.lagrangian))
    lagrangian_system = s2jax.LagrangianSystem(double_spherical_pendulum.lagrangian)
    args = SystemArgs(params)
    run = jax.jit(_run, static_argnums=(0, 1, 6))

    @jax.jit
    def energy_gap(qs, ps, vi_q, vi_omega):
        # One program for the whole comparison: applied eagerly, `jax.vmap` compiled each of its
        # operations on its own (~300 small programs, half of this test's time).
        omegas = jax.vmap(system.angular_velocity, in_axes=(0, 0, None))(qs, ps, args)
        energy_h = jax.vmap(lagrangian_system.energy, in_axes=(0, 0, None))(qs, omegas, args)
        energy_l = jax.vmap(lagrangian_system.energy, in_axes=(0, 0, None))(vi_q, vi_omega, args)
        return jnp.abs(energy_h - energy_l)

    differences, energy_gaps = [], []
    # 100 steps at both h (one compilation of each program), compared over their first 0.5 s.
    for num_steps in (50, 100):
        dt = 0.5 / num_steps
        qs, ps, results = run(system, HamiltonianRattle(), q0, omega0, params, jnp.asarray(dt), 100)
        assert not np.any(results)
        vi = s2jax.simulate(double_spherical_pendulum.lagrangian, q0, omega0, params, dt=dt, num_steps=100)
        assert vi.integrator == "VariationalIntegrator"
        vi_q, vi_omega = vi.q[1:], vi.omega[1:]
        differences.append(float(jnp.max(jnp.abs(qs[:num_steps] - vi_q[:num_steps]))))
        energy_gaps.append(float(jnp.max(energy_gap(qs, ps, vi_q, vi_omega)[:num_steps])))
    assert 3.5 < differences[0] / differences[1] < 4.5, differences
    assert 3.0 < energy_gaps[0] / energy_gaps[1] < 5.0, energy_gaps


@pytest.mark.slow
def test_reversible_adjoint_matches_direct():
    """RATTLE is symmetric in (q, μ), so ReversibleAdjoint's backward pass rebuilds its states."""
    params, q0, omega0 = _model(rotating_spherical_pendulum)
    system = HamiltonianSystem(rotating_hamiltonian)

    def loss(rate, adjoint):
        sol = s2jax.simulate(system, q0, omega0, {**params, "Omega": rate}, dt=0.02, num_steps=50,
                             integrator=HamiltonianRattle(), adjoint=adjoint)
        return jnp.sum(sol.q[-1] * jnp.array([[1.0, 2.0, 3.0]]))

    direct = jax.grad(loss)(params["Omega"], s2jax.DirectAdjoint())
    reversible = jax.grad(loss)(params["Omega"], s2jax.ReversibleAdjoint())
    assert abs(float(direct)) > 1e-3
    np.testing.assert_allclose(reversible, direct, rtol=1e-9)


def test_rattle_rejects_other_systems():
    params, q0, omega0 = _model(rotating_spherical_pendulum)
    with pytest.raises(TypeError, match="HamiltonianRattle integrates a HamiltonianSystem"):
        HamiltonianRattle().init(s2jax.GeneralLagrangianSystem(rotating_spherical_pendulum.lagrangian),
                                 0.0, (q0, omega0), SystemArgs(params))


def test_simulate_runs_rattle_on_a_hamiltonian_system_by_default():
    """`simulate` picks HamiltonianRattle for a HamiltonianSystem (the same run as asking for
    it) and refuses an integrator built on the constant M of (2.2)."""
    params, q0, omega0 = _model(rotating_spherical_pendulum)
    system = HamiltonianSystem(rotating_hamiltonian)
    default = s2jax.simulate(system, q0, omega0, params, dt=0.01, num_steps=20)
    asked = s2jax.simulate(system, q0, omega0, params, dt=0.01, num_steps=20, integrator=HamiltonianRattle())
    assert default.integrator == "HamiltonianRattle"
    np.testing.assert_array_equal(default.q, asked.q)
    with pytest.raises(ValueError, match="a HamiltonianSystem runs HamiltonianRattle"):
        s2jax.simulate(system, q0, omega0, params, dt=0.01, num_steps=20, integrator=s2jax.VariationalIntegrator())


@pytest.mark.slow
def test_chain_error_comparable_to_the_variational_integrator():
    """The 3-link chain of 001 §V (m_ii ≈ 100–300): RATTLE's error after 1 s at h = 0.01 against RK4 at
    h = 1e-4 is no larger than the VI's. Guards the 1/m_ii weight of K's normal term (with weight 1
    the error was 1.1e-2, 120× the VI's 8.9e-5; measured now 2.1e-5)."""
    params = jax.tree.map(jnp.asarray, chain_pendulum.paper_params(3))
    q0, omega0 = (jnp.asarray(x) for x in chain_pendulum.paper_state(3))
    system = HamiltonianSystem(legendre_transform(chain_pendulum.lagrangian))
    qs, _, results = jax.jit(_run, static_argnums=(0, 1, 6))(
        system, HamiltonianRattle(), q0, omega0, params, jnp.asarray(0.01), 100
    )
    assert not np.any(results)
    reference = s2jax.simulate(chain_pendulum.lagrangian, q0, omega0, params, dt=1e-4, num_steps=10_000,
                               integrator=s2jax.RungeKutta4()).q[-1]
    vi = s2jax.simulate(chain_pendulum.lagrangian, q0, omega0, params, dt=0.01, num_steps=100).q[-1]
    rattle_error = float(jnp.max(jnp.abs(qs[-1] - reference)))
    vi_error = float(jnp.max(jnp.abs(vi - reference)))
    assert rattle_error < vi_error, (rattle_error, vi_error)
