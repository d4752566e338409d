"""Many solves in one call (`s2jax.control.solve_many`, `multi_start`; issue 30 item 3): each
member's result is its own `solve`'s, in one program, in lockstep or not, on one device or two."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax.models import spherical_pendulum as pendulum

PARAMS = {"m": 1.0, "r": 1.0, "g": 9.81}
UP = np.array([[0.0, 0.0, -1.0]])
TARGET = np.array([[0.6, 0.0, 0.8]])


def _reach():
    """Move the pendulum towards TARGET in 0.4 s: ∫ |u|² + 100 |q_N − target|² + |ω_N|²."""
    target = jnp.asarray(TARGET)
    return s2.control.Problem(
        pendulum.lagrangian, PARAMS, s2.forces.PivotTorque(0), 0.02, 20,
        running_cost=lambda t, q, omega, u: jnp.sum(u**2),
        terminal_cost=lambda q, omega: 100.0 * jnp.sum((q - target) ** 2) + jnp.sum(omega**2),
    )


def _starts(count):
    angles = np.linspace(0.3, 0.9, count)
    q0 = np.stack([np.zeros(count), np.sin(angles), np.cos(angles)], -1)[:, None]
    omega0 = np.zeros((count, 1, 3))
    omega0[:, 0, 0] = np.linspace(-0.5, 0.5, count)
    return q0, omega0


@pytest.mark.slow  # 10–16 s: kept out of the fast tier (README, 'Tests')
def test_each_member_is_its_own_solve_mapped_or_in_lockstep():
    """Three initial states and three guesses: `solve_many` gives each member the controls and
    the iteration count of `solve` on that member alone, both mapped (one member after another)
    and in lockstep (`jax.vmap`, where a converged member is frozen while the others iterate)."""
    problem = _reach()
    q0, omega0 = _starts(3)
    init = 0.1 * np.arange(3)[:, None, None] * np.ones((3, 20, 3))
    solver = s2.control.ILQR()
    mapped = s2.control.solve_many(problem, q0, omega0, solver=solver, init=init)
    locked = s2.control.solve_many(problem, q0, omega0, solver=solver, init=init, batch="vmap")
    assert mapped.controls.shape == (3, 20, 3)
    iterations = []
    for b in range(3):
        alone = s2.control.solve(problem, q0[b], omega0[b], solver=solver, init=init[b])
        iterations.append(int(alone.num_iterations))
        for many in (mapped, locked):
            assert int(many.num_iterations[b]) == iterations[-1]
            # another compiled program of the same arithmetic (measured: bitwise for `map`)
            np.testing.assert_allclose(many.controls[b], alone.controls, rtol=0, atol=1e-12)
            np.testing.assert_allclose(many.cost[b], alone.cost, rtol=1e-13)
    assert len(set(iterations)) > 1  # the members need different numbers of iterations


# 7 s: kept out of the fast tier (README, 'Tests'); test_bad_members_are_named runs solve_many there
@pytest.mark.slow
def test_one_guess_for_many_states_and_one_state_for_many_guesses():
    problem = _reach()
    q0, omega0 = _starts(2)
    shared_guess = s2.control.solve_many(problem, q0, omega0, solver=s2.control.ILQR())
    for b in range(2):
        alone = s2.control.solve(problem, q0[b], omega0[b], solver=s2.control.ILQR())
        np.testing.assert_allclose(shared_guess.controls[b], alone.controls, rtol=0, atol=1e-12)
    guesses = np.stack([np.zeros((20, 3)), 0.2 * np.ones((20, 3))])
    shared_state = s2.control.solve_many(problem, q0[0], omega0[0], solver=s2.control.ILQR(), init=guesses)
    assert shared_state.q.shape == (2, 21, 1, 3)
    np.testing.assert_allclose(shared_state.q[:, 0], np.broadcast_to(q0[0], (2, 1, 3)), rtol=0, atol=0)


def _balance(num_steps):
    up = jnp.asarray(UP)
    return s2.control.Problem(
        pendulum.lagrangian, PARAMS, s2.forces.PivotTorque(0), 0.02, num_steps,
        running_cost=lambda t, q, w, u: jnp.sum((q - up) ** 2) + 0.1 * jnp.sum(w**2) + 0.01 * jnp.sum(u**2),
        terminal_cost=lambda q, w: 10.0 * jnp.sum((q - up) ** 2) + jnp.sum(w**2),
    )


@pytest.mark.slow  # 10–16 s: kept out of the fast tier (README, 'Tests')
def test_multi_start_keeps_the_best_of_two_local_optima():
    """Holding the pendulum upright for 2 s from 0.2 rad off and moving away: from zero controls
    iLQR finds the local optimum that lets it fall through hanging and swing back (J ≈ 5.2), from
    a 0.5 s solve's controls (then zeros) the one that catches it (J ≈ 0.015). `multi_start`
    returns the second, refined to the fidelity, which is `solve`'s from that guess."""
    q0, omega0 = np.array([[np.sin(0.2), 0.0, -np.cos(0.2)]]), np.array([[0.0, 0.5, 0.0]])
    short = s2.control.solve(_balance(25), q0, omega0, solver=s2.control.ILQR())
    guesses = np.zeros((2, 100, 3))
    guesses[1, :25] = short.controls
    problem = _balance(100)
    best, every = s2.control.multi_start(problem, q0, omega0, guesses, solver=s2.control.ILQR())
    costs = np.asarray(every.cost)
    assert costs[0] > 100 * costs[1]  # two optima, far apart
    fell = np.max(np.linalg.norm(np.asarray(every.q[0]) - UP[None], axis=-1))
    caught = np.max(np.linalg.norm(np.asarray(every.q[1]) - UP[None], axis=-1))
    assert fell > 1.9 and caught < 0.25
    # refined from the start's solution: the same optimum on a finer model
    assert best.substeps > 1 and float(best.cost) == pytest.approx(costs[1], rel=1e-2)
    alone = s2.control.solve(problem, q0, omega0, solver=s2.control.ILQR(), init=guesses[1])
    assert alone.substeps == best.substeps
    np.testing.assert_allclose(best.controls, alone.controls, rtol=0, atol=1e-12)


