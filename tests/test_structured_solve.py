"""The O(n) chain solve of A (2.11)/(3.13) against dense solves, and where s2jax uses it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from double_pendulum_reference import solve as reference_solve

import s2jax as s2
from s2jax._structured_solve import (
    chain_factors,
    chain_inverse_bands,
    chain_parameters,
    chain_solve,
    inertia_times,
    is_chain,
    tilted_chain_solve,
    two_body_solve,
)

cp = s2.models.chain_pendulum


def _dense_operator(q, inertia):
    """A's blocks M_ii I and −M_ij q̂_i q̂_j, as a 3n × 3n matrix, built independently."""
    n = q.shape[0]
    hats = s2.hat(q)
    off = inertia - jnp.diag(jnp.diag(inertia))
    blocks = -off[:, :, None, None] * jnp.einsum("iab,jbc->ijac", hats, hats)
    blocks = blocks + jnp.diag(jnp.diag(inertia))[:, :, None, None] * jnp.eye(3)[None, None]
    return jnp.transpose(blocks, (0, 2, 1, 3)).reshape(3 * n, 3 * n)


def _random_chain(key, n):
    key_l, key_m = jax.random.split(key)
    lengths = jax.random.uniform(key_l, (n,), minval=0.3, maxval=2.0)
    masses = jax.random.uniform(key_m, (n,), minval=0.1, maxval=3.0)
    carried = jnp.cumsum(masses[::-1])[::-1]
    index = jnp.arange(n)
    inertia = carried[jnp.maximum(index[:, None], index[None, :])] * jnp.outer(lengths, lengths)
    return inertia


@pytest.mark.parametrize("n", [2, 3, 7, 16, 64])
def test_chain_solve_equals_dense_solve(n):
    """Random link lengths and masses, random unit q and right-hand sides (with normal parts)."""
    key_chain, key_q, key_b = jax.random.split(jax.random.PRNGKey(n), 3)
    inertia = _random_chain(key_chain, n)
    assert chain_factors(np.asarray(inertia)) is not None
    q, _ = s2.random_state(key_q, n)
    rhs = jax.random.normal(key_b, (n, 3))
    dense = _dense_operator(q, inertia)
    expected = jnp.linalg.solve(dense, rhs.reshape(3 * n)).reshape(n, 3)
    solved = chain_solve(q, rhs, *chain_parameters(inertia))
    # Relative to the solution, allowing for the condition number of the dense problem.
    scale = float(jnp.max(jnp.abs(expected))) * float(jnp.linalg.cond(dense))
    np.testing.assert_allclose(solved, expected, rtol=0, atol=1e-14 * scale)
    # Backward error: a stable solve leaves a residual of a few n·eps·|A|·|x|.
    residual = (dense @ solved.reshape(-1)).reshape(n, 3) - rhs
    bound = n * 2.2e-16 * float(jnp.max(jnp.abs(dense))) * float(jnp.max(jnp.abs(solved))) * 3 * n
    assert float(jnp.max(jnp.abs(residual))) <= bound


def _dense_tilted_operator(q, p, inertia):
    """The 3n × 3n matrix whose row i is P_{q_i}(M v)_i + q_i (p_i·v_i), built independently."""
    n = q.shape[0]
    projections = jnp.eye(3)[None] - q[:, :, None] * q[:, None, :]
    blocks = inertia[:, :, None, None] * projections[:, None]
    blocks = blocks + jnp.eye(n)[:, :, None, None] * (q[:, :, None] * p[:, None, :])[:, None]
    return jnp.transpose(blocks, (0, 2, 1, 3)).reshape(3 * n, 3 * n)


