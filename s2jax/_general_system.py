"""Any regular Lagrangian L(q, q̇) on (S²)ⁿ, its equations of motion derived by autodiff.

Per body q_i × (d/dt ∂L/∂q̇_i − ∂L/∂q_i − f_i) = 0, 001 (11) (in (q, ω): (17)/(19)), with
d/dt ∂L/∂q̇_i a Jacobian–vector product affine in ω̇ and the normal component of each equation
replaced by ω̇_i·q_i = 0, so the 3n × 3n system is nonsingular for a regular L and solved by block
elimination. `LagrangianSystem` covers the class (2.2) of 002, a constant M. Derivation:
docs/api/systems.md.
"""

import dataclasses
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from ._custom_types import Array, Bool, Float, Lagrangian, Params
from ._force import AbstractForce
from ._form_check import POSITIVE_DEFINITE_TOLERANCE, InertiaNotPositiveDefinite
from ._geometry import dot, project_tangent
from ._jit import evaluate_now
from ._newton import NewtonSettings, newton_root, solve_jacobian
from ._system import AbstractSystem, SystemArgs
from ._two_body import tangent_basis


def pinned_tangent(q: Float[Array, "n 3"], x: Float[Array, "n 3"], r: Float[Array, "n 3"]) -> Float[Array, "n 3"]:
    """r_i with its q_i-component replaced by x_i·q_i.

    An equation q_i × (…) = 0 on T_{q_i} S² has two components; the third, normal one is
    replaced by the condition x_i ⊥ q_i on the unknown, so the Jacobian in x ∈ ℝ³ is that of
    the 2-D tangent problem in a basis of T_{q_i} S², plus the identity along q_i.
    """
    return project_tangent(q, r) + dot(x, q)[:, None] * q


class GeneralLagrangianSystem(AbstractSystem):
    """The system of any regular Lagrangian L(q, q̇) on (S²)ⁿ, with optional generalized forces.

    Regular means that the 2n × 2n tangent part of ∂²L/∂q̇∂q̇ is nonsingular; s2jax asks more,
    that it be positive definite where the run starts (`check_tangent_inertia` before compiling,
    `RESULTS.inertia_not_positive_definite` in the graph), as a kinetic energy's is. It covers a
    configuration-dependent inertia m_ij(q) (001 (11)), general 3 × 3 inertia blocks and
    gyroscopic terms linear in q̇. V(q) = −L(q, 0) is the "potential" that `potential_gradient`
    returns; the velocity terms are never split off by hand.

    **Arguments:**

    - `lagrangian`: a pure function `L(q, qdot, params) -> scalar`, q and q̇ of shape (n, 3).
    - `force`: an `AbstractForce` (or None): the non-conservative generalized forces f_i of
      001 (10).
    - `newton`: Newton's method for the inverse Legendre map (`NewtonSettings`; exact after
      one iteration when ∂L/∂q̇ is affine in q̇, as in every mechanical L).
    """

    lagrangian: Lagrangian
    force: AbstractForce | None = None
    newton: NewtonSettings = NewtonSettings(rtol=1e-13, atol=1e-13)

    has_constant_inertia: ClassVar[bool] = False

    def prepare(self, q, params):
        return SystemArgs(params)

    def ambient_momentum(self, q, omega, args):
        """∂L/∂q̇_i at q̇ = ω × q, in ℝ³."""
        return jax.grad(self.lagrangian, argnums=1)(q, self.velocity(q, omega), args.params)

    def inertia_blocks(self, q, qdot, args) -> Float[Array, "n n 3 3"]:
        """H_ij = ∂²L/∂q̇_i∂q̇_j at (q, q̇), as n × n blocks of 3 × 3."""
        hessian = jax.hessian(self.lagrangian, argnums=1)(q, qdot, args.params)
        return jnp.swapaxes(hessian, 1, 2)

    def inertia(self, q, args):
        """m_ij(q) = tr H_ij / 3 at q̇ = 0: the m_ij(q) of 001 (11) when H_ij = m_ij(q) I₃.

        For general blocks this is only their isotropic part; `inertia_blocks` gives them all.
        """
        blocks = self.inertia_blocks(q, jnp.zeros_like(q), args)
        return jnp.trace(blocks, axis1=-2, axis2=-1) / 3.0

    def potential(self, q, args):
        """V(q) = −L(q, 0)."""
        return -self.lagrangian(q, jnp.zeros_like(q), args.params)

    def potential_gradient(self, q, args):
        return jax.grad(self.potential)(q, args)

    def nonconservative_force(self, t, q, omega, args) -> Float[Array, "n 3"]:
        """f(t, q, ω, u) of 001 (10), zero without a force."""
        if self.force is None:
            return jnp.zeros_like(q)
        return self.force(t, q, omega, args.control, args.params)

    def momentum(self, q, omega, args):
        return project_tangent(q, self.ambient_momentum(q, omega, args))

    def angular_velocity(self, q, p, args):
        """The inverse Legendre map: ω ⊥ q with q_i × ∂L/∂q̇_i(q, ω × q) = q_i × p_i, by Newton from ω = 0."""
        target = jnp.cross(q, p)

        def residual(omega):
            return pinned_tangent(q, omega, jnp.cross(q, self.ambient_momentum(q, omega, args)) - target)

        omega, _, _ = newton_root(
            residual, jnp.zeros_like(q), **self.newton.options
        )
        return omega

    def energy(self, q, omega, args):
        """The Jacobi integral E = Σ_i q̇_i·∂L/∂q̇_i − L, conserved without forces when L does not depend on t."""
        qdot = self.velocity(q, omega)
        value, momentum = jax.value_and_grad(self.lagrangian, argnums=1)(q, qdot, args.params)
        return jnp.sum(qdot * momentum) - value

    def angular_acceleration(self, t, q, omega, args):
        """ω̇ from q_i × (d/dt ∂L/∂q̇_i − ∂L/∂q_i − F_i) = 0 (001 (11), (17)/(19)), ω̇_i ⊥ q_i.

        F = f, the non-conservative force only: the potential is part of L, so ∂L/∂q carries it.
        The residual is affine in ω̇; its Jacobian (the blocks −q̂_i H_ij q̂_j plus q_i q_iᵀ on
        the diagonal) is formed by `jax.jacfwd` and solved by block elimination.
        """
        qdot = self.velocity(q, omega)
        dldq = jax.grad(self.lagrangian, argnums=0)(q, qdot, args.params)
        force = self.nonconservative_force(t, q, omega, args)

        def residual(omega_dot):
            _, rate = jax.jvp(lambda x, w: self.ambient_momentum(x, w, args), (q, omega), (qdot, omega_dot))
            return pinned_tangent(q, omega_dot, jnp.cross(q, rate - dldq - force))

        zero = jnp.zeros_like(q)
        return solve_jacobian(jax.jacfwd(residual)(zero), -residual(zero))


