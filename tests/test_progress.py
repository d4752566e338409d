"""`simulate(..., progress=True)`: "compiling …" before compiling, the bar from the first block;
`control.solve(..., progress=True)`: a heartbeat and a report from the host, one compiled program."""

import contextlib
import io
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax._optimisation import progress as progress_module
from s2jax.control import _solve as control_solve


def _pendulum(q, qdot, params):
    return 0.5 * jnp.sum(qdot**2) + params["g"] * q[0, 2]


def _run(num_steps, g=9.81):
    q0 = np.array([[np.sin(0.4), 0.0, np.cos(0.4)]])
    omega0 = np.array([[0.0, 0.5, 0.0]])
    return s2.simulate(_pendulum, q0, omega0, {"g": g}, dt=1e-3, num_steps=num_steps, save_every=5, progress=True)


def test_compiling_is_announced_and_the_bar_starts_at_the_first_block(capfd):
    _run(4000)
    chunks = capfd.readouterr().err.split("\r")
    assert chunks[0] == "  compiling …"
    assert chunks[1].strip().startswith("[") and chunks[1].strip().endswith("] 5/4000 steps")
    assert chunks[-1].strip().endswith("4000/4000 steps")
    # A compiled simulation reused (new parameter values do not recompile) is not announced.
    _run(4000, g=9.0)
    err = capfd.readouterr().err
    assert "compiling" not in err and err.strip().endswith("4000/4000 steps")


def test_reproduce_announces_compiling_before_its_ahead_of_time_compile(capfd):
    """`python -m s2jax reproduce 4` compiled for 15 s in silence: compile_simulation traces
    `simulate`, which says "compiling …" before XLA starts."""
    from s2jax.apps.reproduce import compile_simulation

    q0 = np.array([[np.sin(0.4), 0.0, np.cos(0.4)]])
    omega0 = np.array([[0.0, 0.5, 0.0]])
    run, _ = compile_simulation(
        _pendulum, q0, omega0, {"g": 9.81}, dt=1e-3, num_steps=400, integrator=s2.VariationalIntegrator(),
        save_every=4, progress=True,
    )
    assert capfd.readouterr().err == "  compiling …"
    run()
    chunks = capfd.readouterr().err.split("\r")
    assert chunks[1].strip().endswith("] 4/400 steps") and chunks[-1].strip().endswith("400/400 steps")


def test_compiling_is_said_once_for_a_gradient_through_the_reversible_adjoint(capfd):
    """ReversibleAdjoint traces the loop twice (forward, and backward with −h); one message."""
    q0 = np.array([[np.sin(0.4), 0.0, np.cos(0.4)]])
    omega0 = np.array([[0.0, 0.5, 0.0]])

    def final_x(g):
        sol = s2.simulate(_pendulum, q0, omega0, {"g": g}, dt=1e-3, num_steps=100, save_every=4,
                          progress=True, adjoint=s2.ReversibleAdjoint())
        return sol.q[-1, 0, 0]

    jax.grad(final_x)(jnp.array(9.81))
    assert capfd.readouterr().err.count("compiling") == 1


TARGET = np.array([[0.6, 0.0, 0.8]])


def _reach_problem():
    """Move a pendulum hanging at 36.9° to TARGET in 0.4 s: a terminal constraint, several rounds."""
    target = jnp.asarray(TARGET)
    return s2.control.Problem(
        s2.models.spherical_pendulum.lagrangian, {"m": 1.0, "r": 1.0, "g": 9.81}, s2.forces.PivotTorque(0), 0.02,
        20, running_cost=lambda t, q, omega, u: jnp.sum(u**2),
        terminal_constraint=lambda q, omega: (q - target).ravel(),
    )


Q0, OMEGA0 = np.array([[0.0, 0.6, 0.8]]), np.zeros((1, 3))


@pytest.fixture(scope="module")
def first_solve():
    """The problem's first solve, with progress (it traces and compiles), its stderr, and how
    many programs `solve` held before and after."""
    problem = _reach_problem()
    before = control_solve.cache_size()
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(err):
        patch.setattr(progress_module, "HEARTBEAT_SECONDS", 0.02)  # so that a fast machine's compile shows too
        solution = s2.control.solve(problem, Q0, OMEGA0, solver=s2.control.ILQR(), progress=True)
    return problem, solution, err.getvalue(), before, control_solve.cache_size()