def test_bad_members_are_named():
    problem = _reach()
    q0, omega0 = _starts(3)
    with pytest.raises(ValueError, match="needs a member axis"):
        s2.control.solve_many(problem, q0[0], omega0[0], solver=s2.control.ILQR())
    with pytest.raises(ValueError, match="member axes disagree"):
        s2.control.solve_many(problem, q0, omega0[:2], solver=s2.control.ILQR())
    bad = q0.copy()
    bad[2] *= 2.0
    with pytest.raises(ValueError, match=r"member 2: .*body 0"):
        s2.control.solve_many(problem, bad, omega0, solver=s2.control.ILQR())
    with pytest.raises(s2.SimulationError, match=r"batch index \(0,\)"):
        s2.control.solve_many(problem, q0, omega0, solver=s2.control.ILQR(max_steps=1))
    with pytest.raises(ValueError, match="batch must be"):
        s2.control.solve_many(problem, q0, omega0, solver=s2.control.ILQR(), batch="pmap")


_TWO_DEVICES = textwrap.dedent(
    """
    import json, sys
    import jax
    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    import s2jax as s2
    from test_solve_many import _reach, _starts
    assert len(jax.devices()) == 2
    problem, (q0, omega0) = _reach(), _starts(3)
    many = s2.control.solve_many(problem, q0, omega0, solver=s2.control.ILQR())
    alone = [s2.control.solve(problem, q0[b], omega0[b], solver=s2.control.ILQR()) for b in range(3)]
    # the members sharded by the caller over a mesh of `jax.make_mesh` (Explicit axes), a fourth
    # member a copy of the first so that the two devices hold two each
    from jax.sharding import NamedSharding, PartitionSpec
    mesh = jax.make_mesh((2,), ("m",))
    members = NamedSharding(mesh, PartitionSpec("m"))
    on_mesh = [jax.device_put(np.concatenate([x, x[:1]]), members) for x in (q0, omega0)]
    sharded = s2.control.solve_many(problem, *on_mesh, solver=s2.control.ILQR())
    with jax.set_mesh(mesh):  # plain states within a mesh context: solved alike, returned on it
        in_context = s2.control.solve_many(problem, q0, omega0, solver=s2.control.ILQR())
    print(json.dumps({
        "shape": list(many.controls.shape),
        "difference": max(float(np.max(np.abs(many.controls[b] - a.controls))) for b, a in enumerate(alone)),
        "iterations": [[int(many.num_iterations[b]), int(a.num_iterations)] for b, a in enumerate(alone)],
        "sharded_difference": max(
            float(np.max(np.abs(np.asarray(sharded.controls)[b] - alone[b % 3].controls))) for b in range(4)
        ),
        "sharded_on": [list(sharded.controls.sharding.mesh.axis_names), str(sharded.controls.sharding.spec)],
        "in_context_difference": float(np.max(np.abs(np.asarray(in_context.controls) - np.asarray(many.controls)))),
        "in_context_on": [list(in_context.controls.sharding.mesh.axis_names), str(in_context.controls.sharding.spec)],
    }))
    """
)


