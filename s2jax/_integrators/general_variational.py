"""The variational integrator of the trapezoidal discrete Lagrangian, for any regular L on (S²)ⁿ.

L_d(q_k, q_{k+1}) = h/2 L(q_k, Δ/h) + h/2 L(q_{k+1}, Δ/h), Δ = q_{k+1} − q_k, is (3.1) of 002 term
by term for L of the form (2.2), and symmetric, so the method is of order 2. The forced discrete
Euler–Lagrange equations, restricted to δq_i = ξ_i × q_i as in 002 (3.4)–(3.9), are solved for
q_{k+1} = cay(f) q_k (002 (3.11)), then for ω_{k+1} ⊥ q_{k+1}. Derivation, and why not the
midpoint rule: docs/integrators/general.md.
"""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from .._custom_types import Array, Float
from .._general_system import GeneralLagrangianSystem, pinned_tangent
from .._geometry import cayley_rotate
from .._newton import NewtonSettings, newton_root
from .._results import RESULTS
from .._system import AbstractSystem
from .base import AbstractIntegrator, check_finite, check_system_type


class GeneralState(eqx.Module):
    cayley_rate: Float[Array, "n 3"]  # f/h of the last step: Newton's initial guess, times h


def trapezoidal_discrete_lagrangian(lagrangian, q0, q1, dt, params) -> Float[Array, ""]:
    """L_d(q_k, q_{k+1}) = h/2 (L(q_k, Δ/h) + L(q_{k+1}, Δ/h)), Δ = q_{k+1} − q_k: (3.1) for (2.2)."""
    velocity = (q1 - q0) / dt
    return 0.5 * dt * (lagrangian(q0, velocity, params) + lagrangian(q1, velocity, params))


class GeneralVariationalIntegrator(AbstractIntegrator):
    """The variational integrator of the trapezoidal L_d for any regular L(q, q̇) on (S²)ⁿ.

    One step from (q_k, ω_k), for a `GeneralLagrangianSystem`:

    1. μ_k = q_k × ∂L/∂q̇(q_k, ω_k × q_k) and f_k = f(t_k, q_k, ω_k, u_k);
    2. solve q_k × (−D₁L_d(q_k, cay(f) q_k) − h/2 f_k) = μ_k for f (n × 3) by Newton's method
       (`newton_root`, so derivatives come from the implicit function theorem). Each body's
       equation has two tangent components; its normal component is replaced by f_i·q_i = 0
       (`pinned_tangent`), which makes Newton in ℝ³ per body Newton in a 2-D basis of
       T_{q_i} S² with the normal direction fixed. It starts from h times the previous step's
       f/h (h ω_k/2 at the first step);
    3. q_{k+1} = cay(f) q_k, an exact rotation, so |q_i| = 1 to round-off;
    4. solve q_{k+1} × ∂L/∂q̇(q_{k+1}, ω × q_{k+1}) = q_{k+1} × (D₂L_d(q_k, q_{k+1}) + h/2 f_{k+1})
       for ω = ω_{k+1} ⊥ q_{k+1} by Newton's method from ω_k (one iteration when ∂L/∂q̇ is affine in
       q̇; a force depending on ω enters the same solve).

    A step with −h from (q_{k+1}, ω_{k+1}) returns (q_k, ω_k) to the Newton tolerance when f does
    not depend on ω (`ReversibleAdjoint`).

    **Arguments:**

    - `newton`: Newton's stopping rule and iteration cap (`NewtonSettings`); the defaults leave
      round-off; reaching its cap gives `RESULTS.newton_failed`.
    """

    newton: NewtonSettings = NewtonSettings()

    system_type: ClassVar[type[AbstractSystem]] = GeneralLagrangianSystem
    order: ClassVar[int] = 2
    is_symmetric: ClassVar[bool] = True
    requires_diagonal_inertia: ClassVar[bool] = False
    velocity_dependent_forces: ClassVar[bool] = True

    def init(self, system, t0, y0, args):
        check_system_type(self, system)
        # f ≈ (h/2) ω for small steps, so f/h starts at ω/2.
        return GeneralState(0.5 * y0[1])

    def step(self, system, t0, dt, y, args, state):
        check_system_type(self, system)
        q, omega = y
        lagrangian, params = system.lagrangian, args.params
        newton = dict(**self.newton.options)
        momentum = jnp.cross(q, system.ambient_momentum(q, omega, args))
        impulse = momentum + 0.5 * dt * jnp.cross(q, system.nonconservative_force(t0, q, omega, args))

        def position_residual(f):
            q_next = cayley_rotate(f, q)
            d1 = jax.grad(trapezoidal_discrete_lagrangian, argnums=1)(lagrangian, q, q_next, dt, params)
            # × h: the momentum residual ~ M Δ/h then scales like M f, as the pinned f·q does.
            return pinned_tangent(q, f, dt * (-jnp.cross(q, d1) - impulse))

        f, _, converged = newton_root(position_residual, dt * state.cayley_rate, **newton)
        q_next = cayley_rotate(f, q)
        d2 = jax.grad(trapezoidal_discrete_lagrangian, argnums=2)(lagrangian, q, q_next, dt, params)
        end_momentum = jnp.cross(q_next, d2)
        t1 = t0 + dt

        def velocity_residual(w):
            force = system.nonconservative_force(t1, q_next, w, args)
            target = end_momentum + 0.5 * dt * jnp.cross(q_next, force)
            return pinned_tangent(q_next, w, jnp.cross(q_next, system.ambient_momentum(q_next, w, args)) - target)

        omega_next, _, solved = newton_root(velocity_residual, omega, **newton)
        result = RESULTS.where(converged & solved, RESULTS.successful, RESULTS.newton_failed)
        result = check_finite(result, q_next, omega_next)
        return (q_next, omega_next), GeneralState(f / dt), result
