"""The Lie group integrators of 003 (SE(3)ⁿ acting on (TS²)ⁿ) against independent computations."""

import jax
import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import s2jax as s2
from s2jax._geometry import cross, hat
from s2jax._integrators.lie_group import (
    RKMK3,
    RKMK4,
    CommutatorFreeRK4,
    LieEuler,
    LieEulerHeun,
    dexpinv,
    exp_action,
    infinitesimal_generator,
    se3_vector_field,
)

dsp = s2.models.double_spherical_pendulum

METHODS = [
    (LieEuler(), 1),
    (LieEulerHeun(), 2),
    (RKMK3(), 3),
    (RKMK4(), 4),
    (CommutatorFreeRK4(), 4),
]
METHOD_IDS = [type(m).__name__ for m, _ in METHODS]


# --- A diagonal-inertia model: three particles on S², written twice (jax and numpy) ---------

PAIRS = ((0, 1), (0, 2), (1, 2))


def three_particles(q, qdot, p):
    """L = ½ Σ m_i |q̇_i|² − V, V = g Σ m_i q_i3 + Σ_{i<j} k_ij (q_i·q_j)² + c q₁·(q₂ × q₃)."""
    kinetic = 0.5 * jnp.sum(p["m"][:, None] * qdot**2)
    coupling = sum(p["k"][n] * jnp.dot(q[i], q[j]) ** 2 for n, (i, j) in enumerate(PAIRS))
    potential = (
        p["g"] * jnp.sum(p["m"] * q[:, 2])
        + coupling
        + p["c"] * jnp.dot(q[0], jnp.cross(q[1], q[2]))
    )
    return kinetic - potential


THREE_PARAMS = {"m": np.array([1.0, 2.0, 0.5]), "k": np.array([0.7, -0.4, 1.1]), "c": 0.8, "g": 1.0}


def three_particles_field(y, p):
    """ω̇_i = −q_i × ∂V/∂q_i / m_i, the diagonal-M case of 002 (2.11), gradient by hand."""
    q, omega = y[:9].reshape(3, 3), y[9:].reshape(3, 3)
    grad = p["g"] * p["m"][:, None] * np.array([0.0, 0.0, 1.0])
    for n, (i, j) in enumerate(PAIRS):
        qq = np.dot(q[i], q[j])
        grad[i] += 2 * p["k"][n] * qq * q[j]
        grad[j] += 2 * p["k"][n] * qq * q[i]
    grad += p["c"] * np.stack([np.cross(q[1], q[2]), np.cross(q[2], q[0]), np.cross(q[0], q[1])])
    omegadot = -np.cross(q, grad) / p["m"][:, None]
    return np.concatenate([np.cross(omega, q).ravel(), omegadot.ravel()])


def three_particles_state():
    rng = np.random.default_rng(7)
    q0 = rng.normal(size=(3, 3))
    q0 /= np.linalg.norm(q0, axis=-1, keepdims=True)
    omega0 = rng.normal(size=(3, 3))
    return q0, omega0 - np.sum(q0 * omega0, axis=-1, keepdims=True) * q0


def three_particles_reference(q0, omega0, t1):
    y0 = np.concatenate([q0.ravel(), omega0.ravel()])
    sol = solve_ivp(
        lambda t, y: three_particles_field(y, THREE_PARAMS),
        (0.0, t1),
        y0,
        method="DOP853",
        rtol=1e-13,
        atol=1e-13,
    )
    assert sol.success
    return sol.y[:9, -1].reshape(3, 3), sol.y[9:, -1].reshape(3, 3)


# --- The closed forms ---------------------------------------------------------------------


def _random_algebra(key, n, scale):
    ku, kv = jax.random.split(key)
    return scale * jax.random.normal(ku, (n, 3)), jax.random.normal(kv, (n, 3))


def test_levi_civita_cross_is_the_cross_product():
    """The contraction the Lie group methods use agrees with jnp.cross to a few ulp, jit or not."""
    a, b = jax.random.normal(jax.random.key(0), (2, 500, 3))
    scale = jnp.linalg.norm(a, axis=-1, keepdims=True) * jnp.linalg.norm(b, axis=-1, keepdims=True)
    for function in (cross, jax.jit(cross)):
        assert jnp.max(jnp.abs(function(a, b) - jnp.cross(a, b)) / scale) < 4e-16


