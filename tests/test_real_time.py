"""Control a user can apply (issue 31 item 3): a solution's feedback policy and model predictive
control by real-time iterations, in the graph (`receding_horizon`) and from Python
(`RealTimeController`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax.control._real_time import RealTimeState, _first_state, real_time_step
from s2jax.control.examples import spherical_pendulum_swing_up
from s2jax.models import spherical_pendulum as pendulum

PARAMS = {"m": 1.0, "r": 1.0, "g": 9.81}
LONGER = {"m": 1.0, "r": 1.05, "g": 9.81}  # the plant's rod 5 % longer than the model's
UP = np.array([[0.0, 0.0, -1.0]])
DT = 0.02


def _balance(num_steps=50, params=PARAMS):
    """Hold the pendulum upright: ℓ = |q − up|² + 0.1 |ω|² + 0.01 |u|², Φ = 10 |q_N − up|² + |ω_N|²."""
    up = jnp.asarray(UP)
    return s2.control.Problem(
        pendulum.lagrangian, params, s2.forces.PivotTorque(0), DT, num_steps,
        running_cost=lambda t, q, w, u: jnp.sum((q - up) ** 2) + 0.1 * jnp.sum(w**2) + 0.01 * jnp.sum(u**2),
        terminal_cost=lambda q, w: 10.0 * jnp.sum((q - up) ** 2) + jnp.sum(w**2),
    )


# 0.2 rad from upright, moving away from it at 0.5 rad/s
TILTED = np.array([[np.sin(0.2), 0.0, -np.cos(0.2)]]), np.array([[0.0, 0.5, 0.0]])


@pytest.fixture(scope="module")
def lift():
    """A 2 s swing-up with |u_i| ≤ 1.5 m g r and the terminal constraint upright at rest."""
    problem, q0, omega0, init = spherical_pendulum_swing_up(horizon=2.0, bound=1.5)
    return problem, q0, omega0, s2.control.solve(problem, q0, omega0, solver=s2.control.ILQR(), init=init)


def test_the_feedback_policy_replays_the_plan_and_corrects_a_longer_rod(lift):
    """`simulate` running the policy from the plan's initial state retraces the plan to round-off
    (δx = 0 gives ū), on the dynamics the plan is optimal for (`solve` refined them to meet the
    fidelity); on a plant with a 5 % longer rod the open-loop controls end 0.8 from upright, the
    policy's within 1e-2 (a hundredth of the open-loop miss)."""
    problem, q0, omega0, solution = lift
    policy = s2.control.feedback_policy(problem, solution)
    assert solution.substeps > 1  # refined: the replay must take its sub-steps to retrace it
    replay = problem.with_substeps(solution.substeps).simulate(q0, omega0, policy)
    options = {"dt": problem.dt, "num_steps": problem.num_steps, "force": problem.force}
    np.testing.assert_allclose(replay.q, solution.q, rtol=0, atol=1e-14)
    np.testing.assert_allclose(replay.omega, solution.omega, rtol=0, atol=1e-13)

    def miss(controls):
        run = s2.simulate(problem.lagrangian, q0, omega0, LONGER, controls=controls, **options)
        return float(jnp.linalg.norm(run.q[-1] - UP)) + float(jnp.linalg.norm(run.omega[-1]))

    open_loop, closed_loop = miss(solution.controls), miss(policy)
    assert open_loop > 0.5
    assert closed_loop < 0.05 and closed_loop < 0.05 * open_loop
    # the policy's controls stay inside the bounds, and it is a function simulate can take under jit
    u = policy(jnp.asarray(0.5), jnp.asarray(UP), jnp.zeros((1, 3)))
    assert float(jnp.max(jnp.abs(u))) <= float(problem.upper[0]) + 1e-15


