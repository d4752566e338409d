"""The models of s2jax.models: potentials, paper states, energy behaviour, conventions."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import s2jax as s2  # noqa: E402
from s2jax import models  # noqa: E402

sp = models.spherical_pendulum
chain = models.chain_pendulum
nbody = models.n_body_on_sphere
coupled = models.coupled_spherical_pendula
rod = models.elastic_rod
dipoles = models.magnetic_dipoles
lj = models.lennard_jones_on_sphere
dsp = models.double_spherical_pendulum

# name -> (module, params, state); the paper set-ups, with the rod shortened from n = 10 to
# n = 5 elements where noted, to keep the implicit integrator's compile time small.
CASES = {
    "spherical_pendulum": (sp, sp.paper_params(), sp.paper_state()),
    "chain_pendulum": (chain, chain.paper_params(3), chain.paper_state(3)),
    "n_body_on_sphere": (nbody, nbody.paper_params(), nbody.paper_state()),
    "coupled_spherical_pendula": (coupled, coupled.paper_params(), coupled.paper_state()),
    "elastic_rod": (rod, rod.paper_params(10), rod.paper_state(10)),
    "magnetic_dipoles": (dipoles, dipoles.paper_params(), dipoles.paper_state()),
    "lennard_jones_on_sphere": (lj, lj.paper_params(), lj.paper_state()),
}
DIAGONAL = [
    "spherical_pendulum",
    "n_body_on_sphere",
    "coupled_spherical_pendula",
    "magnetic_dipoles",
]
PAIRWISE = ["n_body_on_sphere", "magnetic_dipoles", "lennard_jones_on_sphere"]


def _potential(module, params):
    return lambda q: -module.lagrangian(q, jnp.zeros_like(q), params)


def _random_configuration(name, n, key):
    if name == "lennard_jones_on_sphere":
        # Independent uniform points would nearly collide (|q_i − q_j| ≪ σ, V ~ 1e20);
        # jitter the icosphere instead, by about a tenth of σ.
        q, _ = lj.icosphere(3)
        q = q + 0.01 * np.asarray(jax.random.normal(key, q.shape))
        return jnp.asarray(q / np.linalg.norm(q, axis=-1, keepdims=True))
    q, _ = s2.random_state(key, n)
    return q


@pytest.mark.parametrize("name", list(CASES))
def test_potential_gradient_matches_finite_differences(name):
    """−∂L/∂q at q̇ = 0 (jax.grad) against central differences along random directions."""
    module, params, (q0, _) = CASES[name]
    value_and_grad = jax.jit(jax.value_and_grad(_potential(module, params)))

    def potential(q):
        return value_and_grad(q)[0]

    keys = jax.random.split(jax.random.PRNGKey(list(CASES).index(name)), 4)
    q = _random_configuration(name, q0.shape[0], keys[0])
    _, grad = value_and_grad(q)
    assert grad.shape == q.shape and bool(jnp.all(jnp.isfinite(grad)))
    step = 1e-6
    for key in keys[1:]:
        direction = jax.random.normal(key, q.shape)
        exact = float(jnp.sum(grad * direction))
        central = float(
            (potential(q + step * direction) - potential(q - step * direction)) / (2 * step)
        )
        # O(step²) truncation and O(1e-16 |V| / step) round-off: both far below 1e-6.
        np.testing.assert_allclose(
            exact, central, rtol=1e-6, atol=1e-12 * float(jnp.max(jnp.abs(grad)))
        )


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.slow
def test_paper_state_is_exactly_on_the_tangent_bundle(name):
    module, params, (q0, omega0) = CASES[name]
    assert isinstance(q0, np.ndarray) and isinstance(omega0, np.ndarray)
    assert q0.shape == omega0.shape and q0.shape[1] == 3
    assert np.max(np.abs(np.linalg.norm(q0, axis=-1) - 1.0)) <= 1e-14
    assert np.max(np.abs(np.sum(q0 * omega0, axis=-1))) <= 1e-14
    assert np.all(np.isfinite(omega0)) and np.any(omega0 != 0)
    if name != "lennard_jones_on_sphere":  # 6 s for 642 bodies; its simulate test checks it
        s2.check_lagrangian_form(module.lagrangian, jnp.asarray(q0), jnp.asarray(omega0), params)


# (dt, steps, integrator, bound on max_k |E_k − E₀| / |E₀|, the value observed when written)
ENERGY_RUNS = {
    # 004's step h = 0.2 (g/r = 1, period ≈ 2π): bounded O(h²) oscillation, observed 2.0e-3.
    "spherical_pendulum": (0.2, 1000, s2.ExplicitVariationalIntegrator(), 4e-3),
    "chain_pendulum": (0.01, 1000, s2.VariationalIntegrator(), 4e-4),  # observed 1.7e-4
    "n_body_on_sphere": (1e-3, 1000, s2.ExplicitVariationalIntegrator(), 5e-5),  # observed 2.1e-5
    "coupled_spherical_pendula": (1e-3, 1000, s2.ExplicitVariationalIntegrator(), 2e-5),  # 8.2e-6
    "elastic_rod": (1e-4, 1000, s2.VariationalIntegrator(), 7e-5),  # observed 2.6e-5 (n = 5)
    "magnetic_dipoles": (1e-3, 1000, s2.ExplicitVariationalIntegrator(), 4e-5),  # observed 1.5e-5
}


@pytest.mark.parametrize("name", list(ENERGY_RUNS))
@pytest.mark.slow
def test_energy_and_unit_length_over_1000_steps(name):
    module, params, (q0, omega0) = CASES[name]
    if name == "elastic_rod":  # 5 elements instead of 10: a third of the compile time
        params, (q0, omega0) = rod.paper_params(5), rod.paper_state(5)
    dt, steps, integrator, bound = ENERGY_RUNS[name]
    sol = s2.simulate(
        module.lagrangian, q0, omega0, params, dt=dt, num_steps=steps, integrator=integrator
    )
    energy = np.asarray(s2.energy(module.lagrangian, sol.q, sol.omega, params))
    drift = np.abs(energy - energy[0]) / abs(energy[0])
    assert np.max(drift) <= bound
    assert float(np.max(s2.unit_length_error(sol.q))) <= 1e-13
    assert float(np.max(s2.tangency_error(sol.q, sol.omega))) <= 1e-12 * max(
        1.0, np.max(np.abs(omega0))
    )


@pytest.mark.slow
def test_lennard_jones_energy_and_unit_length_short_run():
    """642 molecules, 002's step h = 0.005, 50 steps (kept short: ~15 ms per step on CPU).

    Run under `jax.jit`, which skips `simulate`'s concrete-value check of the form of L
    (4 s for 642 bodies; it runs for 42 molecules in the explicit-versus-implicit test).
    """
    params, (q0, omega0) = lj.paper_params(), lj.paper_state()

    @jax.jit
    def run(q0, omega0, params):
        integrator = s2.ExplicitVariationalIntegrator()
        return s2.simulate(
            lj.lagrangian, q0, omega0, params, dt=0.005, num_steps=50, integrator=integrator
        )

    sol = run(q0, omega0, params)
    energy = np.asarray(s2.energy(lj.lagrangian, sol.q, sol.omega, params))
    # observed 3.4e-6 relative; 002 reports a mean deviation of 1.9e-3 over T = 5.
    assert np.max(np.abs(energy - energy[0])) <= 1e-5 * abs(energy[0])
    assert float(np.max(s2.unit_length_error(sol.q))) <= 1e-13
    assert float(np.max(np.abs(sol.q[-1] - sol.q[0]))) > 1e-3  # the molecules did move


@pytest.mark.parametrize("name", DIAGONAL + ["lennard_jones_small"])
@pytest.mark.slow
def test_explicit_and_implicit_integrators_agree(name):
    """(3.17)–(3.18) and (3.10)–(3.13) are the same map for diagonal M (to Newton's tolerance)."""
    if name == "lennard_jones_small":
        # 42 molecules of icosphere(1): the implicit step's dense 3n × 3n Jacobian for 642
        # molecules would dominate the test time; the model code is the same.
        module, params, (q0, omega0) = lj, lj.paper_params(1), lj.paper_state(1, angular_speed=1.0)
        dt = 0.005
    else:
        module, params, (q0, omega0) = CASES[name]
        dt = {"spherical_pendulum": 0.2, "n_body_on_sphere": 1e-2}.get(name, 1e-3)
    runs = [
        s2.simulate(
            module.lagrangian, q0, omega0, params, dt=dt, num_steps=10, integrator=integrator
        )
        for integrator in (s2.ExplicitVariationalIntegrator(), s2.VariationalIntegrator())
    ]
    np.testing.assert_allclose(runs[0].q, runs[1].q, rtol=0, atol=1e-12)
    scale = max(1.0, float(np.max(np.abs(runs[0].omega))))
    np.testing.assert_allclose(runs[0].omega, runs[1].omega, rtol=0, atol=1e-12 * scale)
    assert float(np.max(np.abs(runs[0].q[-1] - q0))) > 1e-6  # something happened


@pytest.mark.parametrize("name", PAIRWISE)
def test_pairwise_potential_diagonal_gives_no_nan(name):
    """The i = j terms are masked before any division: value, gradient and Hessian are finite.

    Second derivatives matter too: gradients through `simulate` differentiate ∂V/∂q again.
    """
    module, params, (q0, _) = CASES[name]
    if name == "lennard_jones_on_sphere":
        module, params, (q0, _) = lj, lj.paper_params(1), lj.paper_state(1)
    potential = _potential(module, params)

    @jax.jit
    def derivatives(q, direction):
        value, gradient = jax.value_and_grad(potential)(q)
        _, hessian_direction = jax.jvp(jax.grad(potential), (q,), (direction,))
        return value, gradient, hessian_direction

    direction = jax.random.normal(jax.random.PRNGKey(6), q0.shape)
    for result in derivatives(jnp.asarray(q0), direction):
        assert bool(jnp.all(jnp.isfinite(result)))
    if name == "magnetic_dipoles":  # the pivots enter through r_ij, r_ii = 0 included
        by_pivots = jax.jit(jax.grad(lambda x: module.potential(q0, {**params, "pivots": x})))(
            params["pivots"]
        )
        assert bool(jnp.all(jnp.isfinite(by_pivots))) and bool(jnp.any(by_pivots != 0))


# --- model-specific conventions ----------------------------------------------------------


def test_spherical_pendulum_matches_004_invariants():
    """Energy and vertical momentum of paper_state are 004's, in 004's own variables."""
    params = sp.paper_params()
    q0, omega0 = sp.paper_state()
    gamma = np.array([0.3, 0.2, -np.sqrt(0.87)])
    body_omega = np.array([0.6, 0.0, 0.0])
    m, r, g = params["m"], params["r"], params["g"]
    # ½ m r² |Ω|² + m g r Γ³: the energy of 004 §V.
    expected_energy = 0.5 * m * r**2 * body_omega @ body_omega + m * g * r * gamma[2]
    np.testing.assert_allclose(
        s2.energy(sp.lagrangian, q0, omega0, params), expected_energy, rtol=1e-14
    )
    # m r² Γ·Ω is 004's vertical momentum about the *upward* vertical, i.e. −e₃ here.
    expected_momentum = -m * r**2 * gamma @ body_omega
    momentum = s2.momentum_map(sp.lagrangian, q0, omega0, params, axis=(0.0, 0.0, 1.0))
    np.testing.assert_allclose(momentum, expected_momentum, rtol=1e-13)
    np.testing.assert_allclose(q0[0], -gamma, atol=1e-15)  # the documented q₀ = −Γ̂₀
    rotation = sp.body_to_inertial(gamma)
    np.testing.assert_allclose(rotation @ rotation.T, np.eye(3), atol=1e-15)
    assert np.linalg.det(rotation) == pytest.approx(1.0, abs=1e-14)


def test_chain_pendulum_special_cases():
    """n = 2 is 002 Example 1 and n = 1 is the spherical pendulum."""
    q, qdot = s2.random_state(jax.random.PRNGKey(3), 2)
    params = chain.paper_params(2)
    np.testing.assert_allclose(
        chain.lagrangian(q, qdot, params), dsp.lagrangian(q, qdot, dsp.paper_params()), rtol=1e-14
    )
    for ours, theirs in zip(chain.paper_state(2), dsp.paper_state()):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-16)
    one = {"masses": np.array([1.3]), "lengths": np.array([0.7]), "g": 9.8}
    np.testing.assert_allclose(
        chain.lagrangian(q[:1], qdot[:1], one),
        sp.lagrangian(q[:1], qdot[:1], {"m": 1.3, "r": 0.7, "g": 9.8}),
        rtol=1e-14,
    )
    # M of (38) against ½ Σ_i m_i |ẋ_i|², x_i = Σ_{j≤i} l_j q_j, for unequal links.
    params = {"masses": np.array([1.0, 2.0, 0.5]), "lengths": np.array([0.3, 1.1, 0.8]), "g": 9.81}
    q, qdot = s2.random_state(jax.random.PRNGKey(4), 3)
    velocities = np.cumsum(params["lengths"][:, None] * np.asarray(qdot), axis=0)
    kinetic = 0.5 * np.sum(params["masses"] * np.sum(velocities**2, axis=-1))
    lagrangian_kinetic = chain.lagrangian(q, qdot, params) - chain.lagrangian(q, 0 * qdot, params)
    np.testing.assert_allclose(lagrangian_kinetic, kinetic, rtol=1e-14)


