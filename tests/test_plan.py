"""The plan (`s2jax._plan`): one choice of system and integrator, shared by every entry point.

Fitting and trajectory optimisation run on the general-Lagrangian models and on a
`HamiltonianSystem` because they call the plan `simulate` calls; iLQR linearises exactly the
step `simulate` takes.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax._plan import plan
from s2jax.models import double_spherical_pendulum as dsp, rotating_spherical_pendulum as rotating

TARGET = np.array([[0.6, 0.0, 0.8]])


def _rotating_hamiltonian(q, p, params):
    """The Legendre transform of `rotating.lagrangian` (written out independently of it)."""
    m, r, g, rate = params["m"], params["r"], params["g"], params["Omega"]
    frame = jnp.cross(jnp.array([0.0, 0.0, 1.0]), q)
    return jnp.sum(p**2) / (2 * m * r**2) - rate * jnp.sum(p * frame) - m * g * r * q[0, 2]


def _reach(model, num_steps=20):
    """Drive the bob to TARGET and stop it there (a terminal constraint), at least |u|²."""
    target = jnp.asarray(TARGET)
    return s2.control.Problem(
        model, rotating.paper_params(), s2.forces.PivotTorque(0), 0.02, num_steps,
        running_cost=lambda t, q, omega, u: jnp.sum(u**2),
        terminal_constraint=lambda q, omega: jnp.concatenate([jnp.ravel(q - target), jnp.ravel(omega)]),
    )


@pytest.fixture(scope="module")
def ilqr_on_the_lagrangian():
    """iLQR's solution of `_reach` on the rotating pendulum's Lagrangian (shared: one compile)."""
    q0, omega0 = rotating.paper_state()
    return s2.control.solve(_reach(rotating.lagrangian), q0, omega0, solver=s2.control.ILQR())


def test_auto_integrator_selects_by_system_kind():
    auto = s2.AutoIntegrator()
    assert type(auto.select(s2.LagrangianSystem(dsp.lagrangian), "diagonal")) is s2.ExplicitVariationalIntegrator
    assert type(auto.select(s2.LagrangianSystem(dsp.lagrangian), "chain")) is s2.VariationalIntegrator
    assert type(auto.select(s2.GeneralLagrangianSystem(rotating.lagrangian))) is s2.GeneralVariationalIntegrator
    assert type(auto.select(s2.HamiltonianSystem(_rotating_hamiltonian))) is s2.HamiltonianRattle
    # `integrator=AutoIntegrator()` is `integrator=None`
    q0, omega0 = (jnp.asarray(x) for x in rotating.paper_state())
    by_none = plan(rotating.lagrangian, q0, omega0, rotating.paper_params())
    by_auto = plan(rotating.lagrangian, q0, omega0, rotating.paper_params(), integrator=auto)
    assert by_none == by_auto
    assert type(by_none.system) is s2.GeneralLagrangianSystem


def test_a_linearised_run_of_a_coupled_m_takes_rattle():
    """`AutoIntegrator(linearised=True)`, a control problem's default: `Rattle` (002's map by
    multipliers) for a coupled M of up to 8 bodies without a force that reads ω; otherwise as
    `AutoIntegrator()`."""
    linearised = s2.AutoIntegrator(linearised=True)
    system = s2.LagrangianSystem(dsp.lagrangian, s2.forces.PivotTorque(0))
    assert type(linearised.select(system, "dense", 2)) is s2.Rattle
    assert type(linearised.select(system, "chain", 8)) is s2.Rattle
    assert type(linearised.select(system, None, 2)) is s2.Rattle  # M unknown before compiling: any M
    assert type(linearised.select(system, "dense", 9)) is s2.VariationalIntegrator  # Rattle's LU beyond 8
    assert type(linearised.select(system, "chain", 9)) is s2.Rattle  # a chain's: O(n), as unlinearised
    assert type(linearised.select(system, "chain")) is s2.VariationalIntegrator  # n unknown
    assert type(linearised.select(system, "diagonal", 2)) is s2.ExplicitVariationalIntegrator
    damped = s2.LagrangianSystem(dsp.lagrangian, s2.forces.LinearDamping(0.1))
    assert type(linearised.select(damped, "dense", 2)) is s2.VariationalIntegrator  # Rattle takes no f(ω)
    assert type(s2.AutoIntegrator().select(system, "dense", 2)) is s2.VariationalIntegrator
    q0, omega0 = dsp.paper_state()
    problem = s2.control.Problem(
        dsp.lagrangian, dsp.paper_params(), s2.forces.PivotTorque(0), 0.01, 4,
        running_cost=lambda t, q, omega, u: jnp.sum(u**2),
    )
    assert type(problem.plan(jnp.asarray(q0), jnp.asarray(omega0)).integrator) is s2.Rattle


def test_the_default_on_a_chain_of_five_links_or_more_is_rattle():
    """`AutoIntegrator()` on a chain's M (002 §4.2) from `MIN_CHAIN_RATTLE_BODIES` links, no force
    reading ω: `Rattle`, the VI's map by multipliers in O(n). The run `simulate` gives by default is
    the VI's to round-off (its trajectory against `VariationalIntegrator()`'s, a second solve of
    (3.10)–(3.13)), under `jax.jit` with traced params as eagerly; below 5 links, with a force that
    reads ω, or M not known to be a chain's: the VI."""
    auto = s2.AutoIntegrator()
    chain = s2.models.chain_pendulum
    system = s2.LagrangianSystem(chain.lagrangian)
    assert type(auto.select(system, "chain", 5)) is s2.Rattle
    assert type(auto.select(system, "chain", 64)) is s2.Rattle
    assert type(auto.select(system, "chain", 4)) is s2.VariationalIntegrator
    assert type(auto.select(system, "dense", 16)) is s2.VariationalIntegrator
    assert type(auto.select(system, None, 16)) is s2.VariationalIntegrator
    damped = s2.LagrangianSystem(chain.lagrangian, s2.forces.LinearDamping(0.1))
    assert type(auto.select(damped, "chain", 16)) is s2.VariationalIntegrator  # Rattle takes no f(ω)
    n = 6
    params = chain.paper_params(n)
    q0, omega0 = chain.paper_state(n)
    by_default = s2.simulate(chain.lagrangian, q0, omega0, params, dt=0.01, num_steps=200, save_every=50)
    by_vi = s2.simulate(chain.lagrangian, q0, omega0, params, dt=0.01, num_steps=200, save_every=50,
                        integrator=s2.VariationalIntegrator())
    assert by_default.integrator == "Rattle" and by_vi.integrator == "VariationalIntegrator"
    # With params traced (M unknown before compiling) the chain is probed, and chooses the same.
    traced = jax.jit(lambda p: s2.simulate(chain.lagrangian, q0, omega0, p, dt=0.01, num_steps=200, save_every=50))(
        jax.tree_util.tree_map(jnp.asarray, params)
    )
    assert traced.integrator == "Rattle"
    np.testing.assert_allclose(traced.q, by_default.q, rtol=0, atol=1e-13)  # the same program but for rounding
    # Measured 1e-14-1e-13 apart: each solve's Newton tolerance (1e-12 relative), not the method.
    np.testing.assert_allclose(by_default.q, by_vi.q, rtol=0, atol=1e-11)
    np.testing.assert_allclose(by_default.omega, by_vi.omega, rtol=0, atol=1e-10)


