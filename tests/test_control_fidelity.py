"""Issue 31, item 1: every control solution's (and fit's) estimate of how far the continuous system, driven by
its controls, runs from the model (`ControlSolution.continuous_miss`), and `solve` refining the
model's sub-steps until that miss is within `Problem.fidelity`, both against an independent tight
solve of the continuous equations (a point mass on a rod in Cartesian coordinates, DOP853 at 1e-12,
`cartesian_chain_reference`), the controls held over each step."""

import dataclasses

import cartesian_chain_reference as cartesian
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax.control import _solve as control_solve
from s2jax.models import spherical_pendulum as pendulum

TARGET = jnp.array([[0.6, 0.0, 0.8]])
Q0, OMEGA0 = np.array([[0.0, 0.6, 0.8]]), np.zeros((1, 3))


def _reach(num_steps, fidelity=None):
    """test_control's reach problem (0.4 s towards TARGET), in `num_steps` steps."""
    return s2.control.Problem(
        pendulum.lagrangian, {"m": 1.0, "r": 1.0, "g": 9.81}, s2.forces.PivotTorque(0), 0.4 / num_steps, num_steps,
        running_cost=lambda t, q, omega, u: jnp.sum(u**2),
        terminal_cost=lambda q, omega: 100.0 * jnp.sum((q - TARGET) ** 2) + jnp.sum(omega**2),
        fidelity=fidelity,
    )


def _true_miss(problem, solution):
    """max over the control instants and bodies of max(|Δq|, |Δω|) against the Cartesian
    reference, one DOP853 solve per step with that step's control held."""
    q, omega = np.asarray(solution.q[0]), np.asarray(solution.omega[0])
    miss = 0.0
    for k, u in enumerate(np.asarray(solution.controls)):
        q, omega = cartesian.solve(q, omega, [1.0], [1.0], 9.81, lambda t, u=u: u, np.zeros(3), problem.dt)
        distances = [np.linalg.norm(np.asarray(solution.q[k + 1]) - q, axis=-1)]
        distances.append(np.linalg.norm(np.asarray(solution.omega[k + 1]) - omega, axis=-1))
        miss = max(miss, float(np.max(distances)))
    return miss


@pytest.mark.slow
@pytest.mark.parametrize("num_steps", [10, 20])
def test_the_estimated_miss_is_the_continuous_systems(num_steps):
    problem = _reach(num_steps)  # fidelity=None: the model at one step per control step
    solution = s2.control.solve(problem, Q0, OMEGA0, solver=s2.control.ILQR())
    true = _true_miss(problem, solution)
    assert solution.substeps == 1 and true > 1e-4  # the VI's O(h²) miss at this step: a check that can fail
    # The estimate's own error is RK4's at h/8, O(h⁴/8⁴): measured ~1e-7 of the miss, which
    # falls 4× per halving of h (1.2e-3 and 2.9e-4 in q for 10 and 20 steps).
    np.testing.assert_allclose(solution.continuous_miss, true, rtol=1e-5)