def test_n_body_pair_potential_is_minus_gamma_cotangent():
    theta = 0.7
    q = jnp.array([[0.0, 0.0, 1.0], [np.sin(theta), 0.0, np.cos(theta)]])
    params = {"masses": np.ones(2), "gamma": 1.5}
    np.testing.assert_allclose(nbody.potential(q, params), -1.5 / np.tan(theta), rtol=1e-14)


def test_coupled_pendula_springs_at_rest_when_hanging():
    """With every pendulum hanging (q_i = e₃) the springs have their rest length."""
    params = coupled.paper_params()
    q = jnp.tile(jnp.array([0.0, 0.0, 1.0]), (4, 1))
    gravity = -np.sum(params["masses"] * params["g"] * params["lengths"])
    np.testing.assert_allclose(coupled.potential(q, params), gravity, rtol=1e-14)
    # Swinging pendulum 1 towards pendulum 2 (along +e₁) compresses spring (1, 2) by l/2 · sin.
    angle = 0.3
    q = q.at[0].set(jnp.array([np.sin(angle), 0.0, np.cos(angle)]))
    only_12 = {**params, "connections": ((0, 1),), "spring_constants": np.array([10.0])}
    spring = (
        0.5 * 10.0 * (np.hypot(0.1 - 0.05 * np.sin(angle), 0.05 - 0.05 * np.cos(angle)) - 0.1) ** 2
    )
    gravity_1 = gravity + 0.1 * 9.81 * 0.1 * (1 - np.cos(angle))
    np.testing.assert_allclose(coupled.potential(q, only_12), gravity_1 + spring, rtol=1e-13)


