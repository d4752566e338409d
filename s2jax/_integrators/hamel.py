"""The discrete Hamel integrator of Zenkov–Leok–Bloch 2012 (004 §V), carried to (S²)ⁿ.

004's midpoint rule (19)–(24) for the pendulum, written in the spatial frame u_a(q) = e_a × q (whose
quasi-velocities are s2jax's ω) instead of 004's body frame, so that it takes any V(q) for a diagonal
M: per body M_ii (ω_{i,k+1} − ω_{i,k}) / h = q̄_i × F_i(q̄) (20), q̄ = ½(q_k + q_{k+1}), and
q_{i,k+1} = (I − A_i)⁻¹ (I + A_i) q_{i,k}, A_i = h/4 (ω_{i,k} + ω_{i,k+1})^ (21). In (q, ω) it is the
implicit midpoint rule: it keeps |q_i|, q_i·ω_i, the momentum maps and, for V linear in q, the energy.
Derivation, the mapping to 004's (Γ, Ω) and 004's slips: docs/integrators/hamel.md, docs/papers.md.
"""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp

from .._custom_types import Array, Float
from .._geometry import cayley_rotate
from .._newton import NewtonSettings, newton_root
from .._results import RESULTS
from .._system import AbstractSystem, LagrangianSystem
from .base import AbstractIntegrator, check_finite


class HamelState(eqx.Module):
    torque: Float[Array, "n 3"]  # q̄ × F(q̄) of the previous step (q × F(q) before the first)


class DiscreteHamelIntegrator(AbstractIntegrator):
    """The discrete Hamel equations (20)–(21) of 004, in s2jax's (q, ω), for a diagonal M.

    One step from (q_k, ω_k) (see docs/integrators/hamel.md for the derivation and the mapping to
    004's body variables Γ, Ω):

    1. solve for the mean angular velocity ω̄ = ½(ω_k + ω_{k+1}) the equation

           ω̄_i − ω_{i,k} − h/(2 M_ii) q̄_i × F_i(q̄) = 0,
           q_{i,k+1} = cay(h ω̄_i / 2) q_{i,k},   q̄ = ½(q_k + q_{k+1}),

       by Newton's method (`newton_root`), starting from ω_{i,k} + h/(2 M_ii) τ_i with τ the
       previous step's torque (an O(h²) guess). cay(h ω̄/2) = (I − A)⁻¹(I + A) with
       A = h/4 (ω_k + ω_{k+1})^ is the Cayley form of (21); every iterate is an exact rotation,
       so |q_i| holds to round-off even before Newton has converged;
    2. q_{k+1} = cay(h ω̄ / 2) q_k (21) and ω_{i,k+1} = ω_{i,k} + h/M_ii q̄_i × F_i(q̄) (20).

    F = −∂V/∂q + f; a non-conservative force f is evaluated at the midpoint (t_k + h/2, q̄, ω̄),
    so a force that depends on ω is solved for with ω̄.

    |q_i|, q_i·ω_i, the momentum maps of the symmetries of V and, for V linear in q, the
    energy are kept to round-off; the method is symmetric and of order 2.

    **Arguments:**

    - `newton`: Newton stops once max|δω̄| ≤ atol + rtol·max|ω̄|, or after `max_steps`
      iterations with `RESULTS.newton_failed` (`NewtonSettings`).
    """

    newton: NewtonSettings = NewtonSettings()

    system_type: ClassVar[type[AbstractSystem]] = LagrangianSystem
    order: ClassVar[int] = 2
    is_symmetric: ClassVar[bool] = True
    requires_diagonal_inertia: ClassVar[bool] = True
    velocity_dependent_forces: ClassVar[bool] = True

    def init(self, system, t0, y0, args):
        q, omega = y0
        return HamelState(jnp.cross(q, system.generalized_force(t0, q, omega, args)))

    def step(self, system, t0, dt, y, args, state):
        q, omega = y
        mass = jnp.diag(system.inertia(q, args))[:, None]
        t_mean = t0 + 0.5 * dt

        def rotate(mean_omega):
            q_next = cayley_rotate(0.5 * dt * mean_omega, q)
            q_mean = 0.5 * (q + q_next)
            return q_next, jnp.cross(q_mean, system.generalized_force(t_mean, q_mean, mean_omega, args))

        def residual(mean_omega):
            _, torque = rotate(mean_omega)
            return mean_omega - omega - 0.5 * dt / mass * torque

        guess = omega + 0.5 * dt / mass * state.torque
        mean_omega, _, converged = newton_root(
            residual, guess, **self.newton.options
        )
        q_next, torque = rotate(mean_omega)
        # (20) as written, rather than 2ω̄ − ω_k: the two agree once Newton has converged,
        # and this one makes q̄·(ω_{k+1} − ω_k) = 0 hold to round-off.
        omega_next = omega + dt / mass * torque
        result = RESULTS.where(converged, RESULTS.successful, RESULTS.newton_failed)
        result = check_finite(result, q_next, omega_next)
        return (q_next, omega_next), HamelState(torque), result