@pytest.mark.parametrize("angle", [0.0, 1e-7, 0.05, 0.0999, 0.1001, 0.7, 2.5])
def test_exp_action_matches_matrix_exponential(angle):
    """Ψ(exp ξ, ·) against expm of [[û, v], [0, 0]], on the Taylor and closed-form branches."""
    q, omega = s2.random_state(jax.random.PRNGKey(1), 4)
    u, v = _random_algebra(jax.random.PRNGKey(2), 4, 1.0)
    u = angle * u / jnp.linalg.norm(u, axis=-1, keepdims=True)
    q1, omega1 = jax.jit(exp_action)((u, v), q, omega)
    matrices = jnp.zeros((4, 4, 4)).at[:, :3, :3].set(hat(u)).at[:, :3, 3].set(v)
    g = jax.jit(jax.vmap(jax.scipy.linalg.expm))(matrices)
    rotation, translation = g[:, :3, :3], g[:, :3, 3]
    rotated_q = jnp.einsum("nij,nj->ni", rotation, q)
    np.testing.assert_allclose(q1, rotated_q, rtol=0, atol=1e-14)
    expected = jnp.einsum("nij,nj->ni", rotation, omega) + jnp.cross(translation, rotated_q)
    np.testing.assert_allclose(omega1, expected, rtol=0, atol=1e-14)
    # The action maps TS² to TS² (003 §"Transitive group action").
    assert float(jnp.max(s2.unit_length_error(q1))) <= 1e-15
    assert float(jnp.max(s2.tangency_error(q1, omega1))) <= 1e-15