@pytest.mark.slow
def test_the_default_on_a_chain_under_vmap_and_grad_is_the_variational_integrators():
    """The default on a 5-link chain (`Rattle`) under `jax.vmap` (a user's, over initial states)
    and `jax.grad` (with respect to a length, params traced: the chain probed): the values and the
    gradient of `VariationalIntegrator()`'s runs of the same map, and the gradient that of central
    differences."""
    chain = s2.models.chain_pendulum
    n = 5
    params = jax.tree_util.tree_map(jnp.asarray, chain.paper_params(n))
    q0, omega0 = (jnp.asarray(x) for x in chain.paper_state(n))

    def final(q, w, p, integrator=None):
        return s2.simulate(chain.lagrangian, q, w, p, dt=0.01, num_steps=60, save_every=60, integrator=integrator).q[-1]

    starts = jnp.stack([q0, q0]), jnp.stack([omega0, -omega0])
    batched = jax.vmap(lambda q, w: final(q, w, params))(*starts)
    for k in range(2):
        np.testing.assert_allclose(
            batched[k], final(starts[0][k], starts[1][k], params, s2.VariationalIntegrator()), rtol=0, atol=1e-12
        )

    def loss(scale, integrator=None):
        p = {**params, "lengths": params["lengths"].at[2].multiply(scale)}
        return jnp.sum(final(q0, omega0, p, integrator) * jnp.arange(3.0)[None])

    by_default = jax.grad(loss)(1.0)
    np.testing.assert_allclose(by_default, jax.grad(lambda s: loss(s, s2.VariationalIntegrator()))(1.0), rtol=1e-9)
    eps = 1e-5  # central differences: truncation ~eps², round-off ~1e-13/eps
    np.testing.assert_allclose(by_default, (loss(1.0 + eps) - loss(1.0 - eps)) / (2 * eps), rtol=1e-6)
    assert abs(float(by_default)) > 1e-3


