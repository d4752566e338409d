"""The cells of docs/composition.md's table of entry points × system kinds that no other module
checks, each against a second path: `simulate` of each member of a batch, parameters of known
data recovered by `fit`, and `simulate` re-run with the controls that `control.solve` and
`receding_horizon` return.

One small case per kind (2, 3 or 1 bodies, 6 steps of 0.05 s) keeps the compilations short:
the entry points' programs are compiled once per kind, and every re-run `simulate` with
controls has the same shapes, so it is compiled once per kind for the module.
"""

import dataclasses
import functools
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import s2jax as s2
from s2jax.models import (
    chain_pendulum as chain,
    n_body_on_sphere as nbody,
    rotating_spherical_pendulum as rotating,
)

DT = 0.05
NUM_STEPS = 6
FORCE = s2.forces.PivotTorque(0)


def _rotating_hamiltonian(q, p, params):
    """The Legendre transform of `rotating.lagrangian` (written out independently of it)."""
    m, r, g, rate = params["m"], params["r"], params["g"], params["Omega"]
    frame = jnp.cross(jnp.array([0.0, 0.0, 1.0]), q)
    return jnp.sum(p**2) / (2 * m * r**2) - rate * jnp.sum(p * frame) - m * g * r * q[0, 2]


@dataclasses.dataclass(frozen=True)
class Kind:
    """A model of one column, as the entry points take it, and what the plan must pick for it.

    `system(force)` builds the model with a force the way a user does (None: the model is a bare
    Lagrangian, given `force=` beside it); `varied` names a positive scalar parameter, batched in
    `simulate_batch` and freed in `fit`; `control_weight` prices |u|² against the terminal cost,
    small enough that the torque on body 0 pays (the chain's first link is ~300 times heavier).
    """

    lagrangian: Callable | None
    system: Callable | None
    params: dict
    q0: np.ndarray
    omega0: np.ndarray
    integrator: str
    varied: str
    control_weight: float = 1e-2

    @property
    def model(self):
        return self.lagrangian if self.system is None else self.system(None)

    def simulate(self, *, force=None, params=None, q0=None, omega0=None, **kwargs):
        """`s2.simulate` with `force` given to the system's constructor or beside the Lagrangian
        (not through `Problem.plan`, whose way of attaching the force is under test)."""
        params = self.params if params is None else params
        q0 = self.q0 if q0 is None else q0
        omega0 = self.omega0 if omega0 is None else omega0
        if self.system is None:
            return s2.simulate(self.lagrangian, q0, omega0, params, force=force, dt=DT, **kwargs)
        return s2.simulate(self.system(force), q0, omega0, params, dt=DT, **kwargs)


KINDS = {
    # the n-body problem of 002 Example 2 with two bodies: M = diag(m_i), the explicit VI (3.17)–(3.18)
    "diagonal": Kind(
        lagrangian=None,
        system=nbody.system,
        params={"masses": np.ones(2), "gamma": 1.0},
        q0=np.array([[0.0, -1.0, 0.0], [0.0, 0.0, 1.0]]),
        omega0=np.array([[0.0, 0.0, -1.1], [1.0, 0.0, 0.0]]),
        integrator="ExplicitVariationalIntegrator",
        varied="gamma",
    ),
    # three links of 001 §V: M_ij = c_max(i,j) l_i l_j, the VI (3.10)–(3.13) with the chain solve
    "chain": Kind(
        lagrangian=None,
        system=chain.system,
        params=chain.paper_params(3),
        q0=chain.paper_state(3)[0],
        omega0=chain.paper_state(3)[1],
        integrator="VariationalIntegrator",
        varied="g",
        control_weight=1e-4,
    ),
    # a Lagrangian with a term linear in q̇ (a rotating frame), not of the form (2.2)
    "general": Kind(
        lagrangian=rotating.lagrangian,
        system=None,
        params=rotating.paper_params(),
        q0=rotating.paper_state()[0],
        omega0=rotating.paper_state()[1],
        integrator="GeneralVariationalIntegrator",
        varied="r",
    ),
    "hamiltonian": Kind(
        lagrangian=None,
        system=functools.partial(s2.HamiltonianSystem, _rotating_hamiltonian),
        params=rotating.paper_params(),
        q0=rotating.paper_state()[0],
        omega0=rotating.paper_state()[1],
        integrator="HamiltonianRattle",
        varied="r",
    ),
}


def _kinds(*names):
    return pytest.mark.parametrize("kind", [KINDS[name] for name in names], ids=names)


def _problem(kind):
    """Bring every body to rest in 0.3 s with the pivot torque on body 0, at a small cost in u."""
    return s2.control.Problem(
        kind.model,
        kind.params,
        FORCE,
        DT,
        NUM_STEPS,
        running_cost=lambda t, q, omega, u: kind.control_weight * jnp.sum(u**2),
        terminal_cost=lambda q, omega: jnp.sum(omega**2),
    )


