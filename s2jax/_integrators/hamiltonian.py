"""RATTLE for a general Hamiltonian on T*(S²)ⁿ, embedded in ℝ³ⁿ × ℝ³ⁿ.

**Why RATTLE.** For a constrained Hamiltonian system q̇ = ∂K/∂p, ṗ = −∂K/∂q − G(q)ᵀλ,
g(q) = 0, the RATTLE method of Hairer–Lubich–Wanner (HLW) VII (1.26) for a general,
non-separable K is symplectic on the constraint manifold, symmetric, of order 2 (HLW
Theorems VII.1.3–1.5), and needs nothing of K but its gradients. The variational integrators
of s2jax are written for a Lagrangian; this one integrates the user's H directly.

**The embedding.** g_i(q) = |q_i|² − 1. RATTLE's hidden constraint is q_i·∂K/∂p_i = 0, which
for the user's H need not single out the tangent momentum μ of 001 (20) (an H read only at
p_i ⊥ q_i may be flat along q_i, making the constraint empty). The integrator therefore runs
on the augmented Hamiltonian

    K(q, p) = H(q, p − (q·p) q/|q|²) + ½ Σ_i (q_i·p_i)²/m_i,

equal to H on T*(S²)ⁿ = {|q_i| = 1, q_i·p_i = 0}, whose hidden constraint is exactly
q_i·p_i = 0 and whose ∂K/∂p restricted there is (I − q qᵀ) ∂H/∂μ, so the flow of K on that
manifold is 001 (23)–(24) for H. m_i = m_ii(q₀) (`HamiltonianSystem.inertia` at the initial
state, held fixed so that K, and the method's symmetry, is the same at every step) gives the
normal direction the mass of the tangent ones: for one body with H = |μ|²/(2m) + V, K is
|p|²/(2m) + V and the step is the RATTLE of `Rattle`. The weight changes nothing on the exact
flow but enters the error constant: with weight 1 instead of 1/m_i, the 3-link chain of
001 §V (m_ii ≈ 100–300) had a 500× larger error at h = 0.01 (1.1e-2 against 2.1e-5; the
VI of (3.10)–(3.13): 8.9e-5). With the forces f_n = f(t_n, q_n, ω_n) (weight h/2 at both
ends, as in the other s2jax integrators), one step is

    p_{n+1/2} = p_n − h/2 (∂K/∂q(q_n, p_{n+1/2}) − f_n) − (m_i ν_i/h) q_{n,i},
    q_{n+1}   = q_n + h/2 (∂K/∂p(q_n, p_{n+1/2}) + ∂K/∂p(q_{n+1}, p_{n+1/2})),   |q_{n+1,i}|² = 1,
    p_{n+1}   = (I − q_{n+1} q_{n+1}ᵀ/|q_{n+1}|²)(p_{n+1/2} − h/2 (∂K/∂q(q_{n+1}, p_{n+1/2}) − f_{n+1})),

ν_i = h² λ_i / (2 m_i) the scaled multiplier of the position constraint. The first two lines are solved
together by `newton_root` (derivatives by the implicit function theorem) for 3 rows per body,
(p_{n+1/2,i}, q_{n+1,i}, (ν_i, 0, 0)), whose equations are the two lines and
(½(|q_{n+1,i}|² − 1), 0, 0) (the zeros pad to 3 × 3 blocks); after eliminating the body's
first two rows the ν-block is ≈ −1, so the block elimination needs no pivoting. The last
line is RATTLE's second multiplier in closed form: the hidden constraint q·p = 0 is a
projection.

**What holds.** |q_i| = 1 to the Newton tolerance (rtol = atol = 1e-12 by default: in
practice round-off, since Newton converges quadratically and the last update is tiny), not
by construction; q_i·μ_i = 0 to round-off every step. The energy error is O(h²) and bounded
over long runs (symplectic); momentum maps of symmetries of H that are linear (rotations
acting on q and p alike) are conserved by RATTLE up to the Newton tolerance.
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

    See the module docstring for the scheme. It carries μ in its state and ignores the
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
        # the method's symmetry, does not change from step to step (module docstring).
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