@pytest.mark.parametrize("n", [2, 5, 16, 40])
def test_a_chains_inverse_inertia_is_tridiagonal_in_closed_form(n):
    """`chain_inverse_bands` against M⁻¹ by LU: its main and first off-diagonal, and every entry
    further out zero (the claim the O(n) solves rest on)."""
    inertia = _random_chain(jax.random.PRNGKey(300 + n), n)
    inverse = jnp.linalg.inv(inertia)
    main, upper = chain_inverse_bands(*chain_parameters(inertia))
    scale = float(jnp.max(jnp.abs(inverse))) * float(jnp.linalg.cond(inertia))
    np.testing.assert_allclose(main, jnp.diagonal(inverse), rtol=0, atol=1e-15 * scale)
    np.testing.assert_allclose(upper, jnp.diagonal(inverse, 1), rtol=0, atol=1e-15 * scale)
    np.testing.assert_allclose(jnp.triu(inverse, 2), 0.0, rtol=0, atol=1e-15 * scale)


# 8 and 16 links solve by multipliers, 64 by the articulated-body recursion (`_MULTIPLIER_LINKS`).
@pytest.mark.parametrize("n", [2, 3, 8, 16, 64])
def test_tilted_chain_solve_equals_dense_solve(n):
    """v ⊥ p_i with P_{q_i}(M v)_i = g_i, against the square dense system whose row i is
    P_{q_i}(M v)_i + q_i (p_i·v_i) = g_i (g_i ⊥ q_i, so its normal part pins p_i·v_i = 0)."""
    key_chain, key_q, key_p, key_g = jax.random.split(jax.random.PRNGKey(200 + n), 4)
    inertia = _random_chain(key_chain, n)
    q, _ = s2.random_state(key_q, n)
    # p near q, as q_{k+1} is near q_k in a step of (3.16).
    p = q + 0.3 * jax.random.normal(key_p, (n, 3))
    p = p / jnp.linalg.norm(p, axis=-1, keepdims=True)
    g = s2.project_tangent(q, jax.random.normal(key_g, (n, 3)))
    dense = _dense_tilted_operator(q, p, inertia)
    expected = jnp.linalg.solve(dense, g.reshape(3 * n)).reshape(n, 3)
    solved = tilted_chain_solve(q, p, g, *chain_parameters(inertia))
    scale = float(jnp.max(jnp.abs(expected))) * float(jnp.linalg.cond(dense))
    np.testing.assert_allclose(solved, expected, rtol=0, atol=1e-14 * scale)
    np.testing.assert_allclose(jnp.sum(solved * p, axis=-1), 0.0, rtol=0, atol=1e-14 * float(jnp.max(jnp.abs(solved))))
    # With p = q it is the tangential part of `chain_solve`'s solution of A ω = b, v = ω × q.
    b = jnp.cross(q, g)  # A ω = b has P(M v) = −q × b = g, v = ω × q (module docstring)
    omega = chain_solve(q, b, *chain_parameters(inertia))
    np.testing.assert_allclose(
        tilted_chain_solve(q, q, g, *chain_parameters(inertia)), jnp.cross(omega, q), rtol=0, atol=1e-13 * scale
    )


@pytest.mark.parametrize("n", [2, 3, 8, 64])
def test_chain_inertia_times_equals_the_dense_product(n):
    """M x by `inertia_times` (written out for two bodies, by O(n) prefix/suffix sums for a
    chain of three or more) against the dense matrix product."""
    key_chain, key_x = jax.random.split(jax.random.PRNGKey(100 + n))
    inertia = _random_chain(key_chain, n)
    x = jax.random.normal(key_x, (n, 3))
    structured = inertia_times(inertia, x, chain_parameters(inertia))
    scale = float(jnp.max(jnp.abs(inertia))) * float(jnp.max(jnp.abs(x))) * n
    np.testing.assert_allclose(structured, inertia @ x, rtol=0, atol=10 * 2.2e-16 * scale)