def _cost(kind, solution, controls):
    """J = Σ h ℓ + Φ of a `simulate` solution, summed here in numpy (not by `Problem.cost`)."""
    controls, omega = np.asarray(controls), np.asarray(solution.omega)
    return DT * kind.control_weight * np.sum(controls**2) + np.sum(omega[-1] ** 2)


@pytest.mark.slow
@_kinds("diagonal", "chain", "hamiltonian")
def test_simulate_batch_equals_simulate_of_each_member(kind):
    """Two members differing in ω0 and in one parameter (`params_axis`): each is `simulate`'s run
    of that member, through the integrator the plan picks for the kind."""
    scales = np.array([1.0, 0.5])
    batch = s2.simulate_batch(
        kind.model,
        np.stack([kind.q0] * 2),
        scales[:, None, None] * kind.omega0,
        {**kind.params, kind.varied: scales * kind.params[kind.varied]},
        params_axis={**dict.fromkeys(kind.params), kind.varied: 0},
        dt=DT,
        num_steps=NUM_STEPS,
    )
    assert batch.integrator == kind.integrator
    assert batch.q.shape == (2, NUM_STEPS + 1, *kind.q0.shape)
    for b, scale in enumerate(scales):
        alone = kind.simulate(
            omega0=scale * kind.omega0,
            params={**kind.params, kind.varied: scale * kind.params[kind.varied]},
            num_steps=NUM_STEPS,
        )
        # The batch is `jax.vmap` of the same step, whose batched linear solves and reductions XLA
        # may order differently: round-off, not bitwise (measured: bitwise for the explicit VI,
        # ≤ 2.3e-16 for the implicit ones).
        np.testing.assert_allclose(batch.q[b], alone.q, rtol=0, atol=1e-14)
        np.testing.assert_allclose(batch.omega[b], alone.omega, rtol=0, atol=1e-14)


@pytest.mark.slow
@_kinds("diagonal", "chain", "hamiltonian")
def test_fit_recovers_a_parameter_from_noise_free_data(kind):
    """Directions of every body at each of the 6 steps, simulated with the known params: `fit` from
    a guess 20 % off recovers the varied parameter to 1e-8 relative.

    Adam, not the default L-BFGS: its zoom line search compiles the reverse pass through the
    simulation a second time (the chain's fit compiled in 39 s of CPU against 24 s), and nothing
    in the optimiser depends on the kind; the Gauss–Newton refinement after it is fit's own.
    The data are the discrete model's own, so its fidelity to the continuous system is not asked
    (`fidelity=None`: refining the model would move it off these data).
    """
    truth = kind.params[kind.varied]
    data = kind.simulate(num_steps=NUM_STEPS)  # the run of the batch test, compiled there
    result = s2.fit.fit(
        kind.model,
        {**kind.params, kind.varied: 1.2 * truth},
        np.asarray(data.q[1:]),
        times=np.asarray(data.t[1:]),
        bodies=list(range(kind.q0.shape[0])),
        dt=DT,
        q0=kind.q0,
        omega0=kind.omega0,
        free=[kind.varied],
        optimizer="adam",
        learning_rate=0.05,
        num_iterations=10,
        fidelity=None,
    )
    assert abs(float(result.params[kind.varied]) / truth - 1) < 1e-8
    np.testing.assert_allclose(result.predicted, data.q[1:], rtol=0, atol=1e-8)


def _check_solve(kind, solver):
    """A few iterations from zero controls lower J, and the returned cost and final state are
    those of `simulate` re-run with the returned controls and the problem's force."""
    solution = s2.control.solve(_problem(kind), kind.q0, kind.omega0, solver=solver, throw=False)
    # a few iterations stop short of the optimum; anything else (a failed step) is an error
    assert solution.result in (s2.RESULTS.successful, s2.RESULTS.optimisation_not_converged)
    zero = np.zeros((NUM_STEPS, 3))
    uncontrolled = _cost(kind, kind.simulate(force=FORCE, num_steps=NUM_STEPS, controls=zero), zero)
    assert float(solution.cost) < 0.95 * uncontrolled
    again = kind.simulate(force=FORCE, num_steps=NUM_STEPS, controls=solution.controls)
    assert again.integrator == kind.integrator
    # The solve re-simulates its controls with the plan `simulate` makes: the same arithmetic,
    # in another compiled program (measured: bitwise but for 7e-20 on the chain).
    np.testing.assert_allclose(float(solution.cost), _cost(kind, again, solution.controls), rtol=1e-14)
    np.testing.assert_allclose(solution.q[-1], again.q[-1], rtol=0, atol=1e-14)
    np.testing.assert_allclose(solution.omega[-1], again.omega[-1], rtol=0, atol=1e-14)


@pytest.mark.slow
@_kinds("diagonal", "chain")
def test_ilqr_lowers_the_cost_of_the_trajectory_simulate_runs(kind):
    _check_solve(kind, s2.control.ILQR(max_steps=3))


