"""RATTLE for a general Hamiltonian on T*(S²)ⁿ, embedded in ℝ³ⁿ × ℝ³ⁿ.

RATTLE of Hairer–Lubich–Wanner VII (1.26) (symplectic, symmetric, order 2 for a non-separable K)
with the constraints |q_i|² = 1, on the augmented Hamiltonian
K(q, p) = H(q, p − (q·p) q/|q|²) + ½ Σ_i (q_i·p_i)²/m_i, m_i = m_ii(q₀), which equals H on T*(S²)ⁿ,
where its flow is 001 (23)–(24). The half-step momentum, q_{n+1} and the scaled multipliers are
solved together by `newton_root`; the second multiplier is the projection onto q·p = 0. |q_i| = 1
holds to the Newton tolerance, q_i·μ_i = 0 to round-off. Derivation: docs/integrators/hamiltonian.md.
"""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from .._custom_types import Array, Float
from .._geometry import dot
from .._hamiltonian import HamiltonianSystem
from .._newton import NewtonSettings, newton_root
from .._results import RESULTS
from .._system import AbstractSystem
from .base import AbstractIntegrator, check_finite, check_system_type


class HamiltonianState(eqx.Module):
    momentum: Float[Array, "n 3"]  # μ_k ⊥ q_k, 001 (20)
    stiffness: Float[Array, " n"]  # 1/m_ii(q₀), the weight of (q_i·p_i)² in K


def _augmented_hamiltonian(hamiltonian, q, p, params, stiffness):
    """K(q, p) = H(q, p − (q·p) q/|q|²) + ½ Σ_i (q_i·p_i)²/m_i: H on T*(S²)ⁿ, hidden constraint q·p = 0."""
    normal = dot(q, p)
    tangent = p - (normal / dot(q, q))[:, None] * q
    return hamiltonian(q, tangent, params) + 0.5 * jnp.sum(stiffness * normal**2)


class HamiltonianRattle(AbstractIntegrator):
    """RATTLE (HLW VII (1.26)) for a `HamiltonianSystem` on T*(S²)ⁿ: symplectic, symmetric, order 2.

    See docs/integrators/hamiltonian.md for the scheme. It carries μ in its state and ignores the
    incoming ω (as `Rattle` carries v); the ω it returns is q × ∂H/∂μ, the inverse Legendre
    map. Non-conservative forces enter with weight h/2 at both ends of the step, evaluated with
    the step's initial ω, so they may not depend on ω.

    **Arguments:**

    - `newton`: Newton's stopping rule and iteration cap (`NewtonSettings`).
    """

    newton: NewtonSettings = NewtonSettings()

    system_type: ClassVar[type[AbstractSystem]] = HamiltonianSystem
    order: ClassVar[int] = 2
    is_symmetric: ClassVar[bool] = True
    requires_diagonal_inertia: ClassVar[bool] = False
    velocity_dependent_forces: ClassVar[bool] = False

    def init(self, system, t0, y0, args):
        check_system_type(self, system)
        q, omega = y0
        # K's normal mass per body: m_ii(q₀), fixed for the whole run so that K, and with it
        # the method's symmetry, does not change from step to step (docs/integrators/hamiltonian.md).
        stiffness = 1.0 / jnp.diag(system.inertia(q, args))
        return HamiltonianState(system.momentum(q, omega, args), stiffness)

    def step(self, system, t0, dt, y, args, state):
        q, omega = y  # μ is carried as `state.momentum`
        p = state.momentum
        n = q.shape[0]

        def augmented(x, momentum):
            return _augmented_hamiltonian(system.hamiltonian, x, momentum, args.params, state.stiffness)

        gradients = jax.grad(augmented, argnums=(0, 1))

        force = system.nonconservative_force(t0, q, omega, args)
        dkdp_start = gradients(q, p)[1]

        def residual(z):
            z = z.reshape(n, 3, 3)
            p_half, q_next, nu = z[:, 0], z[:, 1], z[:, 2, :1]
            dkdq, dkdp = gradients(q, p_half)
            dkdp_next = gradients(q_next, p_half)[1]
            r_p = p_half - p + 0.5 * dt * (dkdq - force) + nu / (dt * state.stiffness[:, None]) * q
            r_q = q_next - q - 0.5 * dt * (dkdp + dkdp_next)
            r_c = jnp.concatenate([0.5 * (dot(q_next, q_next)[:, None] - 1.0), z[:, 2, 1:]], axis=1)
            return jnp.stack([r_p, r_q, r_c], axis=1).reshape(3 * n, 3)

        guess = jnp.stack([p, q + dt * dkdp_start, jnp.zeros_like(q)], axis=1).reshape(3 * n, 3)
        z, _, converged = newton_root(residual, guess, **self.newton.options)
        z = z.reshape(n, 3, 3)
        p_half, q_next = z[:, 0], z[:, 1]
        force_next = system.nonconservative_force(t0 + dt, q_next, omega, args)
        u = p_half - 0.5 * dt * (gradients(q_next, p_half)[0] - force_next)
        p_next = u - (dot(q_next, u) / dot(q_next, q_next))[:, None] * q_next
        omega_next = system.angular_velocity(q_next, p_next, args)
        result = RESULTS.where(converged, RESULTS.successful, RESULTS.newton_failed)
        result = check_finite(result, q_next, omega_next, p_next)
        return (q_next, omega_next), HamiltonianState(p_next, state.stiffness), result