def test_plan_is_idempotent():
    """Planning a planned system again changes nothing: what `control` and `simulate_batch` rely on."""
    q0, omega0 = (jnp.asarray(x) for x in dsp.paper_state())
    first = plan(dsp.lagrangian, q0, omega0, dsp.paper_params())
    again = plan(first.system, q0, omega0, dsp.paper_params(), integrator=first.integrator)
    assert again == first


def test_integrator_system_type_is_the_only_compatibility_rule():
    """A new integrator declaring `system_type` is admitted or refused by the plan with no list to edit."""

    class OnlyGeneral(s2.RungeKutta4):
        system_type = s2.GeneralLagrangianSystem

    q0, omega0 = (jnp.asarray(x) for x in dsp.paper_state())
    # A (2.2) Lagrangian is a general one too: it runs as a GeneralLagrangianSystem
    planned = plan(dsp.lagrangian, q0, omega0, dsp.paper_params(), integrator=OnlyGeneral())
    assert type(planned.system) is s2.GeneralLagrangianSystem
    with pytest.raises(ValueError, match="OnlyGeneral needs a GeneralLagrangianSystem.*HamiltonianSystem runs"):
        plan(s2.HamiltonianSystem(_rotating_hamiltonian), q0[:1], omega0[:1], rotating.paper_params(),
             integrator=OnlyGeneral())


@pytest.mark.slow
def test_ilqr_drives_the_rotating_pendulum_to_rest_at_a_target(ilqr_on_the_lagrangian):
    """iLQR on a Lagrangian not of the form (2.2), the project's own rotating pendulum: it runs the
    GeneralVariationalIntegrator, meets the terminal constraint, and agrees with single shooting
    (a second solver through reverse-mode gradients of `simulate`) on the optimum."""
    problem = _reach(rotating.lagrangian)
    q0, omega0 = rotating.paper_state()
    ilqr = ilqr_on_the_lagrangian
    assert ilqr.result == s2.RESULTS.successful
    assert float(ilqr.constraint_violation) < 1e-6
    np.testing.assert_allclose(ilqr.q[-1], TARGET, atol=1e-6)
    np.testing.assert_allclose(ilqr.omega[-1], 0.0, atol=1e-6)
    shooting = s2.control.solve(problem, q0, omega0, solver=s2.control.SingleShooting())
    assert float(shooting.cost) == pytest.approx(float(ilqr.cost), rel=1e-5)

    # The step iLQR linearises is the step `simulate` runs: stepping the planned problem by hand
    # with the optimal controls reproduces the re-simulated trajectory bit for bit.
    planned = problem.planned(jnp.asarray(q0), jnp.asarray(omega0))
    assert type(planned.integrator) is s2.GeneralVariationalIntegrator
    sol = planned.simulate(jnp.asarray(q0), jnp.asarray(omega0), ilqr.controls)
    assert sol.integrator == "GeneralVariationalIntegrator"
    def step(y, xs):
        k, u = xs
        y, result = planned.step(k * problem.dt, *y, u)
        return y, result

    steps = (jnp.arange(problem.num_steps, dtype=float), ilqr.controls)
    y, results = jax.jit(lambda y0: jax.lax.scan(step, y0, steps))((jnp.asarray(q0), jnp.asarray(omega0)))
    assert bool(jnp.all(results._value == s2.RESULTS.successful._value))
    np.testing.assert_allclose(y[0], sol.q[-1], rtol=0, atol=1e-14)
    np.testing.assert_allclose(y[1], sol.omega[-1], rtol=0, atol=1e-12)