def _cay(f, x):
    """cay(f) x = x + 2/(1 + |f|²) (f × x + f × (f × x)), 002 (3.15), in numpy."""
    fx = np.cross(f, x)
    return x + 2.0 / (1.0 + np.sum(f * f, -1, keepdims=True)) * (fx + np.cross(f, fx))


def _from_chart(qb, wb, basis, x):
    """The chart of `s2jax._chart` for one body, rewritten in numpy: (a, b) ↦ (F q̄, F(ω̄ + b·e)),
    F = cay(½ q̄ × a·e)."""
    a, b = x[:2], x[2:]
    f = 0.5 * np.cross(qb, a @ basis)
    return _cay(f, qb), _cay(f, wb + b @ basis)


def _to_chart(qb, wb, basis, q, w):
    """Its inverse, for one body: f = q̄ × q / (1 + q̄·q) takes q̄ to q; a = e·2 f × q̄, b = e·(Fᵀω − ω̄)."""
    f = np.cross(qb, q) / (1.0 + np.sum(qb * q, -1, keepdims=True))
    return np.concatenate([basis[0] @ (2.0 * np.cross(f, qb))[0], basis[0] @ (_cay(-f, w) - wb)[0]])


def test_the_gains_are_a_riccati_recursion_on_finite_differences():
    """The policy's gains K_k equal those of a discrete Riccati recursion written in numpy on
    central differences of one compiled step (`Stepper`), of the costs written out in numpy, and
    of the chart rewritten in numpy (its tangent bases taken from the policy: they define the
    coordinates). No constraint, no bounds: the recursion is the plain LQR one."""
    problem = _balance(num_steps=10)
    solution = s2.control.solve(problem, *TILTED, solver=s2.control.ILQR())
    policy = s2.control.feedback_policy(problem, solution)
    q, w, u, basis = (np.asarray(a) for a in (solution.q, solution.omega, solution.controls, policy.basis))
    stepper = s2.Stepper(pendulum.lagrangian, q[0], w[0], PARAMS, dt=DT, force=s2.forces.PivotTorque(0), u0=u[0])

    def step(k, z):
        qk, wk = _from_chart(q[k], w[k], basis[k], z[:4])
        q1, w1 = stepper(qk, wk, u[k] + z[4:])
        return _to_chart(q[k + 1], w[k + 1], basis[k + 1], np.asarray(q1), np.asarray(w1))

    def running(k, z):
        qk, wk = _from_chart(q[k], w[k], basis[k], z[:4])
        return DT * (np.sum((qk - UP) ** 2) + 0.1 * np.sum(wk**2) + 0.01 * np.sum((u[k] + z[4:]) ** 2))

    def terminal(z):
        qn, wn = _from_chart(q[-1], w[-1], basis[-1], z)
        return 10.0 * np.sum((qn - UP) ** 2) + np.sum(wn**2)

    def jacobian(f, size, eps=1e-6):
        eye = np.eye(size)
        return np.stack([(f(eps * e) - f(-eps * e)) / (2 * eps) for e in eye], axis=1)

    def hessian(f, size, eps=1e-4):
        eye = eps * np.eye(size)
        return np.array([
            [(f(ei + ej) - f(ei - ej) - f(ej - ei) + f(-ei - ej)) / (4 * eps**2) for ej in eye] for ei in eye
        ])

    vxx = hessian(terminal, 4)
    gains = [None] * 10
    for k in reversed(range(10)):
        ab = jacobian(lambda z: step(k, z), 7)
        a, b = ab[:, :4], ab[:, 4:]
        h = hessian(lambda z: running(k, z), 7)
        quu = h[4:, 4:] + b.T @ vxx @ b
        qux = h[4:, :4] + b.T @ vxx @ a
        qxx = h[:4, :4] + a.T @ vxx @ a
        gains[k] = -np.linalg.solve(quu, qux)
        vxx = qxx + qux.T @ gains[k]  # at the LQR optimum, Kᵀ Quu K + Kᵀ Qux + Quxᵀ K = Quxᵀ K
        vxx = 0.5 * (vxx + vxx.T)
    gains = np.stack(gains)
    # second differences at ε = 1e-4 carry ~ε² of the third derivatives and round-off/ε²: measured
    # 1.7e-7 of max|K| (the same recursion on jax's derivatives agrees to round-off)
    np.testing.assert_allclose(policy.gains, gains, rtol=0, atol=1e-6 * np.max(np.abs(gains)))