@pytest.mark.slow
def test_three_members_on_two_devices():
    """Split over two host devices (the batch padded to four, the padding dropped), each member
    is still its own solve; so are members the caller sharded over a mesh of `jax.make_mesh`
    (Explicit axes), and plain members within `jax.set_mesh` of it, and their solutions come back
    on that mesh."""
    env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2")
    here = os.path.dirname(__file__)
    run = subprocess.run(
        [sys.executable, "-c", _TWO_DEVICES, here], capture_output=True, text=True, timeout=600, env=env
    )
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["shape"] == [3, 20, 3]
    # two devices compile another program (measured: 1e-12 apart on the swing-up)
    assert report["difference"] < 1e-11
    assert all(a == b for a, b in report["iterations"])
    # members the caller sharded over a mesh with Explicit axes: solved alike, returned on that mesh
    assert report["sharded_difference"] < 1e-11
    assert report["sharded_on"] == [["m"], "P('m',)"]
    # plain states within `jax.set_mesh(mesh)`: 3 members do not divide 2 devices, so replicated there
    assert report["in_context_difference"] < 1e-11
    assert report["in_context_on"] == [["m"], "P(None,)"]


@pytest.mark.slow
def test_multi_start_finds_the_better_pendubot_optimum():
    """The pendubot swing-up (issue 31 item 2): from its default guess iLQR converges to J = 5.92;
    from a slower sweep (f = 0.7 √(g/l)) to 5.35, below the 5.838 CasADi + IPOPT found. The
    better optimum is feasible, checked apart from the solver: `simulate` of its controls ends
    upright at rest to 1e-5, the controls stay in the bounds, and its cost summed in numpy is J."""
    from s2jax.control.examples import UPRIGHT, double_pendulum_swing_up, torque_sweep

    problem, q0, omega0, init = double_pendulum_swing_up()
    # the landscape of the model at one sub-step (with the fidelity, the default guess's solve
    # is refined into the better optimum itself: test_control's test_examples_reach_their_goals)
    problem = dataclasses.replace(problem, fidelity=None)
    bound = float(problem.upper[0])
    starts = torque_sweep(problem, [0.1 * bound], [0.7, 1.0])
    np.testing.assert_allclose(starts[1], init, rtol=0, atol=1e-12)  # the default guess is the sweep's f = 1
    # `solve` from each start, the program of test_control's pendubot test (read back from the
    # suite's compilation cache); `multi_start` is this over `solve_many` (tested above)
    slow_start, default_start = (
        s2.control.solve(problem, q0, omega0, solver=s2.control.ILQR(), init=start) for start in starts
    )
    assert float(default_start.cost) > 5.85 > float(slow_start.cost)  # two optima, the bound between them
    best = slow_start
    run = s2.simulate(problem.lagrangian, q0, omega0, problem.params, dt=problem.dt, num_steps=problem.num_steps,
                      force=problem.force, controls=best.controls)
    assert np.max(np.abs(np.asarray(run.q[-1]) - UPRIGHT)) < 1e-5 and np.max(np.abs(np.asarray(run.omega[-1]))) < 1e-5
    assert np.max(np.abs(np.asarray(best.controls))) <= bound * (1 + 1e-12)
    cost = problem.dt * 1e-4 * np.sum(np.asarray(best.controls) ** 2)  # the example's running cost, 1e-4 |u|²
    assert cost == pytest.approx(float(best.cost), rel=1e-12)


@pytest.mark.slow
def test_under_grad():
    """Traced (its failure check then in the graph), `solve_many` differentiates: the gradient of
    the members' summed optimal costs in g is the sum of each member's `solve` gradient (both by
    implicit differentiation at the optimum)."""
    q0, omega0 = _starts(2)

    def problem(g):
        target = jnp.asarray(TARGET)
        return s2.control.Problem(
            pendulum.lagrangian, {"m": 1.0, "r": 1.0, "g": g}, s2.forces.PivotTorque(0), 0.02, 20,
            running_cost=lambda t, q, omega, u: jnp.sum(u**2),
            terminal_cost=lambda q, omega: 100.0 * jnp.sum((q - target) ** 2) + jnp.sum(omega**2),
            integrator=s2.ExplicitVariationalIntegrator(),  # the eager plan's, also from traced g
        )

    solver = s2.control.ILQR(rtol=1e-15)
    # The batch's gradient eagerly (`jax.grad` alone, the mode no other test of a solve takes); the
    # members' under `jax.jit`, one program for both with the state an argument (a closure per
    # member compiled the solve and its implicit derivative once per member).
    total = jax.grad(lambda g: jnp.sum(s2.control.solve_many(problem(g), q0, omega0, solver=solver).cost))(9.81)
    single = jax.jit(jax.grad(lambda g, q, omega: s2.control.solve(problem(g), q, omega, solver=solver).cost))
    each = sum(single(9.81, q0[b], omega0[b]) for b in range(2))
    np.testing.assert_allclose(total, each, rtol=1e-10)
