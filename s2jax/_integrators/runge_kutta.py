"""Fixed-step explicit Runge–Kutta baselines on the continuous equations (2.9)–(2.11).

These are the generic ODE solvers the papers compare against. They treat (q, ω) as a point
of ℝ⁶ⁿ, so |q_i| = 1 and q_i·ω_i = 0 drift at the order of the method; only
`RungeKutta2WithReprojection` normalises q_i after each step, as the baseline of 002 Example 3.
"""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp

from .._custom_types import Array, Float
from .._results import RESULTS
from .base import AbstractIntegrator, check_finite


class RungeKuttaState(eqx.Module):
    inertia: Float[Array, "n n"]


def _runge_kutta_step(system, q, omega, params, dt, inertia, a, b, c):
    """One explicit Runge–Kutta step with tableau (a, b, c) on y = (q, ω)."""
    del c  # the equations are autonomous
    stages = []
    for i in range(len(b)):
        qi, wi = q, omega
        for j, aij in enumerate(a[i]):
            if aij:
                qi = qi + dt * aij * stages[j][0]
                wi = wi + dt * aij * stages[j][1]
        stages.append(system.vector_field(qi, wi, params, inertia))
    q_next = q + dt * sum(bi * k[0] for bi, k in zip(b, stages) if bi)
    omega_next = omega + dt * sum(bi * k[1] for bi, k in zip(b, stages) if bi)
    return q_next, omega_next


_RK4 = (((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)), (1 / 6, 1 / 3, 1 / 3, 1 / 6), (0.0, 0.5, 0.5, 1.0))
_HEUN = (((), (1.0,)), (0.5, 0.5), (0.0, 1.0))


class RungeKutta4(AbstractIntegrator):
    """The classical fourth-order Runge–Kutta method on (2.9)–(2.11); no projection."""

    requires_diagonal_inertia: ClassVar[bool] = False

    def init(self, system, q, omega, params, dt):
        return RungeKuttaState(system.inertia(q, params))

    def step(self, system, q, omega, params, dt, state):
        q1, w1 = _runge_kutta_step(system, q, omega, params, dt, state.inertia, *_RK4)
        return q1, w1, state, check_finite(RESULTS.successful, q1, w1)


class RungeKutta2(AbstractIntegrator):
    """Heun's second-order Runge–Kutta method on (2.9)–(2.11); no projection."""

    requires_diagonal_inertia: ClassVar[bool] = False

    def init(self, system, q, omega, params, dt):
        return RungeKuttaState(system.inertia(q, params))

    def step(self, system, q, omega, params, dt, state):
        q1, w1 = _runge_kutta_step(system, q, omega, params, dt, state.inertia, *_HEUN)
        return q1, w1, state, check_finite(RESULTS.successful, q1, w1)


class RungeKutta2WithReprojection(AbstractIntegrator):
    """Heun's method followed by q_i ← q_i / |q_i| (the 'RK2 with projection' of 002 Example 3).

    Only q is normalised, as in the paper; ω keeps its normal component.
    """

    requires_diagonal_inertia: ClassVar[bool] = False

    def init(self, system, q, omega, params, dt):
        return RungeKuttaState(system.inertia(q, params))

    def step(self, system, q, omega, params, dt, state):
        q1, w1 = _runge_kutta_step(system, q, omega, params, dt, state.inertia, *_HEUN)
        q1 = q1 / jnp.linalg.norm(q1, axis=-1, keepdims=True)
        return q1, w1, state, check_finite(RESULTS.successful, q1, w1)