@pytest.mark.slow
def test_solve_refines_the_model_until_the_continuous_miss_is_within_the_fidelity():
    """At 10 steps the reach's miss is ~2e-3; asked for 5e-4, `solve` refines to the sub-steps
    that the O(h²) law predicts, and the independent reference confirms the miss. Under
    `jax.jit` and `jax.vmap` it cannot refine: it reports the miss with its code, or raises."""
    coarse = s2.control.solve(_reach(10), Q0, OMEGA0, solver=s2.control.ILQR())
    iterations, solutions = control_solve._iterate_program.cache_size(), control_solve._finish.cache_size()
    problem = _reach(10, fidelity=5e-4)
    solution = s2.control.solve(problem, Q0, OMEGA0, solver=s2.control.ILQR())
    assert coarse.continuous_miss > 5e-4 and solution.result == s2.RESULTS.successful
    # The fidelity is a value of the compiled programs, and so are the sub-steps: the
    # iterations and the solution (its trajectory and miss) at the refined count ran the
    # programs of one sub-step, compiled by the coarse solve.
    assert control_solve._iterate_program.cache_size() == iterations
    assert control_solve._finish.cache_size() == solutions
    # the power of two at or above (1.25 m / f)^(1/2)
    expected = 2 ** int(np.ceil(np.log2(np.sqrt(1.25 * float(coarse.continuous_miss) / 5e-4))))
    assert solution.substeps == expected > 1
    true = _true_miss(problem, solution)
    assert true <= 5e-4
    np.testing.assert_allclose(solution.continuous_miss, true, rtol=1e-4)
    # the solution is the refined model's trajectory of its controls
    replay = problem.with_substeps(solution.substeps).simulate(Q0, OMEGA0, solution.controls)
    np.testing.assert_allclose(replay.q, solution.q, rtol=0, atol=1e-14)

    def traced(q0, throw):
        return s2.control.solve(problem, q0, OMEGA0, solver=s2.control.ILQR(), throw=throw)

    # under jit and vmap (two members): each member's code, and the miss of the one-step model
    inside = jax.jit(jax.vmap(lambda q0: traced(q0, False)))(np.stack([Q0, Q0]))
    assert np.all(inside.result == s2.RESULTS.continuous_miss_above_fidelity) and inside.substeps == 1
    np.testing.assert_allclose(inside.continuous_miss, coarse.continuous_miss, rtol=1e-10)
    with pytest.raises(Exception, match="more than Problem.fidelity"):
        jax.jit(lambda q0: traced(q0, True))(Q0)


def test_substeps_take_the_base_method_at_the_finer_step():
    """`Substeps(base, 4)` at h with u_k held is `base` at h/4 with each u_k repeated 4 times."""
    problem = _reach(10)
    controls = 0.3 * jnp.sin(jnp.arange(30.0)).reshape(10, 3)
    base = s2.ExplicitVariationalIntegrator()
    options = {"force": problem.force, "throw": True}
    refined = s2.simulate(
        pendulum.lagrangian, Q0, OMEGA0, problem.params, dt=problem.dt, num_steps=10,
        integrator=s2.Substeps(base, 4), controls=controls, **options,
    )
    fine = s2.simulate(
        pendulum.lagrangian, Q0, OMEGA0, problem.params, dt=problem.dt / 4, num_steps=40, integrator=base,
        controls=jnp.repeat(controls, 4, axis=0), save_every=4, **options,
    )
    np.testing.assert_allclose(refined.q, fine.q, rtol=0, atol=1e-14)
    np.testing.assert_allclose(refined.omega, fine.omega, rtol=0, atol=1e-13)
    assert s2.Substeps(base, 4).order == 2 and s2.Substeps(base, 4).is_symmetric
    with pytest.raises(ValueError, match="count ≥ 1"):
        s2.Substeps(base, 0)
    with pytest.raises(ValueError, match="`fidelity` must be a positive float or None"):
        _reach(10, fidelity=-1.0)
    with pytest.raises(ValueError, match="`substeps` must be an int ≥ 1"):
        problem.with_substeps(0)


