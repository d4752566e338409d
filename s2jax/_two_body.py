"""The Cayley equation (3.16) of 002 for two bodies, any M, by Newton's method in tangent-plane
coordinates: four unknowns and no products in ℝ³ inside the iterations.

The step's unknowns are the tangential displacements t_i ∈ T_{q_i}S² of D_i = q_{i,k+1} − q_i
(`variational._displacement_newton`): (3.16) is P_{q_i}(M D)_i = g_i, g_i = −q_i × d_i, with
D_i = t_i − δ_i q_i and δ_i = 1 − √(1 − |t_i|²) (the rotation of (3.17)). Written in the coordinates
x_i ∈ ℝ² of t_i in an orthonormal basis of T_{q_i}S² (`tangent_basis`), each Newton iteration is
scalar work, the Jacobian solved by a 2 × 2 Schur complement in closed form. The equations, the
Jacobian and why Newton converges: docs/integrators/variational.md ("Two bodies").
"""

import jax.numpy as jnp

from ._custom_types import Array, Bool, Float
from ._geometry import dot
from ._newton import newton_root


def tangent_basis(q: Float[Array, "... 3"]) -> Float[Array, "... 2 3"]:
    """An orthonormal basis e_1, e_2 of T_qS² (q a unit vector), with e_1 × e_2 = q, continuous in
    q except across the plane q_z = 0.

    The branch-free construction of Duff et al., "Building an orthonormal basis, revisited"
    (JCGT 6(1), 2017): with σ = sign(q_z) (+1 at 0), a = −1/(σ + q_z) and b = q_x q_y a,
    e_1 = (1 + σ q_x² a, σ b, −σ q_x) and e_2 = (b, σ + q_y² a, −q_y). Its one division never
    comes near 0 (|σ + q_z| ≥ 1).

    `_chart.tangent_basis` builds another such basis, in numpy (from the coordinate axis least
    aligned with q), for the charts of `fit` and `s2jax.control`; those reach it through a host
    callback when q is traced. This one is JAX and runs inside the step.
    """
    x, y, z = q[..., 0], q[..., 1], q[..., 2]
    sign = jnp.where(z >= 0, 1.0, -1.0)
    a = -1.0 / (sign + z)
    b = x * y * a
    e1 = jnp.stack([1.0 + sign * x * x * a, sign * b, -sign * x], axis=-1)
    e2 = jnp.stack([b, sign + y * y * a, -y], axis=-1)
    return jnp.stack([e1, e2], axis=-2)


def _times(matrix, vector):
    """A 2 × 2 matrix times a 2-vector, written out: XLA's CPU backend runs a `dot` this small as
    a kernel of its own instead of fusing it with its neighbours."""
    return matrix[:, 0] * vector[0] + matrix[:, 1] * vector[1]


def _squared_norms(x):
    return x[:, 0] * x[:, 0] + x[:, 1] * x[:, 1]


def two_body_newton(
    q: Float[Array, "2 3"],
    g: Float[Array, "2 3"],
    t0: Float[Array, "2 3"],
    inertia: Float[Array, "2 2"],
    *,
    rtol: float,
    atol: float,
    max_steps: int,
    unrolled: int,
) -> tuple[Float[Array, "2 3"], Float[Array, "2 1"], Bool[Array, ""]]:
    """Solve P_{q_i}(M D)_i = g_i for the tangential displacements t (module docstring).

    **Arguments:** `q`, the bodies' directions q_k; `g`, the tangential targets (⊥ q_i); `t0`,
    the guess (its tangential parts are used); `inertia`, M; the Newton options of `newton_root`
    (the iterations stop on the coordinates of t, in its units). Derivatives are those of the
    exact root, by the implicit function theorem with the closed-form Jacobian.

    **Returns:** `(t, squared, converged)`: t (t_i ⊥ q_i, projected), |t_i|² (shape (2, 1); the
    rotation exists for |t_i| < 1), and whether Newton converged.
    """
    basis = tangent_basis(q)  # [i, α, :]
    # C[α, β] = e_{1α}·e_{2β}; c = (e_{1α}·q_2), c' = (e_{2β}·q_1); G and the guess in coordinates.
    cross_basis = dot(basis[0][:, None], basis[1][None])
    c12 = dot(basis[0], q[1][None])
    c21 = dot(basis[1], q[0][None])
    target = dot(basis, g[:, None])
    x0 = dot(basis, t0[:, None])
    m11, m12, m22 = inertia[0, 0], inertia[0, 1], inertia[1, 1]
    inverse_m11 = 1.0 / m11
    ratio = m12 * inverse_m11
    k = m12 * ratio

    def lift(x):
        # δ_i = ρ_i/(1 + √(1 − ρ_i)) (`variational._rotate_by_tangent`), and √(1 − ρ_i).
        squared = _squared_norms(x)
        root = jnp.sqrt(jnp.maximum(1.0 - squared, 0.0))
        return squared / (1.0 + root), root

    def residual(x):
        delta, _ = lift(x)
        r1 = m11 * x[0] + m12 * (_times(cross_basis, x[1]) - delta[1] * c12) - target[0]
        r2 = m22 * x[1] + m12 * (_times(cross_basis.T, x[0]) - delta[0] * c21) - target[1]
        return jnp.stack([r1, r2])

    def newton_step(x, r):
        # J⁻¹ r by the Schur complement on body 1 (docs/integrators/variational.md), 2 × 2 blocks written out.
        _, root = lift(x)
        b12 = cross_basis - c12[:, None] * (x[1] / root[1])[None]
        b21 = cross_basis.T - c21[:, None] * (x[0] / root[0])[None]
        # S = M₂₂ I − k B' B, column by column.
        s0 = -k * _times(b21, b12[:, 0])
        s1 = -k * _times(b21, b12[:, 1])
        s00, s10, s01, s11 = m22 + s0[0], s0[1], s1[0], m22 + s1[1]
        rhs = r[1] - ratio * _times(b21, r[0])
        inverse_det = 1.0 / (s00 * s11 - s01 * s10)
        y2 = jnp.stack([s11 * rhs[0] - s01 * rhs[1], s00 * rhs[1] - s10 * rhs[0]]) * inverse_det
        y1 = (r[0] - m12 * _times(b12, y2)) * inverse_m11
        return jnp.stack([y1, y2])

    x, _, converged = newton_root(
        residual, x0, rtol=rtol, atol=atol, max_steps=max_steps, unrolled=unrolled, jacobian_solve=newton_step
    )
    t = x[:, 0, None] * basis[:, 0] + x[:, 1, None] * basis[:, 1]
    # The basis is orthogonal to q only to round-off, by an error that is a function of q alone:
    # left in, the normal part of t enters |q_{k+1}| by an error that need not average out over
    # steps. Projected, t is as tangent as `_displacement_newton`'s (002 Example 1: mean
    # unit-length error 1.2e-15 over 10⁴ steps, 3.5e-15 without the projection; both stay near
    # 1e-14 over 10⁶ steps; the projection's cost, measured: see docs/performance.md).
    t = t - dot(q, t)[:, None] * q
    return t, dot(t, t)[:, None], converged