def test_elastic_rod_inertia_printed_and_rigid_rods():
    n, m, l = 10, 0.055, 1.1
    printed = np.asarray(rod.inertia_matrix(rod.paper_params(n)))
    unit = m * l**2 / (n + 1) ** 3
    # The coefficients of the matrix of (3.24).
    assert printed[0, 0] == pytest.approx((n - 2 / 3) * unit, rel=1e-14)
    assert printed[1, 1] == pytest.approx((n - 5 / 3) * unit, rel=1e-14)
    assert printed[n - 1, n - 1] == pytest.approx(unit / 3, rel=1e-14)
    assert printed[0, 1] == pytest.approx((n - 1) / 2 * unit, rel=1e-14)
    assert printed[0, n - 1] == pytest.approx(unit / 2, rel=1e-14)
    np.testing.assert_array_equal(printed, printed.T)
    # The rigid-rod M against ½ Σ_i (m_i |ẋ_i|² + m_i l_i²/12 |q̇_i|²), unequal elements.
    # No springs and no gravity: L(q, q̇) − L(q, 0) would otherwise cancel κ ~ 1000.
    params = {
        **rod.paper_params(4, inertia="rigid_rods"),
        "g": 0.0,
        "spring_constants": np.zeros(4),
    }
    params["masses"] = np.array([0.01, 0.02, 0.005, 0.015])
    params["lengths"] = np.array([0.1, 0.3, 0.2, 0.15])
    q, qdot = s2.random_state(jax.random.PRNGKey(5), 4)
    links = params["lengths"][:, None] * np.asarray(qdot)
    centres = np.cumsum(links, axis=0) - 0.5 * links
    kinetic = 0.5 * np.sum(
        params["masses"]
        * (np.sum(centres**2, -1) + params["lengths"] ** 2 / 12 * np.sum(qdot**2, -1))
    )
    lagrangian_kinetic = rod.lagrangian(q, qdot, params) - rod.lagrangian(q, 0 * qdot, params)
    np.testing.assert_allclose(lagrangian_kinetic, kinetic, rtol=1e-14)
    with pytest.raises(ValueError, match="inertia"):
        rod.paper_params(inertia="lumped")


