"""Ready trajectory-optimisation problems, with their initial states and initial guesses."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import forces
from ..models import chain_pendulum, spherical_pendulum
from ._problem import Problem

UPRIGHT = np.array([0.0, 0.0, -1.0])  # e₃ points down (gravity), so upright is −e₃


# The costs are modules, not closures, so that building an example twice gives equal problems
# and `solve` does not compile again.
class _Effort(eqx.Module):
    """ℓ = w |u|²."""

    weight: float

    def __call__(self, t, q, omega, u):
        return self.weight * jnp.sum(u**2)


class _AtRestAt(eqx.Module):
    """c(q, ω) = (q − target, ω)."""

    target: jax.Array = eqx.field(converter=jnp.asarray)

    def __call__(self, q, omega):
        return jnp.concatenate([(q - self.target).ravel(), omega.ravel()])


def spherical_pendulum_swing_up(horizon: float = 6.0, dt: float = 0.02, bound: float = 0.3):
    """Swing a spherical pendulum (m = 1 kg, r = 1 m, g = 9.81 m/s²) from hanging at rest to
    upright at rest with a pivot torque |u_i| ≤ `bound`·m g r per component.

    With bound = 0.3 the torque cannot lift the bob directly (that needs m g r): the solution
    pumps energy over several swings. The end state is a terminal constraint,
    c = (q_N − (−e₃), ω_N) = 0; the running cost is 0.01 |u|² (N·m)² per second.

    Hanging at rest with u = 0 is a stationary point of the cost (by the symmetry about the
    vertical, every first-order change of u leaves q_N·e₃ unchanged), so the initial guess is
    a small torque about e₁ at the pendulum's natural frequency √(g/r).

    **Returns:** `(problem, q0, omega0, init)`.
    """
    params = {"m": 1.0, "r": 1.0, "g": 9.81}
    limit = bound * params["m"] * params["g"] * params["r"]
    num_steps = round(horizon / dt)
    problem = Problem(
        spherical_pendulum.lagrangian, params, forces.PivotTorque(0), dt, num_steps,
        running_cost=_Effort(0.01), terminal_constraint=_AtRestAt(UPRIGHT[None]),
        lower=-limit * jnp.ones(3), upper=limit * jnp.ones(3),
    )
    t = dt * np.arange(num_steps)
    init = np.zeros((num_steps, 3))
    init[:, 0] = 0.2 * limit * np.sin(np.sqrt(params["g"] / params["r"]) * t)
    return problem, np.array([[0.0, 0.0, 1.0]]), np.zeros((1, 3)), init


def double_pendulum_swing_up(horizon: float = 12.0, dt: float = 0.05, bound: float = 0.5):
    """The 3-D pendubot: 002 Example 1's double spherical pendulum (m = 1 kg, l = 9.81 m) from
    hanging at rest to both links upright at rest, with a torque on the first link only,
    |u_i| ≤ `bound`·(m₁ + m₂) g l₁ per component (the second link is unactuated).

    Terminal constraint q_N = (−e₃, −e₃), ω_N = 0; running cost 10⁻⁴ |u|² per second. The
    initial guess is a small torque about e₁ at the frequency √(g/l).

    **Returns:** `(problem, q0, omega0, init)`.
    """
    params = chain_pendulum.paper_params(2)
    limit = bound * 2 * params["g"] * params["lengths"][0]
    num_steps = round(horizon / dt)
    problem = Problem(
        chain_pendulum.lagrangian, params, forces.PivotTorque(0), dt, num_steps,
        running_cost=_Effort(1e-4), terminal_constraint=_AtRestAt(np.tile(UPRIGHT, (2, 1))),
        lower=-limit * jnp.ones(3), upper=limit * jnp.ones(3),
    )
    t = dt * np.arange(num_steps)
    init = np.zeros((num_steps, 3))
    init[:, 0] = 0.1 * limit * np.sin(np.sqrt(params["g"] / params["lengths"][0]) * t)
    return problem, np.tile([0.0, 0.0, 1.0], (2, 1)), np.zeros((2, 3)), init


def torque_sweep(problem: Problem, amplitudes, frequencies, phases=(0.0,), axis: int = 0) -> np.ndarray:
    """Initial guesses for `multi_start`: u_k = a sin(f t_k + φ) along control component `axis`
    (the others zero), for every combination of amplitude a (the control's units), frequency f
    (rad/s) and phase φ, clipped into the bounds.

    iLQR finds the local optimum nearest its guess. On the pendubot
    (`double_pendulum_swing_up`), the default guess (a = 0.1·bound, f = √(g/l)) converges to
    J = 5.9206; the 18 guesses a ∈ {0.1, 0.3, 0.6}·bound, f ∈ {0.7, 1, 1.4}·√(g/l), φ ∈ {0, π/2}
    find J = 5.3532 from 8 of them (below the 5.838 that CasADi + IPOPT found from an
    energy-pumping guess, issue 31), 5.9206 from 2, and 8 do not converge. On the spherical pendulum's
    swing-up all 24 guesses of a ∈ {0.1, 0.2, 0.5, 1}·bound, f ∈ {0.7, 1, 1.4}·√(g/r) find
    the same J = 0.15966.

    **Returns:** the guesses, shape (len(amplitudes)·len(frequencies)·len(phases), num_steps,
    *control_shape), amplitude slowest.
    """
    t = problem.dt * np.arange(problem.num_steps)
    guesses = []
    for amplitude in amplitudes:
        for frequency in frequencies:
            for phase in phases:
                guess = np.zeros((problem.num_steps, *problem.control_shape))
                guess[:, axis] = amplitude * np.sin(frequency * t + phase)
                guesses.append(np.asarray(problem.clip(jnp.asarray(guess))))
    return np.stack(guesses)


def chain_with_disturbance(horizon: float = 10.0, dt: float = 0.05):
    """001 §V: the chain pendulum (n = 3, m_i = 1 kg, l_i = 9.81 m) with a base torque τ = u and
    a known tip force d = (0, 5, 0) N, driven from 001's initial state (`paper_state(3)`) to rest
    in the configuration with every link 30° from the downward vertical towards e₁.

    The tip force alone would hold the chain out of that plane; the torque must reject it.
    Terminal constraint q_N = target, ω_N = 0; running cost 10⁻³ |u|² per second; no bounds.
    The target is not an equilibrium without the torque, so the final state is held only at T.

    **Returns:** `(problem, q0, omega0, init)`.
    """
    params = chain_pendulum.paper_params(3)
    disturbance = np.array([0.0, 5.0, 0.0])
    angle = np.pi / 6
    target = np.tile([np.sin(angle), 0.0, np.cos(angle)], (3, 1))
    num_steps = round(horizon / dt)
    problem = Problem(
        chain_pendulum.lagrangian, params, chain_pendulum.base_torque_and_tip_force(params, disturbance), dt,
        num_steps, running_cost=_Effort(1e-3), terminal_constraint=_AtRestAt(target),
    )
    q0, omega0 = chain_pendulum.paper_state(3)
    return problem, q0, omega0, np.zeros((num_steps, 3))
