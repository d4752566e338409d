"""A chart of T(S²)ⁿ: two coordinates for δq and two for δω per body, mapped exactly onto T(S²)ⁿ.

Around base points (q̄, ω̄), with (e₁, e₂) an orthonormal basis of T_q̄ S² per body, coordinates
a, b ∈ ℝ² give δq = a₁e₁ + a₂e₂, δω = b₁e₁ + b₂e₂, F = cay(½ q̄ × δq) (002 (3.15)) and

    (q, ω) = (F q̄, F(ω̄ + δω)).

Parameter fitting (`s2jax.fit`) and trajectory optimisation use it for the unknown states of
multiple shooting; why this chart: docs/api/fit.md.
"""

import jax.numpy as jnp

from .._custom_types import Array, ArrayLike, Float
from .._geometry import cayley_rotate


def tangent_basis(q: Float[ArrayLike, "... 3"]) -> Float[Array, "... 2 3"]:
    """An orthonormal basis (e₁, e₂) of T_q S² for each row of q, shape (..., 2, 3).

    e₁ is built from the coordinate axis least aligned with q, so it is never degenerate: it is
    constant where that axis is, and the derivative through `argmin` is zero. In JAX, so that a
    program using it (iLQR, multiple shooting) holds no host callback: it can be differentiated,
    batched and stored in the persistent compilation cache.
    (`_two_body.tangent_basis` is another such basis, used inside the VI step; these charts keep
    this one, so that their coordinates do not change.)
    """
    q = jnp.asarray(q)
    axis = jnp.eye(3, dtype=q.dtype)[jnp.argmin(jnp.abs(q), axis=-1)]
    e1 = jnp.cross(axis, q)
    e1 = e1 / jnp.linalg.norm(e1, axis=-1, keepdims=True)
    return jnp.stack([e1, jnp.cross(q, e1)], axis=-2)


def chart_to_state(
    base_q: Float[Array, "*batch n 3"],
    base_omega: Float[Array, "*batch n 3"],
    basis: Float[Array, "*batch n 2 3"],
    a: Float[Array, "*batch n 2"],
    b: Float[Array, "*batch n 2"],
) -> tuple[Float[Array, "*batch n 3"], Float[Array, "*batch n 3"]]:
    """The point (F q̄, F(ω̄ + δω)) of T(S²)ⁿ with coordinates (a, b) around (q̄, ω̄)."""
    f = 0.5 * jnp.cross(base_q, jnp.einsum("...k,...kc->...c", a, basis))
    q = cayley_rotate(f, base_q)
    omega = cayley_rotate(f, base_omega + jnp.einsum("...k,...kc->...c", b, basis))
    return q, omega


def state_to_chart(
    base_q: Float[Array, "*batch n 3"],
    base_omega: Float[Array, "*batch n 3"],
    basis: Float[Array, "*batch n 2 3"],
    q: Float[Array, "*batch n 3"],
    omega: Float[Array, "*batch n 3"],
) -> tuple[Float[Array, "*batch n 2"], Float[Array, "*batch n 2"]]:
    """The coordinates (a, b) of (q, ω) around (q̄, ω̄): the inverse of `chart_to_state`.

    The rotation F = cay(f) with f ⊥ q̄ that takes q̄ to q turns about q̄ × q by the angle θ
    between them, so f = tan(θ/2) (q̄ × q)/|q̄ × q| = q̄ × q / (1 + q̄·q); then δq = 2 f × q̄
    (from f = ½ q̄ × δq) and δω = Fᵀω − ω̄. Defined for every q but −q̄.
    """
    f = jnp.cross(base_q, q) / (1.0 + jnp.sum(base_q * q, axis=-1, keepdims=True))
    delta_q = 2.0 * jnp.cross(f, base_q)
    delta_omega = cayley_rotate(-f, omega) - base_omega
    a = jnp.einsum("...kc,...c->...k", basis, delta_q)
    b = jnp.einsum("...kc,...c->...k", basis, delta_omega)
    return a, b