def test_a_runtime_count_takes_the_steps_of_substeps_in_one_program():
    """`RuntimeSubsteps(base, count)`, the count a value of the program (iLQR's iterations in
    `solve` run it), takes the steps of `Substeps(base, count)` and has their forward-mode
    derivatives, for every count from one compiled step; reverse mode cannot go through its
    loop of traced length, which is why only forward-mode solvers use it."""
    problem = _reach(10).planned(jnp.asarray(Q0), jnp.asarray(OMEGA0))
    u = jnp.array([0.3, -0.2, 0.1])

    @jax.jit
    def runtime_step(count, q, omega):
        return dataclasses.replace(problem.with_runtime_substeps(), runtime_substeps=count).step(0.0, q, omega, u)[0]

    for count in (1, 3, 4):
        static = problem.with_substeps(count).step(0.0, jnp.asarray(Q0), jnp.asarray(OMEGA0), u)[0]
        runtime = runtime_step(jnp.asarray(count), jnp.asarray(Q0), jnp.asarray(OMEGA0))
        for a, b in zip(static, runtime):
            np.testing.assert_allclose(b, a, rtol=0, atol=1e-15)
        static_jacobian = jax.jacfwd(lambda q: problem.with_substeps(count).step(0.0, q, jnp.asarray(OMEGA0), u)[0])
        runtime_jacobian = jax.jacfwd(lambda q: runtime_step(jnp.asarray(count), q, jnp.asarray(OMEGA0)))
        for a, b in zip(static_jacobian(jnp.asarray(Q0)), runtime_jacobian(jnp.asarray(Q0))):
            np.testing.assert_allclose(b, a, rtol=0, atol=1e-14)
    assert runtime_step._cache_size() == 1
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work"):
        jax.grad(lambda q: runtime_step(jnp.asarray(2), q, jnp.asarray(OMEGA0))[0][0, 0])(jnp.asarray(Q0))


@pytest.mark.slow
def test_fit_refines_the_model_until_the_continuous_miss_is_within_the_fidelity():
    """Directions of a swinging pendulum (r = 1 m) every 0.05 s for 4 s from the Cartesian
    reference, with noise σ = 1e-3. Fitted at one VI step per observation the model misses the
    motion by more than the noise, and r comes out biased by tens of standard errors; asked for
    a fidelity of 1e-3, `fit` refines the model (`FitResult.substeps`) and r is within 4 standard
    errors of the truth. The miss it reports is the independent reference's."""
    dt, steps, r0 = 0.05, 80, 1.2
    q0, omega0 = np.array([[np.sin(1.0), 0.0, np.cos(1.0)]]), np.array([[0.0, 1.5, 0.0]])

    def cartesian_run(length):
        q, omega, qs, omegas = q0[0:1], omega0[0:1], [q0], [omega0]
        for _ in range(steps):
            q, omega = cartesian.solve(q, omega, [1.0], [length], 9.81, lambda t: np.zeros(3), np.zeros(3), dt)
            qs.append(q), omegas.append(omega)
        return np.stack(qs), np.stack(omegas)

    truth_q, _ = cartesian_run(1.0)
    rng = np.random.default_rng(0)
    data = truth_q[1:] + 1e-3 * rng.normal(size=truth_q[1:].shape)
    times = dt * np.arange(1, steps + 1)
    options = {"times": times, "bodies": [0], "dt": dt, "q0": q0, "omega0": omega0, "free": ["r"]}
    params = {"m": 1.0, "r": r0, "g": 9.81}
    coarse = s2.fit.fit(pendulum.lagrangian, params, data, fidelity=None, **options)
    fine = s2.fit.fit(pendulum.lagrangian, params, data, fidelity=1e-3, **options)
    assert abs(float(coarse.params["r"]) - 1.0) > 20 * float(coarse.standard_errors["r"])  # measured 83
    assert fine.substeps > 1 and fine.continuous_miss <= 1e-3
    assert abs(float(fine.params["r"]) - 1.0) < 4 * float(fine.standard_errors["r"])  # measured 2.4
    # the reported miss against the Cartesian reference at the fitted r
    fitted = float(fine.params["r"])
    model = s2.simulate(
        pendulum.lagrangian, q0, omega0, fine.params, dt=dt, num_steps=steps,
        integrator=s2.Substeps(s2.ExplicitVariationalIntegrator(), fine.substeps),
    )
    reference_q, reference_omega = cartesian_run(fitted)
    true = max(
        float(np.max(np.linalg.norm(np.asarray(model.q) - reference_q, axis=-1))),
        float(np.max(np.linalg.norm(np.asarray(model.omega) - reference_omega, axis=-1))),
    )
    np.testing.assert_allclose(fine.continuous_miss, true, rtol=1e-3)