@pytest.mark.slow
def test_ilqr_on_a_hamiltonian_system_matches_its_lagrangian(ilqr_on_the_lagrangian):
    """The same problem given as a `HamiltonianSystem` (HamiltonianRattle) reaches the same
    optimum as the Lagrangian (GeneralVariationalIntegrator) to the methods' O(h²) difference."""
    q0, omega0 = rotating.paper_state()
    lagrangian = ilqr_on_the_lagrangian
    hamiltonian = s2.control.solve(
        _reach(s2.HamiltonianSystem(_rotating_hamiltonian)), q0, omega0, solver=s2.control.ILQR()
    )
    assert hamiltonian.result == s2.RESULTS.successful
    np.testing.assert_allclose(hamiltonian.q[-1], TARGET, atol=1e-6)
    # Two second-order methods at h = 0.02 over 0.4 s: their controls differ by O(h²) relative.
    assert float(hamiltonian.cost) == pytest.approx(float(lagrangian.cost), rel=2e-2)
    np.testing.assert_allclose(hamiltonian.controls, lagrangian.controls, atol=0.05 * float(
        jnp.max(jnp.abs(lagrangian.controls))))


@pytest.mark.slow
def test_fit_recovers_the_length_of_the_rotating_pendulum():
    """`fit` on a Lagrangian not of the form (2.2): r from noisy directions of the bob, within
    three standard errors of the truth, from a guess 20 % off."""
    truth = {**rotating.paper_params(), "r": 1.25}
    q0, omega0 = rotating.paper_state()
    dt, num_steps = 0.01, 200
    data = s2.simulate(rotating.lagrangian, q0, omega0, truth, dt=dt, num_steps=num_steps, save_every=10)
    assert data.integrator == "GeneralVariationalIntegrator"
    noise = 1e-3 * np.random.default_rng(1).normal(size=data.q[1:].shape)
    result = s2.fit.fit(
        rotating.lagrangian, {**truth, "r": 1.0}, np.asarray(data.q[1:]) + noise, times=np.asarray(data.t[1:]),
        bodies=[0], dt=dt, q0=q0, omega0=omega0, free=["r"],
    )
    error = float(result.params["r"]) - truth["r"]
    stderr = float(result.standard_errors["r"])
    assert 0 < stderr < 1e-2
    assert abs(error) < 3 * stderr


def test_control_problem_defaults_to_the_automatic_choice():
    """`Problem.integrator` None plans like `simulate`: the rotating pendulum's problem runs the
    general VI where it used to be refused (`RESULTS.not_lagrangian_form`)."""
    problem = _reach(rotating.lagrangian, num_steps=3)
    q0, omega0 = (jnp.asarray(x) for x in rotating.paper_state())
    assert problem.integrator is None
    planned = problem.planned(q0, omega0)
    assert type(planned.lagrangian) is s2.GeneralLagrangianSystem
    assert planned.lagrangian.force is problem.force
    assert planned.planned(q0, omega0) == planned
    controls = jnp.zeros((3, 3))
    by_problem = problem.simulate(q0, omega0, controls)
    by_simulate = s2.simulate(rotating.lagrangian, q0, omega0, rotating.paper_params(), dt=0.02, num_steps=3,
                              force=problem.force, controls=controls)
    np.testing.assert_array_equal(by_problem.q, by_simulate.q)
    # The explicit choice still refuses with a reason, before compiling
    with pytest.raises(ValueError, match="VariationalIntegrator needs that form"):
        dataclasses.replace(problem, integrator=s2.VariationalIntegrator()).planned(q0, omega0)