def test_two_body_solve_equals_dense_solve():
    """The closed form of `two_body_solve` against a dense solve of A's 6 × 6 matrix, for random
    positive-definite M, unit q and right-hand sides with normal parts."""
    for seed in range(5):
        key_m, key_q, key_b = jax.random.split(jax.random.PRNGKey(200 + seed), 3)
        factor = jax.random.normal(key_m, (2, 2))
        inertia = factor @ factor.T + 0.2 * jnp.eye(2)
        q, _ = s2.random_state(key_q, 2)
        rhs = jax.random.normal(key_b, (2, 3))
        dense = _dense_operator(q, inertia)
        expected = jnp.linalg.solve(dense, rhs.reshape(6)).reshape(2, 3)
        scale = float(jnp.max(jnp.abs(expected))) * float(jnp.linalg.cond(dense))
        np.testing.assert_allclose(two_body_solve(q, rhs, inertia), expected, rtol=0, atol=1e-14 * scale)


@pytest.mark.slow
def test_runge_kutta4_with_the_two_body_solve_is_fourth_order():
    """Off the sphere, at RK4's stages, the closed form extends (2.11) differently from the
    exact operator; the method stays of order 4 against DOP853 (rtol = atol = 1e-12)."""
    dsp = s2.models.double_spherical_pendulum
    q0, omega0 = dsp.paper_state()
    params = dsp.paper_params()
    q_ref, omega_ref = reference_solve(q0, omega0, params, 1.0)
    steps = np.array([20, 40, 80])
    errors = []
    for num_steps in steps:
        sol = s2.simulate(
            dsp.lagrangian, q0, omega0, params, dt=1.0 / num_steps, num_steps=int(num_steps),
            save_every=int(num_steps), integrator=s2.RungeKutta4(),
        )
        errors.append(max(np.max(np.abs(sol.q[-1] - q_ref)), np.max(np.abs(sol.omega[-1] - omega_ref))))
    slope = np.polyfit(np.log(1.0 / steps), np.log(errors), 1)[0]
    assert abs(slope - 4.0) <= 0.3, (slope, errors)


def test_chain_factors_recognises_chains_only():
    """The model's chain M is recognised; a random SPD, a diagonal and a negative-mass M are not."""
    for n in (2, 5, 32):
        assert chain_factors(np.asarray(cp.inertia_matrix(cp.paper_params(n)))) is not None
    root = np.random.default_rng(0).normal(size=(6, 6))
    assert chain_factors(root @ root.T + 6 * np.eye(6)) is None
    assert chain_factors(np.diag([1.0, 2.0, 3.0])) is None
    # c = (1, 2): a "mass" m_0 = c_0 − c_1 = −1 < 0, which the recursion does not allow.
    assert chain_factors(np.array([[1.0, 2.0], [2.0, 2.0]])) is None


def test_is_chain_agrees_with_chain_factors():
    """The in-graph test of a chain, under `jax.jit`, gives the verdict of `chain_factors` (which
    runs it in numpy after its own checks on the lengths), also on either side of its 1e-12
    relative tolerance."""
    root = np.random.default_rng(0).normal(size=(6, 6))
    chain = np.asarray(cp.inertia_matrix(cp.paper_params(5)))
    off_by = np.zeros_like(chain)
    off_by[1, 3] = off_by[3, 1] = np.max(np.abs(chain))
    cases = [cp.inertia_matrix(cp.paper_params(n)) for n in (2, 5, 32)] + [
        root @ root.T + 6 * np.eye(6), np.diag([1.0, 2.0, 3.0]), np.array([[1.0, 2.0], [2.0, 2.0]]),
        chain + 1e-14 * off_by, chain + 1e-10 * off_by,
    ]
    verdicts = []
    for inertia in cases:
        in_graph = bool(jax.jit(is_chain)(jnp.asarray(inertia)))
        assert in_graph == (chain_factors(np.asarray(inertia)) is not None)
        verdicts.append(in_graph)
    assert verdicts == [True, True, True, False, False, False, True, False]


def _probed_structure(lagrangian, params, n):
    """The structure `with_probed_structure` finds for traced params, under `jax.jit`."""
    found = []

    @jax.jit
    def probe(params):
        found.append(s2.LagrangianSystem(lagrangian).with_probed_structure(n, params, jnp.float64).inertia_structure)
        return 0.0

    probe(params)
    return found[0]


