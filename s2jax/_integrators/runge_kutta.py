"""Fixed-step explicit Runge–Kutta baselines on the continuous equations (2.9)–(2.11).

These are the generic ODE solvers the papers compare against. They treat (q, ω) as a point
of ℝ⁶ⁿ, so |q_i| = 1 and q_i·ω_i = 0 drift at the order of the method; only
`RungeKutta2WithReprojection` normalises q_i after each step, as the baseline of 002 Example 3.
See docs/integrators/runge_kutta.md.
"""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp

from .._results import RESULTS
from .._system import AbstractSystem
from .base import AbstractIntegrator, check_finite


def runge_kutta_step(system, t0, dt, y, args, tableau):
    """One explicit Runge–Kutta step with Butcher tableau (a, b, c) on y = (q, ω) ∈ ℝ⁶ⁿ."""
    a, b, c = tableau
    q, omega = y
    stages = []
    for i in range(len(b)):
        qi, wi = q, omega
        for j, aij in enumerate(a[i]):
            if aij:
                qi = qi + dt * aij * stages[j][0]
                wi = wi + dt * aij * stages[j][1]
        stages.append(system.vector_field(t0 + c[i] * dt, qi, wi, args))
    q_next = q + dt * sum(bi * k[0] for bi, k in zip(b, stages) if bi)
    omega_next = omega + dt * sum(bi * k[1] for bi, k in zip(b, stages) if bi)
    return q_next, omega_next


class AbstractRungeKutta(AbstractIntegrator):
    """An explicit Runge–Kutta method on (2.9)–(2.11), given by its tableau (a, b, c).

    `reproject`: normalise q_i after each step (only q; ω keeps its normal component).
    """

    tableau: eqx.AbstractClassVar[tuple]
    reproject: eqx.AbstractClassVar[bool]

    system_type: ClassVar[type[AbstractSystem]] = AbstractSystem
    is_symmetric: ClassVar[bool] = False
    requires_diagonal_inertia: ClassVar[bool] = False
    velocity_dependent_forces: ClassVar[bool] = True

    def init(self, system, t0, y0, args):
        return None

    def step(self, system, t0, dt, y, args, state):
        q1, w1 = runge_kutta_step(system, t0, dt, y, args, self.tableau)
        if self.reproject:
            q1 = q1 / jnp.linalg.norm(q1, axis=-1, keepdims=True)
        return (q1, w1), state, check_finite(RESULTS.successful, q1, w1)


class RungeKutta4(AbstractRungeKutta):
    """The classical fourth-order Runge–Kutta method on (2.9)–(2.11); no projection."""

    tableau: ClassVar[tuple] = (
        ((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)),
        (1 / 6, 1 / 3, 1 / 3, 1 / 6),
        (0.0, 0.5, 0.5, 1.0),
    )
    reproject: ClassVar[bool] = False
    order: ClassVar[int] = 4


class RungeKutta2(AbstractRungeKutta):
    """Heun's second-order Runge–Kutta method on (2.9)–(2.11); no projection."""

    tableau: ClassVar[tuple] = (((), (1.0,)), (0.5, 0.5), (0.0, 1.0))
    reproject: ClassVar[bool] = False
    order: ClassVar[int] = 2


class RungeKutta2WithReprojection(AbstractRungeKutta):
    """Heun's method followed by q_i ← q_i / |q_i| (the 'RK2 with projection' of 002 Example 3).

    Only q is normalised, as in the paper; ω keeps its normal component.
    """

    tableau: ClassVar[tuple] = RungeKutta2.tableau
    reproject: ClassVar[bool] = True
    order: ClassVar[int] = 2
