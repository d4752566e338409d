"""Costs compared by value (`s2jax._by_value`): equal when tracing them must give the same
program, and a control problem rebuilt from equal new lambdas reuses its compiled solve."""

import jax.numpy as jnp
import numpy as np

import s2jax as s2
from s2jax import _simulate as simulate_module
from s2jax._by_value import FunctionByValue
from s2jax.control import _solve as control_solve
from s2jax.models import spherical_pendulum as pendulum

SCALE = 2.0


def _cost(weight, target):
    return lambda q, omega: weight * jnp.sum((q - target) ** 2) + SCALE * jnp.sum(omega**2)


def test_functions_of_the_same_code_and_inputs_are_equal():
    target = np.array([[0.6, 0.0, 0.8]])
    first, again = FunctionByValue(_cost(1.0, target)), FunctionByValue(_cost(1.0, target.copy()))
    assert first.fn is not again.fn
    assert first == again and hash(first) == hash(again)
    assert first != FunctionByValue(_cost(2.0, target))  # another closure value
    assert first != FunctionByValue(_cost(1.0, target[:, ::-1]))  # another array
    assert first != FunctionByValue(lambda q, omega: 1.0 * jnp.sum((q - target) ** 2) + SCALE * jnp.sum(omega**2))


def test_a_changed_global_makes_them_differ(monkeypatch):
    target = np.array([[0.6, 0.0, 0.8]])
    before = FunctionByValue(_cost(1.0, target))
    monkeypatch.setattr(f"{__name__}.SCALE", 3.0)
    assert before != FunctionByValue(_cost(1.0, target))


def test_objects_without_value_equality_count_by_identity():
    class Opaque:
        pass

    def make(thing):
        return lambda q: thing

    shared = Opaque()
    assert FunctionByValue(make(shared)) == FunctionByValue(make(shared))
    assert FunctionByValue(make(Opaque())) != FunctionByValue(make(Opaque()))


def _problem(weight):
    target = jnp.array([[0.6, 0.0, 0.8]])
    return s2.control.Problem(
        pendulum.lagrangian, {"m": 1.0, "r": 1.0, "g": 9.81}, s2.forces.PivotTorque(0), 0.04, 10,
        running_cost=lambda t, q, omega, u: jnp.sum(u**2),
        terminal_cost=lambda q, omega: weight * jnp.sum((q - target) ** 2) + jnp.sum(omega**2),
    )


def test_a_rebuilt_problem_reuses_the_compiled_solve():
    q0, omega0 = jnp.array([[0.0, 0.6, 0.8]]), jnp.zeros((1, 3))
    first = s2.control.solve(_problem(100.0), q0, omega0, solver=s2.control.ILQR())
    programs = control_solve.cache_size()
    rebuilt = _problem(100.0)  # new lambdas, equal by value
    assert rebuilt == _problem(100.0)
    again = s2.control.solve(rebuilt, q0, omega0, solver=s2.control.ILQR())
    assert control_solve.cache_size() == programs
    np.testing.assert_array_equal(again.controls, first.controls)
    other = s2.control.solve(_problem(10.0), q0, omega0, solver=s2.control.ILQR())  # another weight: another program
    assert control_solve.cache_size() == programs + 2  # its iterations' and its solution's
    assert float(jnp.max(jnp.abs(other.controls - first.controls))) > 1e-3


def test_new_solver_settings_reuse_the_compiled_solve():
    """A solver's float settings and the constraint tolerance are values of the compiled solve
    (`control._solver.as_values`), so that new ones compile nothing, and they take effect: a
    looser rtol stops sooner."""
    q0, omega0 = jnp.array([[0.0, 0.6, 0.8]]), jnp.zeros((1, 3))
    tight = s2.control.solve(_problem(100.0), q0, omega0, solver=s2.control.ILQR())
    programs = control_solve.cache_size()
    loose = s2.control.solve(
        _problem(100.0), q0, omega0, solver=s2.control.ILQR(rtol=1e-3, regularisation=1e-5, penalty=20.0),
        constraint_tolerance=1e-4,
    )
    assert control_solve.cache_size() == programs
    assert 0 < int(loose.num_iterations) < int(tight.num_iterations)


def test_a_rebuilt_force_reuses_the_compiled_simulation():
    """`simulate(force=lambda ...)` twice from a loop: one program."""
    q0, omega0 = jnp.array([[0.0, 0.6, 0.8]]), jnp.zeros((1, 3))
    params = {"m": 1.0, "r": 1.0, "g": 9.81}
    runs, programs = [], []
    for _ in range(2):
        damping = s2.Force(lambda t, q, omega, u, params: -0.5 * omega)
        runs.append(s2.simulate(pendulum.lagrangian, q0, omega0, params, dt=0.01, num_steps=20, force=damping))
        programs.append(simulate_module.program_count())
    assert programs[1] == programs[0]
    np.testing.assert_array_equal(runs[0].q, runs[1].q)
    stronger = s2.Force(lambda t, q, omega, u, params: -0.6 * omega)
    assert stronger != damping
    s2.simulate(pendulum.lagrangian, q0, omega0, params, dt=0.01, num_steps=20, force=stronger)
    assert simulate_module.program_count() == programs[0] + 1
