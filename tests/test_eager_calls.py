"""Repeated eager calls of `simulate` (`s2jax/_eager.py`): the plan made once, the checks kept.

A call equal to an earlier one but for the state, dt or controls runs the program the first call
compiled, without planning again; everything the first call checks before compiling is still
refused, with the same error.
"""

import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax import _simulate
from s2jax._eager import EagerCalls
from s2jax.models import double_spherical_pendulum as dsp

Q0, OMEGA0 = (np.asarray(x) for x in dsp.paper_state())


class _CountingCalls(EagerCalls):
    runs = 0

    def run(self, *args):
        self.runs += 1
        return super().run(*args)


@pytest.fixture
def plans(monkeypatch):
    """The plans made during a test; the test starts with no call remembered, and
    `_simulate._EAGER_CALLS.runs` counts the runs of remembered programs."""
    made = []
    monkeypatch.setattr(_simulate, "_EAGER_CALLS", _CountingCalls())
    original = _simulate.plan

    def counting(*args, **kwargs):
        the_plan = original(*args, **kwargs)
        made.append(the_plan)
        return the_plan

    monkeypatch.setattr(_simulate, "plan", counting)
    return made


def _run(q0=Q0, omega0=OMEGA0, params=None, **kwargs):
    params = dsp.paper_params() if params is None else params
    return s2.simulate(dsp.lagrangian, q0, omega0, params, dt=kwargs.pop("dt", 0.01), num_steps=10, **kwargs)


def test_a_repeated_call_is_planned_once_and_runs_the_same_program(plans, compilations):
    first = _run()
    q1, omega1 = np.asarray(first.q)[-1], np.asarray(first.omega)[-1]
    repeated = {}
    # a new state (numpy arrays now) and step: the same plan
    compiled = compilations(lambda: repeated.update(second=_run(q1, omega1, dt=0.02)))
    second = repeated["second"]
    assert len(plans) == 1
    assert compiled == 0
    # The same numbers as a call planned afresh (another Lagrangian object, the same function).
    fresh = s2.simulate(lambda q, qdot, p: dsp.lagrangian(q, qdot, p), q1, omega1, dsp.paper_params(), dt=0.02,
                        num_steps=10)
    assert len(plans) == 2
    np.testing.assert_array_equal(second.q, fresh.q)
    assert second.integrator == fresh.integrator == first.integrator


def test_new_params_are_planned_again(plans):
    _run()
    _run(params={**dsp.paper_params(), "m2": 2.0})
    assert len(plans) == 2
    _run(params={**dsp.paper_params(), "m2": 2.0})  # equal values in a new dict: remembered
    assert len(plans) == 2


def test_a_params_array_changed_in_place_is_planned_again(plans):
    params = {**dsp.paper_params(), "g": np.array(9.81)}
    before = _run(params=params)
    params["g"][...] = 1.0
    after = _run(params=params)
    assert len(plans) == 2
    assert float(jnp.max(jnp.abs(after.q - before.q))) > 1e-6


def test_a_new_structure_of_m_changes_the_integrator():
    """M diagonal or not decides the integrator: a repeated call with the coupling switched on
    is planned again, not run with the diagonal plan's explicit integrator."""
    def lagrangian(q, qdot, params):
        c = params["c"]
        kinetic = 0.5 * (jnp.sum(qdot * qdot) + 2 * c * jnp.dot(qdot[0], qdot[1]))
        return kinetic - jnp.sum(q[:, 2])

    diagonal = s2.simulate(lagrangian, Q0, OMEGA0, {"c": 0.0}, dt=0.01, num_steps=10)
    coupled = s2.simulate(lagrangian, Q0, OMEGA0, {"c": 0.3}, dt=0.01, num_steps=10)
    assert diagonal.integrator == "ExplicitVariationalIntegrator"
    assert coupled.integrator == "VariationalIntegrator"


def test_a_bad_state_in_a_repeated_call_raises_the_eager_error(plans):
    _run()
    bad = Q0.copy()
    bad[1] *= 1.001
    with pytest.raises(ValueError, match="q0 of body 1 is not a unit vector"):
        _run(bad)
    with pytest.raises(ValueError, match="omega0 of body 0 is not tangent"):
        _run(omega0=OMEGA0 + Q0)
    with pytest.raises(ValueError, match="dt must be a finite positive number"):
        _run(dt=-0.01)
    # All three were refused by the remembered program's checks, not before it.
    assert len(plans) == 1 and _simulate._EAGER_CALLS.runs == 4


