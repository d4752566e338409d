"""The check that a Lagrangian has the form (2.2) of Lee–Leok–McClamroch 2009 (002)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._custom_types import Array, Float, Lagrangian, Params
from ._system import LagrangianSystem, SystemArgs


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
    args = SystemArgs(params)
    angle = 0.7
    c, s = jnp.cos(angle), jnp.sin(angle)
    rotation = jnp.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]], dtype=q.dtype)
    rotation = rotation @ jnp.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]], dtype=q.dtype)
    configurations = jnp.stack([q, -q, q @ rotation.T])
    inertias = jax.vmap(lambda x: system.inertia(x, args))(configurations)
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