def _floats_traced(lagrangian, params):
    """(L, float params): the other params (ints, strings) closed over, as `jax.jit` needs."""
    floats = {k: jnp.asarray(v) for k, v in params.items() if isinstance(v, (float, np.ndarray))}
    others = {k: v for k, v in params.items() if k not in floats}
    return (lambda q, qdot, p: lagrangian(q, qdot, {**p, **others})), floats


@pytest.mark.slow
def test_chain_recognised_with_traced_params():
    """Traced params hide M's values, not its structure: a chain's is recognised at random values
    of them; a diagonal M (springs) and the rod's (its own form of M, a chain's only for
    `inertia="chain"`) are not chains."""
    assert _probed_structure(*_floats_traced(cp.lagrangian, cp.paper_params(6)), 6) == "chain"
    springs = s2.models.coupled_spherical_pendula
    assert _probed_structure(*_floats_traced(springs.lagrangian, springs.paper_params()), 3) == "dense"
    rod = s2.models.elastic_rod
    expected = "chain" if chain_factors(np.asarray(rod.inertia_matrix(rod.paper_params(6)))) is not None else "dense"
    assert _probed_structure(*_floats_traced(rod.lagrangian, rod.paper_params(6)), 6) == expected


@pytest.mark.slow
def test_simulate_with_traced_params_runs_the_chain_path():
    """Under `jax.grad` (params traced) a bare chain Lagrangian compiles the same program as a
    system declared a chain (whose gradients `test_chain_gradients_match_finite_differences`
    checks), not the dense one."""
    n = 4
    params = jax.tree_util.tree_map(jnp.asarray, cp.paper_params(n))
    q0, omega0 = (jnp.asarray(x) for x in cp.paper_state(n))

    def loss(params, system):
        sol = s2.simulate(system, q0, omega0, params, dt=0.01, num_steps=100, save_every=100)
        return jnp.sum(sol.q[-1] * jnp.arange(3.0)[None]) + jnp.sum(sol.omega[-1])

    program = {
        name: str(jax.make_jaxpr(jax.grad(loss), static_argnums=1)(params, system))
        for name, system in (
            ("bare", cp.lagrangian), ("declared", s2.LagrangianSystem(cp.lagrangian, inertia_structure="chain")),
            ("dense", s2.LagrangianSystem(cp.lagrangian, inertia_structure="dense")),
        )
    }
    assert program["bare"] == program["declared"] != program["dense"]


@pytest.mark.slow
def test_a_wrong_chain_declaration_is_reported():
    """A system declared a chain whose M is not one (with params traced, where it cannot be
    checked before compiling): `RESULTS.inertia_not_chain`, and a `SimulationError` with throw."""
    springs = s2.models.coupled_spherical_pendula
    params = springs.paper_params()
    system = s2.LagrangianSystem(springs.lagrangian, inertia_structure="chain")
    q0, omega0 = springs.paper_state()

    def run(g, throw):
        return s2.simulate(system, q0, omega0, {**params, "g": g}, dt=1e-3, num_steps=10, throw=throw)

    assert jax.jit(lambda g: run(g, False).result)(jnp.asarray(9.81)) == s2.RESULTS.inertia_not_chain
    with pytest.raises(Exception, match="not a chain's"):
        jax.block_until_ready(jax.jit(lambda g: run(g, True).q)(jnp.asarray(9.81)))


