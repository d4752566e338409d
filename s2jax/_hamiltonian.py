"""Mechanical systems on (S²)ⁿ given by a Hamiltonian H(q, μ): 001 §IV by autodiff.

Hamilton's equations (23)–(24) of 001 in the tangent momentum μ_i = (I₃ − q_i q_iᵀ) ∂L/∂q̇_i (20),
and (31)–(32) in π_i = q_i × μ_i (28) with H̃(q, π) = H(q, π × q) (29). The user writes
H(q, p, params) with p = μ; only its values at |q_i| = 1, p_i ⊥ q_i matter. Derivation:
docs/api/systems.md.
"""

from collections.abc import Callable
from typing import ClassVar

import jax
import jax.numpy as jnp

from ._affine import abstract_key, affine_root
from ._custom_types import Array, Float, Lagrangian, Params
from ._force import AbstractForce
from ._general_system import pinned_tangent
from ._geometry import dot, project_tangent
from ._newton import NewtonSettings
from ._system import AbstractSystem, SystemArgs

Hamiltonian = Callable[[Float[Array, "n 3"], Float[Array, "n 3"], Params], Float[Array, ""]]


class HamiltonianSystem(AbstractSystem):
    """The system of a Hamiltonian H(q, μ) on T*(S²)ⁿ (001 (21)), with optional generalized forces.

    p = μ throughout: `momentum` and `angular_velocity` are the Legendre maps between ω and
    μ_i = (I₃ − q_i q_iᵀ) ∂L/∂q̇_i of 001 (20), the same p as `LagrangianSystem.momentum`. The
    momentum π of 001 (28) is q × μ (`hamilton_equations_pi`).

    **Arguments:**

    - `hamiltonian`: a pure function `H(q, p, params) -> scalar`, q and p of shape (n, 3), read
      at |q_i| = 1, p_i ⊥ q_i. It must be regular: the tangent part of ∂²H/∂p∂p nonsingular.
    - `force`: an `AbstractForce` (or None): the generalized forces f_i of 001 (10), (24).
    - `newton`: Newton's method for `momentum` where ∂H/∂p is not affine in p (`NewtonSettings`;
      where it is, as for every mechanical H, one linear solve replaces it).
    """

    hamiltonian: Hamiltonian
    force: AbstractForce | None = None
    newton: NewtonSettings = NewtonSettings(rtol=1e-13, atol=1e-13)

    has_constant_inertia: ClassVar[bool] = False

    def prepare(self, q, params):
        return SystemArgs(params)

    def hamiltonian_gradients(self, q, p, args) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"]]:
        """(∂H/∂q, ∂H/∂p) at (q, p), in ℝ³ per body."""
        return jax.grad(self.hamiltonian, argnums=(0, 1))(q, p, args.params)

    def nonconservative_force(self, t, q, omega, args) -> Float[Array, "n 3"]:
        """f(t, q, ω, u) of 001 (10), zero without a force."""
        if self.force is None:
            return jnp.zeros_like(q)
        return self.force(t, q, omega, args.control, args.params)

    def hamilton_equations(self, t, q, p, args) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"]]:
        """(q̇, μ̇) of 001 (23)–(24), p = μ ⊥ q, with the generalized force f(t, q, ω) at ω = q × q̇."""
        dhdq, dhdp = self.hamiltonian_gradients(q, p, args)
        force = self.nonconservative_force(t, q, jnp.cross(q, dhdp), args)
        qdot = project_tangent(q, dhdp)
        pdot = -project_tangent(q, dhdq - force) + jnp.cross(dhdp, jnp.cross(p, q))
        return qdot, pdot

    def modified_hamiltonian(self, q, pi, params) -> Float[Array, ""]:
        """H̃(q, π) = H(q, π × q), 001 (29): μ_i = π_i × q_i."""
        return self.hamiltonian(q, jnp.cross(pi, q), params)

    def hamilton_equations_pi(self, t, q, pi, args) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"]]:
        """(q̇, π̇) of 001 (31)–(32), π = q × μ, with f(t, q, ω) at ω = (I₃ − q qᵀ) ∂H̃/∂π."""
        dhdq, dhdpi = jax.grad(self.modified_hamiltonian, argnums=(0, 1))(q, pi, args.params)
        force = self.nonconservative_force(t, q, project_tangent(q, dhdpi), args)
        qdot = jnp.cross(dhdpi, q)
        pidot = -jnp.cross(q, dhdq) + jnp.cross(dhdpi, pi) + jnp.cross(q, force)
        return qdot, pidot

    def angular_velocity(self, q, p, args):
        """ω_i = q_i × q̇_i = q_i × ∂H/∂p_i, the inverse Legendre map (q̇ from 001 (23))."""
        return jnp.cross(q, self.hamiltonian_gradients(q, p, args)[1])

    def momentum(self, q, omega, args):
        """The Legendre map: μ ⊥ q with (I₃ − q qᵀ) ∂H/∂μ(q, μ) = ω × q (001 (23)).

        The normal component of each body's equation is replaced by μ_i·q_i = 0
        (`pinned_tangent`). One linear solve where ∂H/∂μ is affine in μ, as read from H's traced
        computation (`_affine.affine_root`: H quadratic in μ, every mechanical H); otherwise
        Newton from 0, with the derivatives of the exact root (`newton_root`).
        """
        qdot = self.velocity(q, omega)

        def residual(p):
            return pinned_tangent(q, p, self.hamiltonian_gradients(q, p, args)[1] - qdot)

        key = abstract_key(q, omega, args.params)
        return affine_root(self.hamiltonian, residual, jnp.zeros_like(q), key, **self.newton.options)

    def energy(self, q, omega, args):
        """H(q, μ(q, ω)), conserved without forces (001 after (24))."""
        return self.hamiltonian(q, self.momentum(q, omega, args), args.params)

    def inertia(self, q, args):
        """m_ij(q) = tr J_ij / (1 + (q_i·q_j)²), J_ij = ∂μ_i/∂q̇_j at q̇ = 0.

        For a kinetic energy ½ Σ m_ij(q) q̇_i·q̇_j (001 (12), (2.2) of 002) the Legendre map
        is μ_i = Σ_j m_ij (I − q_i q_iᵀ)(I − q_j q_jᵀ) q̇_j, whose blocks have trace
        m_ij (1 + (q_i·q_j)²), so this is m_ij(q) exactly; for other H, an isotropic summary.
        """

        def momentum_of_velocity(qdot):
            return self.momentum(q, jnp.cross(q, qdot), args)

        blocks = jax.jacfwd(momentum_of_velocity)(jnp.zeros_like(q))
        trace = jnp.einsum("iaja->ij", blocks)
        return trace / (1.0 + (q @ q.T) ** 2)

    def potential(self, q, args) -> Float[Array, ""]:
        """V(q) = H(q, 0)."""
        return self.hamiltonian(q, jnp.zeros_like(q), args.params)

    def potential_gradient(self, q, args):
        return jax.grad(self.potential)(q, args)

    def angular_acceleration(self, t, q, omega, args):
        """ω̇ by the chain rule through ω = q × ∂H/∂μ(q, μ): the (q̇, μ̇) of (23)–(24) pushed forward.

        μ = `momentum`(q, ω); then ω̇ = d/dt [q × ∂H/∂μ] along (q̇, μ̇) is one Jacobian–vector
        product. ω̇_i ⊥ q_i follows from ω_i ⊥ q_i and q̇_i ⊥ ω_i.
        """
        p = self.momentum(q, omega, args)
        rates = self.hamilton_equations(t, q, p, args)
        _, omega_dot = jax.jvp(lambda x, y: self.angular_velocity(x, y, args), (q, p), rates)
        return omega_dot


