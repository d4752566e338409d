"""Readable result codes and solutions: `RESULTS.successful` in `repr(Solution)`, `Solution.summary()`."""

import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax._errors import failure_message
from s2jax._results import _results_repr

MASS, LENGTH, GRAVITY = 1.5, 2.0, 9.81


def pendulum(q, qdot, params):
    """A spherical pendulum, e₃ pointing down: L = ½ m l² |q̇|² + m g l q·e₃."""
    m, l, g = params["m"], params["l"], params["g"]
    return 0.5 * m * l**2 * jnp.sum(qdot**2) + m * g * l * q[0, 2]


PARAMS = {"m": MASS, "l": LENGTH, "g": GRAVITY}


def closed_form_energy(q, omega):
    """E = ½ m l² |ω × q|² − m g l q·e₃, written out by hand (not through s2jax.energy)."""
    qdot = np.cross(omega, q)
    return 0.5 * MASS * LENGTH**2 * np.sum(qdot**2, axis=(-1, -2)) - MASS * GRAVITY * LENGTH * q[..., 0, 2]


def initial_state():
    q0 = np.array([[np.sin(1.0), 0.0, np.cos(1.0)]])
    omega0 = np.cross(q0, np.array([[0.0, 1.3, 0.4]]))  # ⊥ q0
    return q0, omega0


def test_every_code_reads_as_its_name():
    assert _results_repr(s2.RESULTS.successful) == "RESULTS.successful"
    for name in s2.RESULTS._name_to_item:
        assert _results_repr(getattr(s2.RESULTS, name)) == f"RESULTS.{name}"
    # The message is still what indexing gives.
    assert s2.RESULTS[s2.RESULTS.newton_failed].startswith("Newton's method")


def test_bare_repr_of_a_code_is_equinoxs():
    # s2jax does not patch the item class that every eqx.Enumeration shares: a bare repr is
    # equinox's `module.RESULTS<message>` (the empty message is success).
    assert repr(s2.RESULTS.successful) == "s2jax._results.RESULTS<>"
    message = s2.RESULTS[s2.RESULTS.newton_failed]
    assert repr(s2.RESULTS.newton_failed) == f"s2jax._results.RESULTS<{message}>"


def test_codes_under_vmap_and_jit_read_as_names():
    def code(x):
        return s2.RESULTS.where(x > 0, s2.RESULTS.successful, s2.RESULTS.step_too_large)

    batch = jax.vmap(code)(jnp.array([1.0, -1.0, 2.0]))
    assert _results_repr(batch) == "RESULTS[successful, step_too_large, successful]"
    assert _results_repr(jax.jit(code)(jnp.array(-1.0))) == "RESULTS.step_too_large"
    seen = []
    jax.jit(lambda x: seen.append(_results_repr(code(x))) or x)(jnp.array(1.0))
    assert seen == ["RESULTS<traced>"]


def test_other_enumerations_keep_equinoxs_repr():
    class Other(eqx.Enumeration):
        fine = "all fine"

    assert repr(Other.fine).endswith("Other<all fine>")


def test_solution_repr_shows_shapes_not_arrays():
    q0, omega0 = initial_state()
    sol = s2.simulate(pendulum, q0, omega0, PARAMS, dt=0.01, num_steps=200, save_every=2)
    text = repr(sol)
    assert text == (
        "Solution(t=f64[101], q=f64[101,1,3], omega=f64[101,1,3], result=RESULTS.successful, failed_step=-1, "
        f"integrator={sol.integrator!r})"
    )


def test_summary_reports_result_errors_and_energy_drift():
    q0, omega0 = initial_state()
    sol = s2.simulate(pendulum, q0, omega0, PARAMS, dt=0.01, num_steps=200, save_every=2)
    text = sol.summary(pendulum, PARAMS)
    assert text.startswith("Solution: 1 body, 101 saved states, t = 0 … 2, every 0.02")
    assert "RESULTS.successful" in text
    q, omega = np.asarray(sol.q), np.asarray(sol.omega)
    unit = np.max(np.abs(np.linalg.norm(q, axis=-1) - 1))
    tangent = np.max(np.abs(np.sum(q * omega, axis=-1)))
    e = closed_form_energy(q, omega)
    drift = np.max(np.abs(e - e[0]))
    assert drift > 1e-6  # a real drift, so that the comparison below means something
    assert f"max ||q_i| − 1| = {unit:.2e}" in text
    assert f"max |q_i·ω_i| = {tangent:.2e}" in text
    assert f"max |E − E₀| = {drift:.3e} (relative {drift / abs(e[0]):.2e})" in text
    assert "E₀" not in sol.summary()  # no energy without the Lagrangian
    with pytest.raises(ValueError, match="both"):
        sol.summary(pendulum)


def test_summary_of_a_batch_names_the_failed_member():
    q0, omega0 = initial_state()

    def run(dt):
        return s2.simulate(pendulum, q0, omega0, PARAMS, dt=dt, num_steps=20, throw=False)

    sol = jax.vmap(run)(jnp.array([0.01, 5.0]))
    codes = re.search(r"result=(RESULTS\[[^]]*\])", repr(sol)).group(1)
    assert codes.startswith("RESULTS[successful, ") and "successful]" not in codes
    failed = codes.removeprefix("RESULTS[successful, ").removesuffix("]")
    text = sol.summary()
    assert "a batch of 2" in text and "1 of 2 successful" in text
    line = next(line for line in text.splitlines() if line.startswith("  [1]"))
    step = int(sol.failed_step[1])
    assert re.search(rf"RESULTS\.{failed} \(first failed step {step} → {step + 1};", line)
    assert "[0] RESULTS.successful" in text


def test_a_newton_failure_names_the_integrators_own_equations():
    """`RESULTS.newton_failed`'s generic message speaks of the VI's (3.16); the error `simulate`
    raises names the equations of the integrator that ran: RATTLE's constraints for `Rattle`."""
    dsp = s2.models.double_spherical_pendulum
    with pytest.raises(s2.SimulationError, match=r"RATTLE's position constraints .* for a Rattle step") as raised:
        s2.simulate(dsp.lagrangian, *dsp.paper_state(), dsp.paper_params(), dt=0.01, num_steps=3,
                    integrator=s2.Rattle(newton=s2.NewtonSettings(max_steps=1)))
    assert "(3.16)" not in str(raised.value)
    vi = failure_message(s2.RESULTS.newton_failed._value, 0, 0.01, integrator="VariationalIntegrator")
    assert "the Cayley equation (3.16)" in vi and "for a VariationalIntegrator step" in vi
