"""Issue 32, item 2: `Stepper`, one step planned and compiled once, called from a Python loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2

dsp = s2.models.double_spherical_pendulum
Q0, OMEGA0 = (jnp.asarray(x) for x in dsp.paper_state())
PARAMS = dsp.paper_params()


def test_a_loop_of_steps_follows_simulate_and_never_recompiles():
    stepper = s2.Stepper(dsp.lagrangian, Q0, OMEGA0, PARAMS, dt=0.01)
    reference = s2.simulate(dsp.lagrangian, Q0, OMEGA0, PARAMS, dt=0.01, num_steps=50)
    q, omega = Q0, OMEGA0
    for k in range(50):
        q, omega = stepper(q, omega)
        # The same step; Newton starts afresh each call (simulate carries its state), so the two
        # agree to the Newton tolerance (1e-13), not bitwise: measured 1e-14 after 100 steps.
        np.testing.assert_allclose(q, reference.q[k + 1], rtol=0, atol=1e-12)
        np.testing.assert_allclose(omega, reference.omega[k + 1], rtol=0, atol=1e-12)
    assert stepper._step._cache_size() == 1  # 50 new states, one program


def test_a_controlled_loop_follows_simulate_with_the_same_controls():
    pendulum = s2.models.spherical_pendulum
    params = {"m": 1.0, "r": 1.0, "g": 9.81}
    q0, omega0 = jnp.array([[0.0, 0.6, 0.8]]), jnp.zeros((1, 3))
    controls = jnp.stack([jnp.array([np.sin(0.3 * k), 0.5, 0.0]) for k in range(20)])
    force = s2.forces.PivotTorque(0)
    stepper = s2.Stepper(pendulum.lagrangian, q0, omega0, params, dt=0.02, force=force, u0=controls[0])
    reference = s2.simulate(
        pendulum.lagrangian, q0, omega0, params, dt=0.02, num_steps=20, force=force, controls=controls
    )
    q, omega = q0, omega0
    for k in range(20):
        q, omega = stepper(q, omega, controls[k], t=0.02 * k)
    np.testing.assert_allclose(q, reference.q[-1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(omega, reference.omega[-1], rtol=0, atol=1e-12)


def test_a_stepper_refuses_what_cannot_be_stepped():
    stepper = s2.Stepper(dsp.lagrangian, Q0, OMEGA0, PARAMS, dt=0.01)
    message = r"Stepper \(VariationalIntegrator\), the step from t = 0.0: the initial state"
    with pytest.raises(s2.SimulationError, match=message):
        stepper(2.0 * Q0, OMEGA0)  # |q_i| = 2: checked in the compiled step
    with pytest.raises(ValueError, match="chooses its own steps"):
        s2.Stepper(dsp.lagrangian, Q0, OMEGA0, PARAMS, dt=0.01, integrator=s2.AdaptiveRungeKutta45())
    with pytest.raises(ValueError, match="not positive definite"):  # simulate's eager checks, once
        s2.Stepper(dsp.lagrangian, Q0, OMEGA0, dict(PARAMS, m2=-1.0), dt=0.01)
    with pytest.raises(ValueError, match="reads the control u, but the run has no `controls`"):
        s2.Stepper(dsp.lagrangian, Q0, OMEGA0, PARAMS, dt=0.01, force=s2.forces.PivotTorque(0))  # no u0
    with pytest.raises(ValueError, match="no force, so nothing reads the control u"):
        stepper(Q0, OMEGA0, jnp.zeros(3))
    with pytest.raises(ValueError, match="called from Python with concrete states"):
        jax.jit(stepper)(Q0, OMEGA0)
    with pytest.raises(ValueError, match="built from concrete values"):
        jax.jit(lambda g: s2.Stepper(dsp.lagrangian, Q0, OMEGA0, dict(PARAMS, g=g), dt=0.01).dt)(9.81)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["general", "hamiltonian"])
def test_every_system_kind_steps_as_simulate_does(kind):
    """A general L (the rotating pendulum: GeneralVariationalIntegrator) and a HamiltonianSystem
    (HamiltonianRattle) take the plan `simulate` makes for them, step for step."""
    if kind == "general":
        rotating = s2.models.rotating_spherical_pendulum
        model, params = rotating.lagrangian, rotating.paper_params()
        q0, omega0 = (jnp.asarray(x) for x in rotating.paper_state())
    else:
        model, params, q0, omega0 = s2.HamiltonianSystem(s2.legendre_transform(dsp.lagrangian)), PARAMS, Q0, OMEGA0
    stepper = s2.Stepper(model, q0, omega0, params, dt=0.01)
    reference = s2.simulate(model, q0, omega0, params, dt=0.01, num_steps=10)
    assert type(stepper.integrator).__name__ == reference.integrator
    q, omega = q0, omega0
    for _ in range(10):
        q, omega = stepper(q, omega)
    np.testing.assert_allclose(q, reference.q[-1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(omega, reference.omega[-1], rtol=0, atol=1e-12)