def test_toggling_progress_compiles_one_program(first_solve, capfd):
    """progress is no argument of the compiled program: off and on again, `solve` reuses it."""
    problem, loud, _, before, after = first_solve
    assert after == before + 2  # the iterations' program and the solution's
    quiet = s2.control.solve(problem, Q0, OMEGA0, solver=s2.control.ILQR())
    assert control_solve.cache_size() == after
    np.testing.assert_array_equal(quiet.controls, loud.controls)
    assert capfd.readouterr().err == ""
    again = s2.control.solve(problem, Q0, OMEGA0, solver=s2.control.ILQR(), progress=True)
    assert control_solve.cache_size() == after
    np.testing.assert_array_equal(again.controls, loud.controls)
    err = capfd.readouterr().err
    assert "the compiled program reused" in err and "tracing" not in err and "compiling …" not in err


def test_the_heartbeat_names_the_phases_of_a_first_solve(first_solve):
    """A status line, rewritten in place ("\\r"), says what the call is doing; a line with the
    time of each phase replaces it."""
    *_, err, _, _ = first_solve
    chunks = err.split("\r")
    assert chunks[0].startswith("s2jax.control.solve: starting (ILQR, 20 steps;")
    beats = [chunk.strip() for chunk in chunks[1:] if " … " in chunk]
    labels = [beat.split(": ")[1].split(" … ")[0] for beat in beats]
    # In this order, each for as long as it lasts, for each of the solve's two programs (its
    # iterations', then its solution's): preparing (planning the problem) may take less than one
    # beat, tracing and compiling (or loading from the persistent cache) do not.
    assert "tracing" in labels and "compiling" in labels
    ranks = [["preparing", "tracing", "compiling", "solving"].index(label) for label in labels]
    restarts = [k for k in range(1, len(ranks)) if ranks[k] < ranks[k - 1]]
    assert len(restarts) <= 1 and all(labels[k] == "tracing" for k in restarts)
    assert all(beat.endswith(" s") for beat in beats)
    seconds = r"[0-9.e+-]+ s"
    assert re.search(
        rf"\rs2jax.control.solve: {seconds}: preparing {seconds}, tracing {seconds}, compiling {seconds}"
        rf"( \(loaded from the persistent compilation cache\))?, solving {seconds}\n",
        err,
    )


def test_the_report_lists_the_rounds_of_the_returned_solution(first_solve):
    """One line per augmented-Lagrangian round, from `round_iterations`, `round_violation` and
    `cost_history`, then the result; the rounds' fields agree with the solution's totals."""
    _, solution, err, _, _ = first_solve
    rounds = int(solution.num_outer_iterations)
    iterations = np.asarray(solution.round_iterations)
    violations = np.asarray(solution.round_violation)
    assert rounds >= 2 and iterations.sum() == int(solution.num_iterations) and np.all(iterations[rounds:] == 0)
    assert np.all(np.isfinite(violations[:rounds])) and np.all(np.isnan(violations[rounds:]))
    assert violations[rounds - 1] <= 1e-6
    history = np.asarray(solution.cost_history)
    assert np.all(np.isfinite(history[: iterations.sum()])) and np.all(np.isnan(history[iterations.sum() :]))
    lines = [line for line in err.splitlines() if ": round " in line]
    assert len(lines) == rounds
    for index, line in enumerate(lines):
        objective = history[iterations[: index + 1].sum() - 1]
        assert line == (
            f"s2jax.control.solve: round {index + 1}: objective {objective:.6g} after {iterations[index]} "
            f"iteration{'s' if iterations[index] != 1 else ''}, constraint violation {violations[index]:.2e}"
        )
    assert err.rstrip().splitlines()[-1].startswith("s2jax.control.solve: RESULTS.successful (converged")


def test_the_program_holds_no_host_callback(first_solve):
    """JAX's persistent compilation cache never stores a program with a host callback, so the
    program of `solve` (the same with and without progress) must hold none."""
    problem = first_solve[0]
    planned, init = control_solve._prepare(problem, jnp.asarray(Q0), jnp.asarray(OMEGA0), None)
    lowered = eqx.filter_jit(control_solve.solve_in_graph).lower(
        planned, s2.control.ILQR(), jnp.asarray(Q0), jnp.asarray(OMEGA0), init, 20, 1e-6
    )
    text = lowered.as_text()
    assert "stablehlo.while" in text
    assert "callback" not in text.lower()


def test_progress_under_a_transformation_says_once_that_it_cannot_report(first_solve, capfd):
    """Traced inputs (here `jax.eval_shape`, as under `jax.jit` or `jax.vmap`): one line, at
    trace time, and no heartbeat."""
    problem = first_solve[0]

    def final_state(q0):
        solution = s2.control.solve(problem, q0, OMEGA0, solver=s2.control.ILQR(), throw=False, progress=True)
        return solution.q[-1]

    shape = jax.eval_shape(final_state, jnp.asarray(Q0))
    assert shape.shape == (1, 3)
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "\r" not in err
    assert err.startswith("s2jax.control.solve: progress=True reports nothing inside jax.jit, jax.vmap")