def tangent_inertia(system: GeneralLagrangianSystem, q, omega, args: SystemArgs) -> Float[Array, "2n 2n"]:
    """∂²L/∂q̇∂q̇ at (q, ω × q) on T_{q_1}S² × … × T_{q_n}S², in the orthonormal bases of
    `_two_body.tangent_basis`: the mass matrix in minimal coordinates, 2n × 2n."""
    blocks = system.inertia_blocks(q, system.velocity(q, omega), args)
    basis = tangent_basis(q)
    matrix = jnp.einsum("iax,ijxy,jby->iajb", basis, blocks, basis)
    return matrix.reshape(2 * q.shape[0], 2 * q.shape[0])


def _spectrum(system: GeneralLagrangianSystem, q, omega, params: Params):
    """(smallest eigenvalue, largest |entry|) of `tangent_inertia`; NaN if it is not finite."""
    matrix = tangent_inertia(system, q, omega, system.prepare(q, params))
    matrix = 0.5 * (matrix + matrix.T)
    finite = jnp.all(jnp.isfinite(matrix))
    smallest = jnp.linalg.eigvalsh(jnp.where(finite, matrix, 0.0))[0]
    return jnp.where(finite, smallest, jnp.nan), jnp.max(jnp.abs(matrix))


def tangent_inertia_is_positive_definite(system: GeneralLagrangianSystem, q, omega, params: Params) -> Bool[Array, ""]:
    """Whether the smallest eigenvalue of `tangent_inertia` exceeds 1e-12 × its largest entry
    (False for NaN): the rule of `check_tangent_inertia` inside a computation."""
    smallest, scale = _spectrum(system, q, omega, params)
    return smallest > POSITIVE_DEFINITE_TOLERANCE * scale


_concrete_spectrum = eqx.filter_jit(_spectrum)


def check_tangent_inertia(system: GeneralLagrangianSystem, q, omega, params: Params) -> bool:
    """Raise `InertiaNotPositiveDefinite` (a `ValueError` naming the smallest eigenvalue) unless
    ∂²L/∂q̇∂q̇ is positive definite on the tangent spaces at (q, ω), with concrete values.

    **Returns:** whether it could tell: False where the Lagrangian itself holds traced arrays
    (an `equinox.Module` inside a transformation), to be checked in the graph instead.
    """
    system = dataclasses.replace(system, force=None)  # the inertia is the Lagrangian's alone
    spectrum = evaluate_now(_concrete_spectrum, system, q, omega, params)  # even inside a user's jit
    if any(isinstance(x, jax.core.Tracer) for x in spectrum):
        return False
    smallest, scale = (float(x) for x in spectrum)
    if not smallest > POSITIVE_DEFINITE_TOLERANCE * scale:
        raise InertiaNotPositiveDefinite(
            "∂²L/∂q̇∂q̇ of the Lagrangian, on the tangent spaces of (S²)ⁿ at the initial state, is not positive "
            f"definite: its smallest eigenvalue is {smallest:.3e}, not above {POSITIVE_DEFINITE_TOLERANCE:g} × "
            f"its largest entry {scale:.3e}. A GeneralLagrangianSystem needs a positive definite kinetic energy "
            "(the m_ij(q) of 001 (11)); check the params: a zero or negative mass, or a zero length, gives such "
            "an inertia."
        )
    return True