def test_one_real_time_iteration_is_one_ilqr_iteration():
    """From the rollout of controls ū, measured at its own initial state, a real-time iteration's
    controls are those of `solve` with `ILQR(max_steps=1)` from ū (its line search accepts the full
    step here, which the test checks), shifted by one step; the control applied is the first."""
    problem = _balance(num_steps=20)
    q0, omega0 = (jnp.asarray(x) for x in TILTED)
    guess = jnp.zeros((20, 3))
    one = s2.control.solve(problem, q0, omega0, solver=s2.control.ILQR(max_steps=1), init=guess, throw=False)
    rollout = problem.simulate(q0, omega0, guess)
    full_step = s2.control.solve(problem, q0, omega0, solver=s2.control.ILQR(max_steps=1, rtol=0.0), init=guess,
                                 throw=False)
    assert float(one.cost) < float(problem.cost(rollout, guess))  # the step was taken
    np.testing.assert_array_equal(one.controls, full_step.controls)
    state = RealTimeState(rollout.q, rollout.omega, guess, jnp.zeros(0), jnp.asarray(10.0), jnp.asarray(1e-6))
    planned = problem.planned(q0, omega0)
    applied, shifted, result, accepted = jax.jit(
        lambda state: real_time_step(planned, state, q0, omega0, iterations=1, steps=1, regularisation=1e-6)
    )(state)
    assert result == s2.RESULTS.successful and int(accepted) == 1
    np.testing.assert_allclose(applied, one.controls[:1], rtol=0, atol=1e-13)
    np.testing.assert_allclose(shifted.controls[:-1], one.controls[1:], rtol=0, atol=1e-13)
    np.testing.assert_allclose(shifted.q[:-1], one.q[1:], rtol=0, atol=1e-13)
    # the tail: the last control held for one more step of the model
    (q_tail, _), _ = planned.step(20 * DT, one.q[-1], one.omega[-1], one.controls[-1])
    np.testing.assert_allclose(shifted.q[-1], q_tail, rtol=0, atol=1e-13)


# 10 s: kept out of the fast tier (README, 'Tests'); one real-time iteration is checked there
@pytest.mark.slow
def test_real_time_mpc_balances_a_plant_with_a_longer_rod():
    """One iteration per control step, plant 5 % longer than the model, started 0.2 rad from
    upright and moving away: upright within 1e-2 after 1 s and 1e-5 at 3 s, like MPC that solves
    to convergence at every step (iLQR, max_steps = 20): their controls agree to 1e-4. Left alone
    the plant falls (to 2 from upright)."""
    plant = _balance(params=LONGER)
    options = {"solver": s2.control.ILQR(max_steps=20), "num_solves": 150, "plant": plant}
    real_time = s2.control.receding_horizon(_balance(), *TILTED, real_time_iterations=1, **options)
    converged = s2.control.receding_horizon(_balance(), *TILTED, **options)
    assert np.all(np.asarray(real_time.results._value) == s2.RESULTS.successful._value)
    np.testing.assert_array_equal(real_time.iterations, np.ones(150, int))
    for closed in (real_time, converged):
        distance = jnp.linalg.norm(closed.q - UP[None], axis=-1)[:, 0]
        assert float(jnp.max(distance[50:])) < 1e-2 and float(distance[-1]) < 1e-5
    np.testing.assert_allclose(real_time.controls, converged.controls, rtol=0, atol=1e-4)
    free = s2.simulate(pendulum.lagrangian, *TILTED, LONGER, dt=DT, num_steps=150)
    assert float(jnp.max(jnp.linalg.norm(free.q - UP[None], axis=-1))) > 1.5