def test_exp_action_derivative_at_zero_is_the_infinitesimal_generator():
    """d/dt Ψ(exp(tη), y)|_{t=0} = Ψ_*(η)|_y, forward and reverse mode, with no NaN at ξ = 0."""
    q, omega = s2.random_state(jax.random.PRNGKey(3), 3)
    eta = _random_algebra(jax.random.PRNGKey(4), 3, 1.0)
    zero = (jnp.zeros((3, 3)), jnp.zeros((3, 3)))
    (q0, omega0), tangent = jax.jit(jax.jvp, static_argnums=0)(
        lambda xi: exp_action(xi, q, omega), (zero,), (eta,)
    )
    np.testing.assert_array_equal(q0, q)
    np.testing.assert_array_equal(omega0, omega)
    expected = infinitesimal_generator(eta, q, omega)
    np.testing.assert_allclose(tangent[0], expected[0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(tangent[1], expected[1], rtol=0, atol=1e-15)
    cotangent = jax.jit(jax.grad(lambda xi: jnp.sum(exp_action(xi, q, omega)[1] * omega)))(zero)
    assert all(bool(jnp.all(jnp.isfinite(c))) for c in cotangent)
    # ⟨Ψ_*(η), (0, ω)⟩ is linear in η, so the gradient's pairing with η reproduces it.
    pairing = sum(jnp.sum(c * e) for c, e in zip(cotangent, eta))
    np.testing.assert_allclose(pairing, jnp.sum(expected[1] * omega), rtol=1e-14)


def test_dexpinv_inverts_dexp():
    """dexp_θ(dexp⁻¹_θ(ξ)) = ξ + O(|θ|^j), ad_θ^j the first term the truncated series drops."""
    xi = _random_algebra(jax.random.PRNGKey(5), 2, 1.0)
    direction = _random_algebra(jax.random.PRNGKey(6), 2, 1.0)
    q, omega = s2.random_state(jax.random.PRNGKey(8), 2)

    def residual(scale, truncation):
        theta = tuple(scale * d for d in direction)
        eta = dexpinv(theta, xi, truncation)
        # Ψ(exp(θ + sη), y) moves, to first order in s, by Ψ_*(dexp_θ η) at Ψ(exp θ, y).
        _, moved = jax.jvp(
            lambda s: exp_action(tuple(t + s * e for t, e in zip(theta, eta)), q, omega),
            (0.0,),
            (1.0,),
        )
        target = infinitesimal_generator(xi, *exp_action(theta, q, omega))
        return max(float(jnp.max(jnp.abs(m - t))) for m, t in zip(moved, target))

    # The first term dropped is ad_θ^j, j = k + 1 except that B₃ = B₅ = 0 skip j = 3, 5.
    for truncation, power in ((0, 1), (1, 2), (2, 4), (4, 6)):
        r1, r2 = residual(0.1, truncation), residual(0.05, truncation)
        assert abs(np.log2(r1 / r2) - power) < 0.2, (truncation, r1, r2)


def _spherical_pendulum(q, qdot, p):
    return 0.5 * jnp.sum(qdot**2) + p["g"] * jnp.sum(q[:, 2])


@pytest.mark.slow
def test_gradient_through_a_step_from_rest():
    """The gradient of a Lie–Euler step in ω₀ at ω₀ = 0 (ξ has u = 0) against central differences.

    Lie–Euler keeps the compilation short: XLA on CPU takes ~15 s to compile the reverse pass
    of one RKMK4 step, against ~1 s for Lie–Euler.
    """
    system = s2.LagrangianSystem(_spherical_pendulum)
    params = {"g": jnp.asarray(9.81)}
    q0 = jnp.array([[0.6, 0.0, 0.8]])
    dt = jnp.asarray(0.1)
    weights = jax.random.normal(jax.random.PRNGKey(9), (2, 1, 3))
    integrator = LieEuler()
    args = system.prepare(q0, params)
    state = integrator.init(system, 0.0, (q0, jnp.zeros_like(q0)), args)

    @jax.jit
    def loss(omega0):
        (q1, omega1), _, _ = integrator.step(system, 0.0, dt, (q0, omega0), args, state)
        return jnp.sum(weights[0] * q1) + jnp.sum(weights[1] * omega1)

    omega0 = jnp.zeros((1, 3))
    gradient = jax.jit(jax.grad(loss))(omega0)
    assert bool(jnp.all(jnp.isfinite(gradient)))
    eps = 1e-6
    central = jnp.stack(
        [(loss(omega0 + eps * e) - loss(omega0 - eps * e)) / (2 * eps) for e in jnp.eye(3)[:, None]]
    )
    # central differences: O(eps²) truncation plus ~1e-16/eps round-off
    np.testing.assert_allclose(gradient.ravel(), central, rtol=0, atol=1e-8)


@pytest.mark.parametrize("model", ["double_pendulum", "three_particles"])
@pytest.mark.slow
def test_se3_vector_field_reproduces_the_equations_of_motion(model):
    """Ψ_*(ξ(q, ω))|_(q, ω) = (q̇, ω̇) with ξ = (ω_i, q_i × h_i), h_i = ω̇_i (003) at random states."""
    if model == "double_pendulum":
        lagrangian, params, n = dsp.lagrangian, dsp.paper_params(), 2
    else:
        lagrangian, params, n = three_particles, THREE_PARAMS, 3
    params = jax.tree_util.tree_map(jnp.asarray, params)
    system = s2.LagrangianSystem(lagrangian)

    @jax.jit
    @jax.vmap
    def fields(key):
        q, omega = s2.random_state(key, n, scale=2.0)
        args = system.prepare(q, params)
        qdot, omegadot = system.vector_field(0.0, q, omega, args)
        generated = infinitesimal_generator(se3_vector_field(system, 0.0, q, omega, args), q, omega)
        return q, omega, qdot, omegadot, generated

    q, omega, qdot, omegadot, generated = fields(jax.random.split(jax.random.PRNGKey(20), 4))
    assert float(jnp.max(s2.tangency_error(q, omegadot))) <= 1e-13  # h_i ⊥ q_i
    scale = float(jnp.max(jnp.abs(omegadot)))
    # Two formulas of one vector, rounded differently: a few ulps of its largest component (measured
    # up to 2 ulps, 1.8e-15 at |q̇| = 4.6; it was within 1e-15 before XLA's classic emitters).
    np.testing.assert_allclose(generated[0], qdot, rtol=0, atol=4 * np.finfo(float).eps * float(jnp.max(jnp.abs(qdot))))
    np.testing.assert_allclose(generated[1], omegadot, rtol=0, atol=1e-14 * scale)
    if model == "three_particles":  # the numpy field is independent of s2jax
        for k in range(q.shape[0]):
            y = np.concatenate([np.ravel(q[k]), np.ravel(omega[k])])
            expected = three_particles_field(y, THREE_PARAMS)
            np.testing.assert_allclose(
                np.ravel(generated[1][k]), expected[9:], rtol=0, atol=1e-13 * scale
            )


# --- Convergence orders and invariants -------------------------------------------------------

# `simulate` compiles once per (model, integrator, num_steps, save_every) and takes dt as a traced
# value, so the order runs read the state at t = 1 from a saved trajectory of a fixed num_steps:
# for the pendulum the 10⁴ steps of the invariant test, so that one compilation serves both
# (compilation, not the steps, is what costs time here).
NUM_STEPS, SAVE_EVERY = 10_000, 10

# h = 1/(10 m) for m = 4 … 32, so t = 1 is saved state m. At T = 1 s the smallest errors (RKMK4,
# CF4: 4e-11 to 6e-11) stay over 150× above the DOP853 references' (their change from rtol = 1e-12
# to 1e-13: 3e-14 for the pendulum, 2e-13 for the particles), and the largest h are already
# asymptotic (log₂ of successive error ratios within 0.15 of p).
SAVES_AT_T1 = [4, 8, 16, 32]


def _run(integrator, lagrangian, q0, omega0, params, dt, num_steps=NUM_STEPS):
    return s2.simulate(
        lagrangian,
        q0,
        omega0,
        params,
        dt=dt,
        num_steps=num_steps,
        save_every=SAVE_EVERY,
        integrator=integrator,
    )


def _slope(integrator, lagrangian, q0, omega0, params, reference, num_steps=NUM_STEPS):
    errors = []
    for m in SAVES_AT_T1:
        dt = 1.0 / (SAVE_EVERY * m)
        sol = _run(integrator, lagrangian, q0, omega0, params, dt, num_steps)
        np.testing.assert_allclose(sol.t[m], 1.0, rtol=1e-15)
        q, omega = sol.q[m], sol.omega[m]
        errors.append(max(np.max(np.abs(q - reference[0])), np.max(np.abs(omega - reference[1]))))
    steps = SAVE_EVERY * np.array(SAVES_AT_T1)
    return np.polyfit(np.log(1.0 / steps), np.log(errors), 1)[0], errors, sol


# The order on the double pendulum is the integrator contract's (tests/test_integrator_contract.py).


@pytest.mark.parametrize("integrator, order", METHODS, ids=METHOD_IDS)
@pytest.mark.slow
def test_order_three_particles_diagonal_inertia(integrator, order):
    q0, omega0 = three_particles_state()
    reference = three_particles_reference(q0, omega0, 1.0)
    # 320 steps reach t = 1 with the smallest h; there is no compilation to share with.
    num_steps = SAVE_EVERY * SAVES_AT_T1[-1]
    slope, errors, sol = _slope(
        integrator, three_particles, q0, omega0, THREE_PARAMS, reference, num_steps
    )
    assert abs(slope - order) <= 0.25, (slope, errors)
    assert errors[-1] > 1e-11
    # The runs stay in T(S²)³ too (the last one: 320 steps of h = 1/320).
    assert float(jnp.max(s2.unit_length_error(sol.q))) <= 1e-13
    assert float(jnp.max(s2.tangency_error(sol.q, sol.omega))) <= 1e-13


@pytest.mark.parametrize("integrator, order", METHODS, ids=METHOD_IDS)
def test_state_stays_in_tangent_bundle(integrator, order):
    """|q_i| = 1 and q_i·ω_i = 0 to ≤ 1e-13 over 10⁴ steps of h = 0.01, with no projection."""
    del order
    q0, omega0 = dsp.paper_state()
    sol = _run(integrator, dsp.lagrangian, q0, omega0, dsp.paper_params(), 0.01)
    assert sol.result == s2.RESULTS.successful
    assert float(jnp.max(s2.unit_length_error(sol.q))) <= 1e-13
    assert float(jnp.max(s2.tangency_error(sol.q, sol.omega))) <= 1e-13