def test_magnetic_dipoles_head_to_tail_pair():
    """Two coaxial dipoles along their separation r: V = −2 μ ν² / (4π r³)."""
    params = {
        "masses": np.ones(2),
        "lengths": np.ones(2),
        "moments": np.full(2, 0.1),
        "permeability": 4 * np.pi * 1e-7,
        "pivots": np.array([[0.0, 0.0, 0.0], [0.024, 0.0, 0.0]]),
    }
    q = jnp.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    np.testing.assert_allclose(dipoles.potential(q, params), -2e-7 * 0.01 / 0.024**3, rtol=1e-13)
    pivots = dipoles.paper_params()["pivots"]
    assert pivots.shape == (16, 3)
    np.testing.assert_allclose(
        np.sort(np.linalg.norm(pivots - pivots[0], axis=-1))[1], 0.024, rtol=1e-14
    )


def test_icosphere_and_lennard_jones_choices():
    vertices, faces = lj.icosphere(3)
    assert vertices.shape == (642, 3) and faces.shape == (1280, 3)
    assert lj.icosphere(4)[1].shape == (5120, 3)
    assert np.max(np.abs(np.linalg.norm(vertices, axis=-1) - 1)) <= 1e-15
    a, b, c = vertices[faces].transpose(1, 0, 2)
    assert np.all(np.sum(np.cross(b - a, c - a) * (a + b + c), axis=-1) > 0)  # outward
    edges = np.sort(np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]), axis=1)
    _, counts = np.unique(edges, axis=0, return_counts=True)
    assert np.all(counts == 2) and counts.size == 1920  # a closed surface, V − E + F = 2
    params = lj.paper_params()
    assert params["masses"].shape == (642,)
    # The pair force vanishes at r = 2^{1/6} σ = the mean nearest-neighbour distance.
    assert 2 ** (1 / 6) * params["sigma"] == pytest.approx(
        lj.mean_nearest_neighbour_distance(vertices)
    )
    q0, omega0 = lj.paper_state()
    speed = np.linalg.norm(np.cross(omega0, q0), axis=-1)
    assert np.max(speed) == pytest.approx(0.1, rel=1e-3)
    east, west = q0[:, 0] >= 0, q0[:, 0] < 0
    axis_east = np.array([np.sin(np.pi / 12), 0.0, np.cos(np.pi / 12)])
    axis_west = axis_east * np.array([-1.0, 1.0, 1.0])
    assert np.degrees(np.arccos(axis_east @ axis_west)) == pytest.approx(30.0)
    np.testing.assert_allclose(
        np.cross(omega0, q0)[east], 0.1 * np.cross(axis_east, q0[east]), atol=1e-16
    )
    np.testing.assert_allclose(
        np.cross(omega0, q0)[west], 0.1 * np.cross(axis_west, q0[west]), atol=1e-16
    )