@pytest.mark.slow
@_kinds("diagonal", "chain", "hamiltonian")
def test_single_shooting_lowers_the_cost_of_the_trajectory_simulate_runs(kind):
    # L-BFGS without its zoom line search, which compiles the reverse pass through the simulation
    # a second time (the HamiltonianSystem's solve compiled in 40 s of CPU against 12 s); on these
    # near-quadratic problems three steps reach what three line-searched steps reach.
    _check_solve(kind, s2.control.SingleShooting(optimizer=optax.lbfgs(linesearch=None), max_steps=3))


@pytest.mark.slow
@_kinds("diagonal", "chain", "general", "hamiltonian")
def test_receding_horizon_records_the_simulation_of_its_controls(kind):
    """Two solves of the 6-step problem (iLQR, 2 iterations), each applying 3 steps: the recorded
    closed loop is `simulate` of the applied controls from the same state (the plant is the model)."""
    closed = s2.control.receding_horizon(
        _problem(kind), kind.q0, kind.omega0, solver=s2.control.ILQR(max_steps=2), num_solves=2, steps_per_solve=3
    )
    assert closed.result == s2.RESULTS.successful
    for code in closed.results._value:  # two iterations stop short of the optimum, and fail nothing
        assert code in (s2.RESULTS.successful._value, s2.RESULTS.optimisation_not_converged._value)
    assert closed.controls.shape == (NUM_STEPS, 3)
    assert float(jnp.max(jnp.abs(closed.controls))) > 1e-3  # the loop did act
    again = kind.simulate(force=FORCE, num_steps=NUM_STEPS, controls=closed.controls)
    np.testing.assert_allclose(closed.t, again.t, rtol=0, atol=1e-15)
    # Each plant step starts its integrator afresh (`Problem.step`), so an implicit step's Newton
    # iteration starts elsewhere than in `simulate` and stops within its tolerance of the same
    # root (measured: bitwise for the explicit VI, ≤ 1.3e-14 in ω for the chain).
    np.testing.assert_allclose(closed.q, again.q, rtol=0, atol=1e-13)
    np.testing.assert_allclose(closed.omega, again.omega, rtol=0, atol=1e-13)


@pytest.mark.slow
@_kinds("diagonal", "chain", "general", "hamiltonian")
def test_the_feedback_policy_and_real_time_mpc_follow_the_plan(kind):
    """At iLQR's optimum of the 6-step problem (the `RealTimeController`'s first solve): `simulate`
    running `feedback_policy` from the plan's initial state retraces the plan (δx = 0, so u = ū);
    real-time MPC from Python (one iteration per call, 3 controls applied per call, a `Stepper`
    of the same plan as the plant) applies the optimum's controls first, since its iteration
    starts on the converged plan, and its plant steps are `simulate`'s run of what it applied.
    (`receding_horizon(real_time_iterations=…)` runs the same iterations in the graph:
    tests/test_real_time.py checks the two against each other.)"""
    problem = _problem(kind)
    controller = s2.control.RealTimeController(
        problem, kind.q0, kind.omega0, solver=s2.control.ILQR(rtol=1e-14), steps_per_solve=3
    )
    solution = controller.solution
    assert solution.result == s2.RESULTS.successful
    policy = s2.control.feedback_policy(problem, solution)
    replay = kind.simulate(force=FORCE, num_steps=NUM_STEPS, controls=policy)
    np.testing.assert_allclose(replay.q, solution.q, rtol=0, atol=1e-13)
    np.testing.assert_allclose(replay.omega, solution.omega, rtol=0, atol=1e-13)
    forced = {"force": FORCE} if kind.system is None else {}  # a system carries its own force
    model = kind.lagrangian if kind.system is None else kind.system(FORCE)
    plant = s2.Stepper(model, kind.q0, kind.omega0, kind.params, dt=DT, u0=np.zeros(3), **forced)
    q, omega, applied = jnp.asarray(kind.q0), jnp.asarray(kind.omega0), []
    for _ in range(2):
        controls = controller(q, omega)
        assert controller.result == s2.RESULTS.successful
        for u in controls:
            q, omega = plant(q, omega, u, len(applied) * DT)
            applied.append(u)
    # The solve stops where J changes by ≤ 1e-14 |J|, its controls ~√1e-14 = 1e-7 (relative) from
    # the optimum that the extra iteration steps towards (measured: 1e-8 to 1.7e-7 of max|u|).
    scale = float(jnp.max(jnp.abs(solution.controls)))
    np.testing.assert_allclose(jnp.stack(applied[:3]), solution.controls[:3], rtol=0, atol=1e-6 * scale)
    again = kind.simulate(force=FORCE, num_steps=NUM_STEPS, controls=jnp.stack(applied))
    # each plant step starts its integrator afresh (as in the receding-horizon test above)
    np.testing.assert_allclose(q, again.q[-1], rtol=0, atol=1e-13)
    np.testing.assert_allclose(omega, again.omega[-1], rtol=0, atol=1e-13)
