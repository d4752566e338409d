"""O(n) solves of the operator A of (2.11)/(3.13) for chains, M_ij = c_{max(i,j)} l_i l_j.

A ω = b is solved as articulated-body algorithms do (the articulated inertia beyond a joint is rank
one, J_i inverted by Sherman–Morrison): a backward sweep from the tip, a forward sweep for the
u_i = l_i q̇_i, then ω_i = q_i × u_i / l_i plus the normal part (q_i·b_i) q_i / M_ii. O(n) work,
against O(n³) for a dense solve. Derivation: docs/api/systems.md; timings: docs/performance.md.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._custom_types import Array, Float
from ._geometry import dot

# From this many links the O(n) recursion (two `lax.scan`s) beats the unrolled 3 × 3 block
# elimination (measured: see docs/performance.md, "Chain solves"); the double pendulum keeps the
# elimination.
MIN_CHAIN_BODIES = 3
# Up to this many bodies `inertia_times` writes M x out elementwise, and up to `_UNROLLED_LINKS`
# links the sweeps of `_articulated_sweeps` are unrolled: the fastest choices for both the VI and
# `RungeKutta4` on the chain pendulum (loops compiled whole, see `_jit`; measured against M x by
# prefix sums and the sweeps as `lax.scan`s: see docs/performance.md, "Chain solves").
_ELEMENTWISE_BODIES = 8
_UNROLLED_LINKS = 4


def matrix_diagonal(matrix: Float[Array, "n n"]) -> Float[Array, " n"]:
    """`jnp.diag(matrix)` without a gather: `jnp.diag` extracts by a gather, whose transpose in
    reverse mode is a scatter, and XLA's CPU compiler does not compile a loop with a scatter
    in it as one function (see `_jit`); a masked sum is exact and has neither."""
    return jnp.sum(matrix * jnp.eye(matrix.shape[-1], dtype=matrix.dtype), axis=-1)


def chain_factors(inertia) -> tuple[np.ndarray, np.ndarray] | None:
    """(l, c) with M_ij = c_{max(i,j)} l_i l_j and masses m_i = c_i − c_{i+1} > 0, or None.

    For a concrete M (numpy): the chain is recognised to 1e-12 relative, scaled so c_{n−1} = 1.

    **Arguments:** `inertia`: M, a concrete (n, n) array.

    **Returns:** `(lengths, carried_masses)` as numpy arrays, or None if M is not a chain's.
    """
    inertia = np.asarray(inertia, dtype=float)
    n = inertia.shape[0]
    if n < 2 or inertia[-1, -1] <= 0:
        return None
    lengths = inertia[:, -1] / np.sqrt(inertia[-1, -1])
    if np.any(np.abs(lengths) <= 1e-8 * np.max(np.abs(lengths))):
        return None
    if not is_chain(inertia):
        return None
    return chain_parameters(inertia)


def chain_parameters(inertia: Float[Array, "n n"]) -> tuple[Float[Array, " n"], Float[Array, " n"]]:
    """(l, c) of `chain_factors`, computed from a (possibly traced) M already known to be a chain's;
    numpy arrays for a numpy M."""
    if isinstance(inertia, np.ndarray):
        lengths = inertia[:, -1] / np.sqrt(inertia[-1, -1])
        return lengths, np.diag(inertia) / lengths**2
    lengths = inertia[:, -1] / jnp.sqrt(inertia[-1, -1])
    return lengths, matrix_diagonal(inertia) / lengths**2


def is_diagonal(inertia: Float[Array, "n n"]) -> jax.Array | np.bool_:
    """Whether M has M_ij = 0 for i ≠ j, exactly: the default integrator,
    `LagrangianSystem.with_structure` and `simulate`'s check in the graph decide with it. A
    numpy M is decided in numpy (inside a user's `jax.jit`, jnp would trace even a constant)."""
    xp = np if isinstance(inertia, np.ndarray) else jnp
    return xp.all(inertia == xp.diag(xp.diag(inertia)))


def is_chain(inertia: Float[Array, "n n"]) -> jax.Array | np.bool_:
    """Whether a (possibly traced) M is a chain's, M_ij = c_{max(i,j)} l_i l_j with (l, c) of
    `chain_parameters` and masses c_i − c_{i+1} > 0, to 1e-12 relative. `chain_factors` decides
    with it for a concrete M; `simulate` checks it in the graph where a chain was declared or
    recognised before the params' values were known. A numpy M is decided in numpy, as in
    `is_diagonal` (eager jnp dispatches an operation at a time; its cost, measured: see
    docs/performance.md, "Chain solves")."""
    xp = np if isinstance(inertia, np.ndarray) else jnp
    lengths, carried = chain_parameters(inertia)
    n = inertia.shape[0]
    later = xp.arange(n)[:, None] >= xp.arange(n)[None, :]  # i ≥ j: c_{max(i,j)} = c_i
    outer_carried = xp.where(later, carried[:, None], carried[None, :])
    defect = xp.max(xp.abs(outer_carried * lengths[:, None] * lengths[None, :] - inertia))
    masses = carried - xp.concatenate([carried[1:], xp.zeros(1, carried.dtype)])
    return (defect <= 1e-12 * xp.max(xp.abs(inertia))) & xp.all(masses > 1e-12 * carried[0])


def inertia_times(
    inertia: Float[Array, "n n"], x: Float[Array, "n 3"], chain: tuple[Float[Array, " n"], Float[Array, " n"]] | None
) -> Float[Array, "n 3"]:
    """M x: elementwise up to 8 bodies, in O(n) for a chain (`chain` = (l, c) of
    `SystemArgs.chain`), else `inertia @ x`.

    For M_ij = c_{max(i,j)} l_i l_j, (M x)_i = l_i (c_i S_i + T_i) with the prefix sums
    S_i = Σ_{j≤i} l_j x_j and the suffix sums T_i = Σ_{j>i} c_j l_j x_j.
    """
    if x.shape[0] <= _ELEMENTWISE_BODIES:
        # Σ_j M_ij x_j as elementwise products and sums, which XLA fuses with their neighbours
        # (a dot of 2 × 2 by 2 × 3 is a kernel call of its own on CPU).
        return sum(inertia[:, j, None] * x[None, j] for j in range(x.shape[0]))
    if chain is None or x.shape[0] < MIN_CHAIN_BODIES:
        return inertia @ x
    lengths, carried = chain
    weighted = lengths[:, None] * x
    prefix = jnp.cumsum(weighted, axis=0)
    suffix = jnp.cumsum((carried[:, None] * weighted)[::-1], axis=0)[::-1] - carried[:, None] * weighted
    return lengths[:, None] * (carried[:, None] * prefix + suffix)


def two_body_solve(
    q: Float[Array, "2 3"], rhs: Float[Array, "2 3"], inertia: Float[Array, "2 2"]
) -> Float[Array, "2 3"]:
    """Solve A(q) ω = rhs for two bodies in closed form (any M; |q_i| = 1 assumed).

    Row i of A ω is M_ii ω_i + M_ij B_ij ω_j with B_ij x = −q̂_i q̂_j x = c x − q_j (q_i·x),
    c = q₁·q₂ (002 (2.11)/(3.13)). B_ij annihilates q_j and maps into T_{q_i}S², so the normal
    parts are ω_i·q_i = rhs_i·q_i / M_ii and the tangential parts a, b solve
    M₁₁ a + M₁₂ B₁₂ b = r₁, M₂₂ b + M₁₂ B₂₁ a = r₂ (r_i the tangential part of rhs_i).
    Eliminating b, (M₁₁ − k B₁₂B₂₁) a = s with k = M₁₂²/M₂₂, s = r₁ − (M₁₂/M₂₂) B₁₂ r₂, and on
    T_{q₁}S², B₁₂B₂₁ = c² I + w wᵀ with w = q₂ − c q₁ (|w|² = 1 − c²), which Sherman–Morrison
    inverts: a = (s + k w (w·s)/(M₁₁ − k)) / (M₁₁ − k c²); then b = (r₂ − M₁₂ B₂₁ a)/M₂₂.
    M positive definite makes both denominators positive. A few vector operations, against a
    6 × 6 block elimination.
    """
    q1, q2 = q[0], q[1]
    m11, m12, m22 = inertia[0, 0], inertia[0, 1], inertia[1, 1]
    c = jnp.dot(q1, q2)
    n1, n2 = jnp.dot(q1, rhs[0]), jnp.dot(q2, rhs[1])
    r1, r2 = rhs[0] - n1 * q1, rhs[1] - n2 * q2
    k = m12 * m12 / m22
    s = r1 - (m12 / m22) * (c * r2 - q2 * jnp.dot(q1, r2))
    w = q2 - c * q1
    a = (s + (k * jnp.dot(w, s) / (m11 - k)) * w) / (m11 - k * c * c)
    b = (r2 - m12 * (c * a - q1 * jnp.dot(q2, a))) / m22
    return jnp.stack([a + (n1 / m11) * q1, b + (n2 / m22) * q2])


def _articulated_sweeps(
    q: Float[Array, "n 3"], p: Float[Array, "n 3"] | None, g: Float[Array, "n 3"], masses: Float[Array, " n"]
) -> Float[Array, "n 3"]:
    """u = (l_i v_i) with P_{q_i} Π_i = g_i and p_i·u_i = 0 (`p` None: p = q), in two sweeps.

    The recursion of docs/api/systems.md with the unknowns in the planes ⊥ p_i rather than
    ⊥ q_i: the articulated inertia beyond joint i + 1 is then κ q pᵀ, not symmetric, so
    with J_i = m_i I + κ_{i+1} q_{i+1} p_{i+1}ᵀ both w_i = J_i⁻¹ q_i and w̃_i = J_i⁻ᵀ p_i enter:
    s_i = p_i·w_i, κ_i = 1/s_i, z_i = g_i − q_i (w̃_i·(g_i − z_{i+1}))/s_i and
    u_i = J_i⁻¹ r_i − X_{i−1} + w_i (p_i·X_{i−1} − w̃_i·r_i)/s_i with r_i = g_i − z_{i+1}.

    Sherman–Morrison, J_i⁻¹ x = (x − β_i (p_{i+1}·x) q_{i+1}) / m_i with
    β_i = κ_{i+1}/(m_i + κ_{i+1} p_{i+1}·q_{i+1}) (J⁻ᵀ: q and p swapped), shares β_i between
    w_i, w̃_i and the forward sweep's J_i⁻¹ r_i; with 1/m_i computed once and κ_i reused, a link
    costs two divisions. The sweeps are a chain of dependent operations, and a division takes
    several times as long as a product (measured: see docs/performance.md, "Chain solves").
    """
    symmetric = p is None
    p = q if symmetric else p
    zero = jnp.zeros((1, 3), q.dtype)
    q_next, p_next = jnp.concatenate([q[1:], zero]), jnp.concatenate([p[1:], zero])
    inverse_masses = 1.0 / masses

    def solve_j(beta, inverse_mass, a, b, x):
        # (m I + κ a bᵀ)⁻¹ x (β = 0 beyond the tip).
        return (x - beta * dot(b, x) * a) * inverse_mass

    def backward(carry, link):
        kappa, z = carry
        qi, pi, gi, m, inverse_mass, qn, pn = link
        beta = kappa / (m + kappa * dot(qn, pn))
        w = solve_j(beta, inverse_mass, qn, pn, qi)
        w_adjoint = w if symmetric else solve_j(beta, inverse_mass, pn, qn, pi)
        kappa_i = 1.0 / dot(pi, w)
        return (kappa_i, gi - qi * (dot(w_adjoint, gi - z) * kappa_i)), (w, w_adjoint, kappa_i, beta, z)

    start = (jnp.zeros((), q.dtype), jnp.zeros(3, q.dtype))
    links = (q, p, g, masses, inverse_masses, q_next, p_next)
    _, (w, w_adjoint, kappa, beta, z) = _sweep(backward, start, links, reverse=True)

    def forward(x, link):
        pi, gi, inverse_mass, qn, pn, wi, wai, ki, bi, zi = link
        r = gi - zi
        u = solve_j(bi, inverse_mass, qn, pn, r) - x + wi * ((dot(pi, x) - dot(wai, r)) * ki)
        return x + u, u

    links = (p, g, inverse_masses, q_next, p_next, w, w_adjoint, kappa, beta, z)
    return _sweep(forward, jnp.zeros(3, q.dtype), links)[1]


def _sweep(body, carry, links, reverse=False):
    """`lax.scan(body, carry, links, reverse=reverse)`, unrolled for a few links (`_UNROLLED_LINKS`),
    where XLA then fuses the whole recursion with its neighbours."""
    n = links[0].shape[0]
    if n > _UNROLLED_LINKS:
        return lax.scan(body, carry, links, reverse=reverse)
    outputs = [None] * n
    for i in reversed(range(n)) if reverse else range(n):
        carry, outputs[i] = body(carry, tuple(x[i] for x in links))
    if isinstance(outputs[0], tuple):
        return carry, tuple(jnp.stack(parts) for parts in zip(*outputs))
    return carry, jnp.stack(outputs)


def _link_masses(carried: Float[Array, " n"]) -> Float[Array, " n"]:
    """m_i = c_i − c_{i+1}."""
    return carried - jnp.concatenate([carried[1:], jnp.zeros(1, carried.dtype)])


def chain_solve(
    q: Float[Array, "n 3"],
    rhs: Float[Array, "n 3"],
    lengths: Float[Array, " n"],
    carried: Float[Array, " n"],
) -> Float[Array, "n 3"]:
    """Solve A(q) ω = rhs for a chain's M in O(n) (module docstring); |q_i| = 1 assumed.

    **Arguments:** `q`, the unit vectors; `rhs`, b; `lengths`, `carried`: l and c of M.

    **Returns:** ω, shape (n, 3).
    """
    inverse_lengths = (1.0 / lengths)[:, None]  # products, not divisions (`_articulated_sweeps`)
    g = -jnp.cross(q, rhs) * inverse_lengths
    u = _articulated_sweeps(q, None, g, _link_masses(carried))
    normal = dot(q, rhs)[:, None] * q * (inverse_lengths**2 / carried[:, None])
    return jnp.cross(q, u * inverse_lengths) + normal


def tilted_chain_solve(
    q: Float[Array, "n 3"],
    p: Float[Array, "n 3"],
    g: Float[Array, "n 3"],
    lengths: Float[Array, " n"],
    carried: Float[Array, " n"],
) -> Float[Array, "n 3"]:
    """v with v_i ⊥ p_i and P_{q_i} (M v)_i = g_i, for a chain's M, in O(n) (`_articulated_sweeps`).

    For p = q this is the tangential part of (2.11)'s solve. With p_i = q_{i,k+1} it is the
    Newton step of (3.16) written in the displacements (`variational._displacement_newton`): the rows
    are projected at q_k, the unknowns vary along the sphere at q_{k+1}. Needs p_i·q_i > 0
    (the two points on the same hemisphere), true for any step that (3.16) can take.

    **Arguments:** unit vectors `q`, `p`; `g` tangent at q; `lengths`, `carried`: l and c of M.

    **Returns:** v, shape (n, 3).
    """
    inverse_lengths = (1.0 / lengths)[:, None]
    return _articulated_sweeps(q, p, g * inverse_lengths, _link_masses(carried)) * inverse_lengths