@pytest.mark.slow
def test_simulate_uses_the_chain_solve_and_matches_a_dense_system():
    """simulate recognises the chain; one step of RK4 and of the VI agree with the dense path."""
    n = 12
    params = cp.paper_params(n)
    q0, omega0 = cp.paper_state(n)
    system = s2.LagrangianSystem(cp.lagrangian).with_structure(np.asarray(cp.inertia_matrix(params)))
    assert system.inertia_structure == "chain"
    dense_system = s2.LagrangianSystem(cp.lagrangian, inertia_structure="dense")
    params = jax.tree_util.tree_map(jnp.asarray, params)
    q0, omega0 = jnp.asarray(q0), jnp.asarray(omega0)
    dt = jnp.asarray(0.01)
    # Tight Newton/chord tolerances, so that only round-off separates the two paths.
    for integrator in (s2.RungeKutta4(), s2.VariationalIntegrator(newton=s2.NewtonSettings(rtol=1e-15, atol=1e-15))):
        out = []
        for sys_ in (system, dense_system):
            args = sys_.prepare(q0, params)
            state = integrator.init(sys_, 0.0, (q0, omega0), args)
            (q1, omega1), _, result = integrator.step(sys_, jnp.zeros(()), dt, (q0, omega0), args, state)
            assert result == s2.RESULTS.successful
            out.append((q1, omega1))
        # RK4's stages leave the sphere by O(h²), where the chain solve (which takes |q_i| = 1)
        # and the dense A(q) extend the field differently: the steps differ by O(h⁵) ~ 1e-10 · C.
        # The VI stays on the sphere: there the two agree to round-off.
        tol = 1e-11 if isinstance(integrator, s2.RungeKutta4) else 1e-13
        np.testing.assert_allclose(out[0][0], out[1][0], rtol=0, atol=tol)
        np.testing.assert_allclose(out[0][1], out[1][1], rtol=0, atol=100 * tol)
    # On the sphere, the equations of motion (2.11) agree to round-off.
    args_chain, args_dense = system.prepare(q0, params), dense_system.prepare(q0, params)
    np.testing.assert_allclose(
        system.angular_acceleration(0.0, q0, omega0, args_chain),
        dense_system.angular_acceleration(0.0, q0, omega0, args_dense),
        rtol=0, atol=1e-12,
    )


def test_chain_vi_step_too_large_is_a_result_code():
    """A chain step that (3.16) cannot take (|t_i| ≥ 1 or no convergence) fails with a result
    code at that step, the state frozen and finite, rather than returning NaN or a wrong root."""
    n = 4
    q0, omega0 = cp.paper_state(n)
    sol = s2.simulate(
        cp.lagrangian, q0, 40.0 * omega0, cp.paper_params(n), dt=0.5, num_steps=3,
        integrator=s2.VariationalIntegrator(), throw=False,
    )
    assert sol.result in (s2.RESULTS.step_too_large, s2.RESULTS.newton_failed), sol.result
    assert int(sol.failed_step) == 0
    assert bool(jnp.all(jnp.isfinite(sol.q))) and bool(jnp.all(jnp.isfinite(sol.omega)))
    np.testing.assert_array_equal(sol.q[-1], q0)