def test_bad_controls_in_a_repeated_call_raise_the_eager_error(plans):
    force = s2.forces.PivotTorque(0)  # τ = u on body 0
    controls = np.zeros((10, 3))
    _run(force=force, controls=controls)
    controls = controls.copy()
    controls[3] = np.nan
    with pytest.raises(ValueError, match="`controls` of step 3 is not finite"):
        _run(force=force, controls=controls)
    assert len(plans) == 1 and _simulate._EAGER_CALLS.runs == 2


def test_a_failed_step_in_a_repeated_call_raises_or_reports(plans):
    _run()
    with pytest.raises(s2.SimulationError, match="step"):
        _run(dt=50.0)
    assert len(plans) == 1
    _run(throw=False)  # another option: another plan
    failed = _run(dt=50.0, throw=False)
    assert failed.result != s2.RESULTS.successful
    assert failed.failed_step >= 0
    assert len(plans) == 2


def test_a_changed_declaration_is_planned_again(plans):
    def lagrangian(q, qdot, params):
        return dsp.lagrangian(q, qdot, params)

    params = {**dsp.paper_params(), "l1": -1.0}
    s2.simulate(lagrangian, Q0, OMEGA0, params, dt=0.01, num_steps=2)
    s2.positive_parameters("l1")(lagrangian)  # the same function object, now declaring l1 > 0
    with pytest.raises(ValueError, match=r"params\['l1'\] = -1.0 must be > 0"):
        s2.simulate(lagrangian, Q0, OMEGA0, params, dt=0.01, num_steps=2)


def test_the_calls_remembered_are_bounded(monkeypatch):
    calls = EagerCalls(max_entries=2)
    monkeypatch.setattr(_simulate, "_EAGER_CALLS", calls)
    for num_steps in (2, 4, 6):
        s2.simulate(dsp.lagrangian, Q0, OMEGA0, dsp.paper_params(), dt=0.01, num_steps=num_steps)
    assert len(calls._entries) == 2
    assert [key[6] for key in calls._entries] == [4, 6]  # num_steps in the key: the oldest went


def test_a_feedback_policy_is_remembered(plans):
    force = s2.forces.PivotTorque(0)

    def policy(t, q, omega, params):  # a damping torque, sampled at the start of each step
        return -0.5 * omega[0]

    first = _run(force=force, controls=policy)
    second = _run(force=force, controls=policy)
    assert len(plans) == 1 and _simulate._EAGER_CALLS.runs == 2
    np.testing.assert_array_equal(second.q, first.q)
    undamped = _run(force=force, controls=np.zeros((10, 3)))
    assert float(jnp.max(jnp.abs(undamped.omega[-1] - first.omega[-1]))) > 1e-6


@pytest.mark.slow
def test_a_hamiltonian_system_is_remembered_and_a_general_lagrangian_planned_each_call(plans):
    """A `HamiltonianSystem` is planned once and repeats the fresh plan's numbers; a general L
    (the rotating pendulum), whose ∂²L/∂q̇∂q̇ is checked at each initial state, is planned on every call."""
    hamiltonian = s2.HamiltonianSystem(s2.legendre_transform(dsp.lagrangian))
    params = dsp.paper_params()
    first = s2.simulate(hamiltonian, Q0, OMEGA0, params, dt=0.01, num_steps=5)
    q1, omega1 = np.asarray(first.q)[-1], np.asarray(first.omega)[-1]
    repeated = s2.simulate(hamiltonian, q1, omega1, params, dt=0.01, num_steps=5)
    assert len(plans) == 1 and _simulate._EAGER_CALLS.runs == 2
    fresh = s2.simulate(s2.HamiltonianSystem(hamiltonian.hamiltonian), q1, omega1, params, dt=0.01, num_steps=5)
    assert len(plans) == 2
    np.testing.assert_array_equal(repeated.q, fresh.q)

    rotating = s2.models.rotating_spherical_pendulum
    state = [np.asarray(x) for x in rotating.paper_state()]
    for _ in range(2):
        s2.simulate(rotating.lagrangian, *state, rotating.paper_params(), dt=0.01, num_steps=5)
    assert len(plans) == 4 and _simulate._EAGER_CALLS.runs == 3  # the three Hamiltonian calls only