@pytest.mark.slow  # 10–16 s: kept out of the fast tier (README, 'Tests')
def test_the_controller_from_python_is_the_real_time_loop():
    """A Python loop of `RealTimeController` calls and plant steps (`Stepper`) gives the closed
    loop of `receding_horizon(real_time_iterations=2, steps_per_solve=2)` to round-off; a measured
    state off the sphere is refused, naming the body, and changes nothing."""
    problem = _balance(num_steps=30)
    closed = s2.control.receding_horizon(
        problem, *TILTED, solver=s2.control.ILQR(), num_solves=5, steps_per_solve=2, real_time_iterations=2
    )
    controller = s2.control.RealTimeController(problem, *TILTED, iterations=2, steps_per_solve=2)
    plant = s2.Stepper(pendulum.lagrangian, *TILTED, PARAMS, dt=DT, force=s2.forces.PivotTorque(0), u0=np.zeros(3))
    q, omega = (jnp.asarray(x) for x in TILTED)
    for k in range(5):
        if k == 2:
            with pytest.raises(ValueError, match="body 0"):
                controller(2.0 * q, omega)
        controls = controller(q, omega)
        np.testing.assert_allclose(controls, closed.controls[2 * k : 2 * k + 2], rtol=0, atol=1e-12)
        for u in controls:
            q, omega = plant(q, omega, u)
        np.testing.assert_allclose(q, closed.q[2 * k + 2], rtol=0, atol=1e-12)
    assert controller.result == s2.RESULTS.successful and controller.refused == 0
    # A controller of an equal problem (new lambdas of the same code, as a re-run notebook cell
    # makes) shares the compiled step; new param values are its inputs, not new constants.
    again = s2.control.RealTimeController(_balance(num_steps=30), *TILTED, iterations=2, steps_per_solve=2)
    longer = s2.control.RealTimeController(
        _balance(num_steps=30, params=LONGER), *TILTED, iterations=2, steps_per_solve=2
    )
    # ... and so do new solver settings: iLQR's μ floor, rtol and the constraint tolerance are values
    first_solves = _first_state.cache_size()
    looser = s2.control.RealTimeController(
        _balance(num_steps=30), *TILTED, solver=s2.control.ILQR(regularisation=1e-3, rtol=1e-6),
        constraint_tolerance=1e-5, iterations=2, steps_per_solve=2,
    )
    assert again._step is controller._step and longer._step is controller._step and looser._step is controller._step
    assert _first_state.cache_size() == first_solves
    start = [jnp.asarray(x) for x in TILTED]
    np.testing.assert_allclose(again(*start), closed.controls[:2], rtol=0, atol=1e-12)
    assert not np.allclose(longer(*start), closed.controls[:2], rtol=0, atol=1e-6)
    assert not np.allclose(looser(*start), closed.controls[:2], rtol=0, atol=1e-9)  # its settings took effect
    assert controller._step._cache_size() == 1


def test_real_time_options_are_checked():
    problem = _balance(num_steps=5)
    with pytest.raises(ValueError, match="iLQR iterations"):
        s2.control.receding_horizon(
            problem, *TILTED, solver=s2.control.SingleShooting(), num_solves=2, real_time_iterations=1
        )
    with pytest.raises(ValueError, match=r"real_time_iterations\) must be a positive Python int; got 0"):
        s2.control.receding_horizon(problem, *TILTED, solver=s2.control.ILQR(), num_solves=2, real_time_iterations=0)
    with pytest.raises(ValueError, match="body 0"):
        s2.control.RealTimeController(problem, 2.0 * TILTED[0], TILTED[1])
    with pytest.raises(TypeError, match="ControlSolution"):
        s2.control.feedback_policy(problem, "a solution")