def test_simulate_batch_runs_the_plan_of_simulate():
    """A general L in `simulate_batch` runs what `simulate` runs, member for member."""
    q0, omega0 = (jnp.asarray(x) for x in rotating.paper_state())
    batch = s2.simulate_batch(rotating.lagrangian, jnp.stack([q0, q0]), jnp.stack([omega0, -omega0]),
                              rotating.paper_params(), dt=0.01, num_steps=5)
    assert batch.integrator == "GeneralVariationalIntegrator"
    alone = s2.simulate(rotating.lagrangian, q0, -omega0, rotating.paper_params(), dt=0.01, num_steps=5)
    np.testing.assert_allclose(batch.q[1], alone.q, rtol=0, atol=1e-15)


def test_jit_of_a_solve_with_closed_over_params_is_planned_eagerly():
    """Under `jax.jit` with the model's params closed over, the plan still sees concrete params."""
    problem = _reach(rotating.lagrangian, num_steps=3)
    q0, omega0 = (jnp.asarray(x) for x in rotating.paper_state())

    @jax.jit
    def final(controls):
        sol = problem.simulate(q0, omega0, controls)
        return sol.q[-1], sol.result

    q, result = final(jnp.zeros((3, 3)))
    assert result == s2.RESULTS.successful
    # XLA folds the closed-over state into the program: the same arithmetic to the last bit or two
    np.testing.assert_allclose(q, problem.simulate(q0, omega0, jnp.zeros((3, 3))).q[-1], rtol=0, atol=1e-15)


def test_the_checks_before_compiling_are_one_program_each(compilations):
    """The form check of (2.2), and the probe of M's structure where the params are traced by an
    eager `jax.grad`, each run as one compiled program (`s2jax._jit.evaluate_now`), not op by op
    (~50 programs of ~10 ms each in a new process); inside a user's `jax.jit`, where they run op
    by op, they find the same."""
    params = dsp.paper_params()
    q0, omega0 = (jnp.asarray(x) for x in dsp.paper_state())

    def fresh(q, qdot, p):  # a Lagrangian nothing has been compiled for
        return dsp.lagrangian(q, qdot, p)

    found = {}
    assert compilations(lambda: found.update(eager=s2.check_lagrangian_form(fresh, q0, omega0, params))) == 1
    jax.jit(lambda: found.update(jitted=s2.check_lagrangian_form(fresh, q0, omega0, params)))()
    np.testing.assert_allclose(found["jitted"], found["eager"], rtol=1e-14, atol=0)

    def probed_structure(l1):
        found["probed"] = plan(fresh, q0, omega0, {**params, "l1": l1}).system.inertia_structure
        return l1

    jax.grad(lambda l1: l1)(1.0)  # JAX's own programs of a scalar gradient, compiled first
    assert compilations(lambda: jax.grad(probed_structure)(1.0)) == 1  # one program, run at two draws
    eager = found["probed"]
    jax.jit(probed_structure)(1.0)
    assert found["probed"] == eager == "chain"


def test_a_model_declares_the_structure_of_its_inertia():
    """A declared structure is kept where the params are traced (a bare Lagrangian's is probed,
    and the probe knows only chain or dense), and checked on M: eagerly and in the graph."""
    from s2jax.models import n_body_on_sphere as nbody

    params = jax.tree.map(jnp.asarray, nbody.paper_params())
    q0, omega0 = (jnp.asarray(x) for x in nbody.paper_state())

    def structure(model, p):
        return plan(model, q0, omega0, p).system.inertia_structure

    assert structure(nbody.system(), params) == structure(nbody.lagrangian, params) == "diagonal"
    traced = {}
    jax.jit(lambda p: traced.update(declared=structure(nbody.system(), p), probed=structure(nbody.lagrangian, p)))(
        params
    )
    assert traced == {"declared": "diagonal", "probed": "dense"}

    # the same run either way: the declaration changes what is known, not the step
    run = dict(dt=0.01, num_steps=20)
    declared = s2.simulate(nbody.system(), q0, omega0, params, **run).q
    np.testing.assert_array_equal(declared, s2.simulate(nbody.lagrangian, q0, omega0, params, **run).q)

    # a wrong declaration: refused before compiling with concrete params, a result code when traced
    wrong = s2.LagrangianSystem(dsp.lagrangian, inertia_structure="diagonal")
    dsp_params = jax.tree.map(jnp.asarray, dsp.paper_params())
    dsp_q0, dsp_omega0 = (jnp.asarray(x) for x in dsp.paper_state())
    with pytest.raises(ValueError, match='inertia_structure="diagonal" is declared, but M at these params is chain'):
        s2.simulate(wrong, dsp_q0, dsp_omega0, dsp_params, **run)
    result = jax.jit(lambda p: s2.simulate(wrong, dsp_q0, dsp_omega0, p, throw=False, **run).result)(dsp_params)
    assert result == s2.RESULTS.inertia_not_diagonal