def test_lennard_jones_closed_form_derivatives_match_reverse_mode():
    """The closed-form JVP of `lennard_jones_on_sphere.potential` against reverse mode through an
    independent writing of V (an (n, n, 3) array of differences reduced over its last axis):
    ∂V/∂q, ∂V/∂ε, ∂V/∂σ, and a Hessian-vector product (gradients through `simulate`
    differentiate ∂V/∂q again), on a jittered icosphere(2)."""
    params = {k: jnp.asarray(v) for k, v in lj.paper_params(2).items()}
    q, _ = lj.icosphere(2)
    q = q + 0.01 * np.asarray(jax.random.normal(jax.random.PRNGKey(3), q.shape))
    q = jnp.asarray(q / np.linalg.norm(q, axis=-1, keepdims=True))
    off_diagonal = ~np.eye(q.shape[0], dtype=bool)

    def by_differences(q, params):
        difference = q[:, None, :] - q[None, :, :]
        distance2 = jnp.where(off_diagonal, jnp.sum(difference * difference, axis=-1), 1.0)
        ratio = jnp.where(off_diagonal, (params["sigma"] ** 2 / distance2) ** 3, 0.0)
        return 2.0 * params["epsilon"] * jnp.sum(ratio**2 - ratio)

    for argnum in (0, 1):
        ours = jax.grad(lj.potential, argnums=argnum)(q, params)
        reference = jax.grad(by_differences, argnums=argnum)(q, params)
        for key in ("epsilon", "sigma") if argnum else (None,):
            a, b = (ours[key], reference[key]) if key else (ours, reference)
            # Both sum the same differences in other orders: measured 4.8e-16 for ∂V/∂q,
            # 1.6e-16 for ∂V/∂σ, 0 for ∂V/∂ε (relative to the largest component; the Gram form
            # that `potential` used before gave 1.1e-14 and 1.4e-14).
            np.testing.assert_allclose(a, b, rtol=0, atol=4e-15 * float(jnp.max(jnp.abs(b))))
    direction = jax.random.normal(jax.random.PRNGKey(4), q.shape)
    ours = jax.jvp(jax.grad(lj.potential), (q, params), (direction, jax.tree_util.tree_map(jnp.zeros_like, params)))[1]
    reference = jax.jvp(lambda x: jax.grad(by_differences)(x, params), (q,), (direction,))[1]
    # Measured 2.7e-16 relative (9e-15 with the Gram form).
    np.testing.assert_allclose(ours, reference, rtol=0, atol=4e-15 * float(jnp.max(jnp.abs(reference))))


def test_lagrangians_reject_wrong_number_of_bodies():
    for name, (module, params, (q0, omega0)) in CASES.items():
        q = jnp.concatenate([jnp.asarray(q0), jnp.asarray(q0[:1])])
        with pytest.raises(ValueError, match="shape"):
            module.lagrangian(q, jnp.zeros_like(q), params)