@pytest.mark.slow
def test_chain_vi_matches_dense_newton_over_200_steps():
    """Newton's method on the displacements with the O(n) tilted solve (`_displacement_newton`) reaches
    the same trajectory as the chord iterations with the dense Jacobian of (3.16)."""
    n = 16
    params = cp.paper_params(n)
    q0, omega0 = cp.paper_state(n)
    # Tight tolerances for both, so that the comparison sees round-off, not the stopping rules.
    integrator = s2.VariationalIntegrator(newton=s2.NewtonSettings(rtol=1e-15, atol=1e-15))
    chain = s2.simulate(
        cp.lagrangian, q0, omega0, params, dt=0.01, num_steps=200, save_every=200, integrator=integrator
    )
    dense_system = s2.LagrangianSystem(cp.lagrangian, inertia_structure="dense")
    params = jax.tree_util.tree_map(jnp.asarray, params)
    args = dense_system.prepare(jnp.asarray(q0), params)
    state = integrator.init(dense_system, 0.0, (jnp.asarray(q0), jnp.asarray(omega0)), args)

    def body(carry, _):
        y, s = carry
        y, s, _ = integrator.step(dense_system, jnp.zeros(()), jnp.asarray(0.01), y, args, s)
        return (y, s), None

    y0 = (jnp.asarray(q0), jnp.asarray(omega0))
    ((q, omega), _), _ = jax.jit(lambda c: jax.lax.scan(body, c, length=200))((y0, state))
    # Both solve (3.16) to the same tolerance; 200 steps of a 16-link chain amplify round-off.
    np.testing.assert_allclose(chain.q[-1], q, rtol=0, atol=1e-11)
    np.testing.assert_allclose(chain.omega[-1], omega, rtol=0, atol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("adjoint", [s2.DirectAdjoint(), s2.ReversibleAdjoint()])
def test_chain_gradients_match_finite_differences(adjoint):
    """Gradients through the chain solve and the chord iterations (implicit function theorem)."""
    n = 5
    params = cp.paper_params(n)  # concrete, so simulate takes the chain path under jax.grad too
    q0, omega0 = (jnp.asarray(x) for x in cp.paper_state(n))

    def loss(scale):
        sol = s2.simulate(
            cp.lagrangian, q0, scale * omega0, params, dt=0.01, num_steps=100, save_every=100, adjoint=adjoint
        )
        return jnp.sum(sol.q[-1] * jnp.arange(3.0)[None]) + jnp.sum(sol.omega[-1])

    eps = 1e-3
    fd = (8 * (loss(1.0 + eps) - loss(1.0 - eps)) - (loss(1.0 + 2 * eps) - loss(1.0 - 2 * eps))) / (12 * eps)
    # A fourth-order stencil at eps = 1e-3: truncation ~eps⁴, round-off ~1e-13/eps (measured 5e-10).
    np.testing.assert_allclose(jax.grad(loss)(1.0), fd, rtol=1e-8)


@pytest.mark.slow
def test_chain_forward_and_reverse_mode_agree_under_jit_and_vmap():
    """The implicit-function derivative through the O(n) tilted solve (`newton_root` with
    `jacobian_solve`, a `jax.custom_jvp`) in both modes: `jax.jvp` and `jax.grad` of a loss of
    the first link's mass agree, under `jax.jit` and `jax.vmap` over two values, and match
    central differences."""
    n = 5
    params = jax.tree_util.tree_map(jnp.asarray, cp.paper_params(n))
    q0, omega0 = (jnp.asarray(x) for x in cp.paper_state(n))
    system = s2.LagrangianSystem(cp.lagrangian, inertia_structure="chain")

    def loss(scale):
        # The first link's mass (scaling all of them leaves the motion alone).
        p = {**params, "masses": params["masses"].at[0].multiply(scale)}
        sol = s2.simulate(system, q0, omega0, p, dt=0.01, num_steps=60, save_every=60)
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


@pytest.mark.parametrize("n", [1, 2, 9, 32, 40])
def test_cholesky_and_its_solve_against_numpy(n, monkeypatch):
    """`_inertia.cholesky` and `cholesky_solve` against numpy's factor and solve of a random
    symmetric positive definite matrix, on the XLA path up to 32 rows (which this one-device
    process would not take by itself: forced) and on LAPACK's beyond."""
    from s2jax import _inertia
    from s2jax._inertia import cholesky, cholesky_solve

    monkeypatch.setattr(_inertia, "_xla_cholesky", lambda rows: rows <= _inertia.MAX_XLA_CHOLESKY_BODIES)

    rng = np.random.default_rng(n)
    a = rng.normal(size=(n, n))
    matrix = a @ a.T + n * np.eye(n)
    rhs = rng.normal(size=n)
    factor = cholesky(jnp.asarray(matrix))
    np.testing.assert_allclose(factor, np.linalg.cholesky(matrix), rtol=0, atol=1e-14 * np.sqrt(n) * n)
    expected = np.linalg.solve(matrix, rhs)
    solved = cholesky_solve(factor, jnp.asarray(rhs))
    np.testing.assert_allclose(solved, expected, rtol=0, atol=1e-14 * np.linalg.cond(matrix))