@pytest.mark.slow  # 10–16 s: kept out of the fast tier (README, 'Tests')
def test_ilqr_through_rattle_is_ilqr_through_the_variational_integrator():
    """A control problem's default `Rattle` and 002's `VariationalIntegrator` are one map
    (`Rattle`'s docstring), so iLQR, which linearises every step, finds one optimum through
    either: the same controls, cost and trajectory to round-off of the iterations. Swing the
    double pendulum's lower link towards horizontal in 30 steps with a torque on the first."""
    q0, omega0 = (jnp.asarray(x) for x in dsp.paper_state())
    target = jnp.array([1.0, 0.0, 0.0])
    problem = s2.control.Problem(
        dsp.lagrangian, dsp.paper_params(), s2.forces.PivotTorque(0), 0.02, 30,
        running_cost=lambda t, q, omega, u: 1e-3 * jnp.sum(u**2),
        terminal_cost=lambda q, omega: jnp.sum((q[1] - target) ** 2) + 0.1 * jnp.sum(omega**2),
        fidelity=None,  # the discrete models are compared, not their distance to the continuous one
    )
    by_default = s2.control.solve(problem, q0, omega0, solver=s2.control.ILQR())
    by_vi = s2.control.solve(
        dataclasses.replace(problem, integrator=s2.VariationalIntegrator()), q0, omega0, solver=s2.control.ILQR()
    )
    assert by_default.result == by_vi.result == s2.RESULTS.successful
    assert type(problem.plan(q0, omega0).integrator) is s2.Rattle
    assert by_default.cost < 0.5 * problem.terminal(*dsp.paper_state())  # the link moved towards the target
    np.testing.assert_allclose(by_default.cost, by_vi.cost, rtol=1e-10)
    np.testing.assert_allclose(by_default.controls, by_vi.controls, atol=1e-8)
    np.testing.assert_allclose(by_default.q, by_vi.q, atol=1e-9)


@pytest.mark.slow
def test_a_solve_of_a_coupled_m_under_jit_and_grad_plans_rattle_and_differentiates():
    """With g traced (`jax.jit(jax.grad(...))`) M is unknown before compiling: the linearised
    plan still takes `Rattle`, the form check of (2.2) moves into the graph (its code stays
    successful), and the derivative of the optimal cost at the optimum matches central
    differences of eager re-solves (each planned with concrete g)."""
    q0, omega0 = (jnp.asarray(x) for x in dsp.paper_state())
    target = jnp.array([1.0, 0.0, 0.0])

    def problem(g):
        return s2.control.Problem(
            dsp.lagrangian, {**dsp.paper_params(), "g": g}, s2.forces.PivotTorque(0), 0.02, 15,
            running_cost=lambda t, q, omega, u: 1e-3 * jnp.sum(u**2),
            terminal_cost=lambda q, omega: jnp.sum((q[1] - target) ** 2),
            fidelity=None,  # under a trace no refinement can compile; the discrete model is differentiated
        )

    solver = s2.control.ILQR(rtol=1e-15)

    def cost(g):
        solution = s2.control.solve(problem(g), q0, omega0, solver=solver, throw=False)
        return solution.cost, solution.result

    derivative, code = jax.jit(jax.grad(cost, has_aux=True))(9.81)
    assert code == s2.RESULTS.successful
    traced_plan = []
    jax.jit(lambda g: traced_plan.append(type(problem(g).planned(q0, omega0).integrator)) or g)(9.81)
    assert traced_plan == [s2.Rattle]
    eps = 1e-4
    difference = (cost(9.81 + eps)[0] - cost(9.81 - eps)[0]) / (2 * eps)
    # central differences: O(eps²) truncation and the solves' tolerance over eps
    np.testing.assert_allclose(derivative, difference, rtol=1e-5)
