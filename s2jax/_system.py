"""What s2jax derives from a Lagrangian by automatic differentiation.

A model is a pure function `lagrangian(q, qdot, params) -> scalar` with q, q̇ of shape (n, 3).
For the class (2.2) of Lee–Leok–McClamroch 2009 (002),

    L(q, q̇) = ½ Σ_ij M_ij q̇_i·q̇_j − V(q),

`LagrangianSystem` recovers V = −L(q, 0), ∂V/∂q = −∂L/∂q(q, 0) and the inertia matrix
M_ij from the Hessian ∂²L/∂q̇_i∂q̇_j = M_ij I₃, and from them the energy, the Legendre map
(2.12) and the equations of motion (2.9)–(2.11).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._block_elimination import block_solve
from ._custom_types import Array, Float, Lagrangian, Params
from ._geometry import dot, project_tangent


class LagrangianSystem(eqx.Module):
    """The mechanical system of a Lagrangian on (S²)ⁿ; all methods act on one state (n, 3)."""

    lagrangian: Lagrangian

    def velocity(self, q: Float[Array, "n 3"], omega: Float[Array, "n 3"]) -> Float[Array, "n 3"]:
        """q̇_i = ω_i × q_i, 002 (2.1) / (2.10)."""
        return jnp.cross(omega, q)

    def potential(self, q: Float[Array, "n 3"], params: Params) -> Float[Array, ""]:
        """V(q) = −L(q, 0)."""
        return -self.lagrangian(q, jnp.zeros_like(q), params)

    def potential_gradient(self, q: Float[Array, "n 3"], params: Params) -> Float[Array, "n 3"]:
        """∂V/∂q_i in ℝ³ (the ambient gradient; only its tangential part acts)."""
        return jax.grad(self.potential)(q, params)

    def inertia(self, q: Float[Array, "n 3"], params: Params) -> Float[Array, "n n"]:
        """The inertia matrix M of (2.2): M_ij = ∂²L/∂q̇_i^x ∂q̇_j^x at q̇ = 0.

        Only the x-components are differentiated (n forward-mode tangents, not 3n), which is
        all of the Hessian when it has the form M ⊗ I₃; `check_lagrangian_form` verifies that
        form, and that M is constant and positive definite, before a simulation compiles.
        """
        unit_x = jnp.zeros(3, q.dtype).at[0].set(1.0)

        def momentum_x(speeds):
            qdot = speeds[:, None] * unit_x
            return jax.grad(self.lagrangian, argnums=1)(q, qdot, params)[:, 0]

        return jax.jacfwd(momentum_x)(jnp.zeros(q.shape[0], q.dtype))

    def momentum(self, q: Float[Array, "n 3"], omega: Float[Array, "n 3"], params: Params):
        """∂L/∂q̇_i at q̇ = ω × q, in ℝ³."""
        return jax.grad(self.lagrangian, argnums=1)(q, self.velocity(q, omega), params)

    def conjugate_momentum(self, q: Float[Array, "n 3"], omega: Float[Array, "n 3"], params: Params):
        """The Legendre map (2.12): p_i, the projection of ∂L/∂q̇_i onto T_{q_i} S²."""
        return project_tangent(q, self.momentum(q, omega, params))

    def energy(self, q: Float[Array, "n 3"], omega: Float[Array, "n 3"], params: Params):
        """E = Σ_i q̇_i·∂L/∂q̇_i − L, the total energy (T + V for (2.2))."""
        qdot = self.velocity(q, omega)
        value, momentum = jax.value_and_grad(self.lagrangian, argnums=1)(q, qdot, params)
        return jnp.sum(qdot * momentum) - value

    def angular_velocity_operator(
        self, q: Float[Array, "n 3"], inertia: Float[Array, "n n"]
    ) -> Float[Array, "n n 3 3"]:
        """The 3n × 3n matrix on the left of (2.11) and (3.13), as n × n blocks of 3 × 3.

        Diagonal blocks M_ii I₃; off-diagonal blocks −M_ij q̂_i q̂_j = −M_ij (q_j q_iᵀ − (q_i·q_j) I₃).
        """
        n = q.shape[0]
        eye3 = jnp.eye(3, dtype=q.dtype)[None, None]
        gram = (q @ q.T)[:, :, None, None]
        outer = jnp.einsum("ja,ib->ijab", q, q)  # q_j q_iᵀ
        off = -inertia[:, :, None, None] * (outer - gram * eye3)
        diag = jnp.diag(inertia)[:, None, None, None] * eye3
        is_diag = jnp.eye(n, dtype=bool)[:, :, None, None]
        return jnp.where(is_diag, diag, off)

    def angular_acceleration(
        self,
        q: Float[Array, "n 3"],
        omega: Float[Array, "n 3"],
        params: Params,
        inertia: Float[Array, "n n"],
    ) -> Float[Array, "n 3"]:
        """ω̇ from (2.11), solved by block elimination.

        The right-hand side of (2.11) is Σ_{j≠i} M_ij |ω_j|² q_i × q_j − q_i × ∂V/∂q_i; the
        j = i term of the sum is q_i × q_i = 0, so it is written as q_i × (M (|ω|² q) − ∂V/∂q)_i.
        """
        speed2 = dot(omega, omega)[:, None]
        rhs = jnp.cross(q, inertia @ (speed2 * q) - self.potential_gradient(q, params))
        return block_solve(self.angular_velocity_operator(q, inertia), rhs)

    def vector_field(self, q, omega, params, inertia):
        """(q̇, ω̇) of (2.9)–(2.10), the continuous equations of motion in (q, ω) form."""
        return self.velocity(q, omega), self.angular_acceleration(q, omega, params, inertia)


def check_lagrangian_form(
    lagrangian: Lagrangian, q: Float[Array, "n 3"], omega: Float[Array, "n 3"], params: Params
) -> np.ndarray:
    """Check, with concrete values, that L has the form (2.2) of 002; return M as numpy.

    (2.2) needs ∂²L/∂q̇∂q̇ = M ⊗ I₃ with M symmetric positive definite and independent of q,
    and L − L(q, 0) quadratic in q̇. The Hessian is probed with three random vectors (three
    Hessian–vector products, so the check costs O(1) Lagrangian gradients for any n), M is
    compared at q, at −q and at a fixed rotation of q, and quadraticity is checked at
    q̇ = ω × q and at a second tangent velocity. Raises `ValueError` naming the first
    offending body.
    """
    inertias, probes, products, residuals = (np.asarray(x) for x in _form_quantities(lagrangian, q, omega, params))
    inertia = inertias[0]
    scale = max(np.max(np.abs(inertia)), np.finfo(inertia.dtype).tiny)
    tol = 1e-9 * scale
    for probe, product in zip(probes, products):
        mismatch = np.max(np.abs(product - inertia @ probe), axis=-1)
        if np.any(mismatch > tol * np.max(np.abs(probe))):
            i = int(np.argmax(mismatch))
            raise ValueError(
                "The Lagrangian is not of the form (2.2) of Lee–Leok–McClamroch 2009: "
                f"∂²L/∂q̇∂q̇ is not M ⊗ I₃ (the velocities of body {i} enter the kinetic energy "
                "with different weights along different axes, or couple to other bodies' "
                "velocities other than through M_ij q̇_i·q̇_j)."
            )
    for other in inertias[1:]:
        if np.max(np.abs(other - inertia)) > tol:
            i = int(np.argmax(np.max(np.abs(other - inertia), axis=-1)))
            raise ValueError(
                "The Lagrangian is not of the form (2.2) of Lee–Leok–McClamroch 2009: the inertia "
                f"∂²L/∂q̇∂q̇ of body {i} depends on the configuration q. The variational "
                "integrators of s2jax need a constant inertia matrix M."
            )
    if np.max(np.abs(inertia - inertia.T)) > tol:
        raise ValueError(f"The inertia matrix M read off the Lagrangian is not symmetric:\n{inertia}")
    eigenvalues = np.linalg.eigvalsh(inertia)
    if not eigenvalues[0] > 1e-12 * scale:
        raise ValueError(
            "The inertia matrix M read off the Lagrangian is not positive definite "
            f"(smallest eigenvalue {eigenvalues[0]:.3e}); (2.2) of Lee–Leok–McClamroch 2009 "
            "needs M > 0."
        )
    speed = 1.0 + np.max(np.abs(np.asarray(omega)))
    if np.max(np.abs(residuals)) > 1e-9 * max(scale, 1.0) * speed**2:
        raise ValueError(
            "The Lagrangian is not of the form (2.2) of Lee–Leok–McClamroch 2009: "
            "L(q, q̇) − L(q, 0) is not a quadratic form ½ Σ M_ij q̇_i·q̇_j in the velocities."
        )
    return inertia


@eqx.filter_jit
def _form_quantities(lagrangian, q, omega, params):
    system = LagrangianSystem(lagrangian)
    angle = 0.7
    c, s = jnp.cos(angle), jnp.sin(angle)
    rotation = jnp.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]], dtype=q.dtype)
    rotation = rotation @ jnp.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]], dtype=q.dtype)
    configurations = jnp.stack([q, -q, q @ rotation.T])
    inertias = jax.vmap(lambda x: system.inertia(x, params))(configurations)
    probes = jax.random.normal(jax.random.PRNGKey(0), (3, *q.shape), q.dtype)

    def hessian_product(v):
        momentum = lambda qdot: jax.grad(lagrangian, argnums=1)(q, qdot, params)  # noqa: E731
        return jax.jvp(momentum, (jnp.zeros_like(q),), (v,))[1]

    def quadratic_residual(qdot):
        kinetic = lagrangian(q, qdot, params) - lagrangian(q, jnp.zeros_like(q), params)
        return kinetic - 0.5 * jnp.einsum("ij,ia,ja->", inertias[0], qdot, qdot)

    other = jnp.cross(q @ rotation.T, q)
    velocities = jnp.stack([system.velocity(q, omega), other])
    return inertias, probes, jax.vmap(hessian_product)(probes), jax.vmap(quadratic_residual)(velocities)