def legendre_transform(
    lagrangian: Lagrangian, *, newton: NewtonSettings = NewtonSettings(rtol=1e-13, atol=1e-13)
) -> Hamiltonian:
    """The Hamiltonian H(q, μ) = Σ_i μ_i·q̇_i − L(q, q̇) of 001 (21) of a regular Lagrangian.

    q̇ is the inverse of the Legendre map 001 (20): q̇_i ⊥ q_i with (I₃ − q_i q_iᵀ)
    ∂L/∂q̇_i(q, q̇) = μ_i. Where ∂L/∂q̇ is affine in q̇ (L quadratic in q̇ plus terms linear in
    it: every model of s2jax, rotating frames, magnetic fields), read from L's traced
    computation, that is one linear solve (`_affine.affine_root`); otherwise Newton from q̇ = 0,
    differentiated by the implicit function theorem (`newton_root`). Either way the H returned
    can be differentiated twice, as `HamiltonianSystem` needs. The linear solve cuts the first
    call of a `simulate` of the double pendulum's H from 13.0 to 4.7 s, and makes its compiled
    run 2.6× slower (LAPACK's calls on 6 × 6 systems: docs/performance.md). Meant for tests and
    for comparing the Lagrangian and Hamiltonian paths; a closed-form H is faster.

    **Arguments:**

    - `lagrangian`: `L(q, qdot, params) -> scalar`, q and q̇ of shape (n, 3).
    - `newton`: Newton's method for q̇ where ∂L/∂q̇ is not affine (`NewtonSettings`).

    **Returns:** `H(q, p, params) -> scalar`, p = μ of shape (n, 3).
    """

    def hamiltonian(q, p, params):
        def residual(qdot):
            return pinned_tangent(q, qdot, jax.grad(lagrangian, argnums=1)(q, qdot, params) - p)

        qdot = affine_root(lagrangian, residual, jnp.zeros_like(q), abstract_key(q, params), **newton.options)
        return jnp.sum(dot(p, qdot)) - lagrangian(q, qdot, params)

    return hamiltonian
