"""O(n) solves of the operator A of (2.11)/(3.13) for chains, M_ij = c_{max(i,j)} l_i l_j.

A chain's W = M⁻¹ is tridiagonal (`chain_inverse_bands`), so A ω = b is solved by one multiplier per
link, as `_inertia.tangent_solve` does for a dense M, but with the n × n system S = W ∘ Gram(q)
tridiagonal: one Thomas elimination (`thomas_solve`) and two products by W, O(n) work against
O(n³) for a dense solve. Derivation: docs/api/systems.md; timings: docs/performance.md.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._custom_types import Array, Float
from ._geometry import dot

# From this many links the O(n) solve beats the unrolled 3 × 3 block elimination (measured: see
# docs/performance.md, "Chain solves"); the double pendulum keeps its closed form.
MIN_CHAIN_BODIES = 3
# Up to this many bodies `inertia_times` writes M x out elementwise, and up to `_UNROLLED_LINKS`
# rows the sweeps of `thomas_solve` are unrolled: the fastest choices for both the VI and
# `RungeKutta4` on the chain pendulum (loops compiled whole, see `_jit`; measured against M x by
# prefix sums and the sweeps as `lax.scan`s: see docs/performance.md, "Chain solves").
_ELEMENTWISE_BODIES = 8
_UNROLLED_LINKS = 8
# Up to this many links `inertia_times` is a plain `inertia @ x`, beyond by prefix sums: XLA CPU's
# cumulative sums cost more than the n² products of a small M, at run and compile time. Chain
# pendulum, µs per step, prefix sums → `inertia @ x` (`benchmarks/compare_revisions.py`, one
# process): n = 12, VI 2.56 → 1.60, RK4 3.00 → 1.93; 16, 3.99 → 2.17, 6.38 → 3.46; 20, 3.8 → 2.9,
# 4.0 → 4.0 (at 24 RK4 lost: 4.6–5.2 → 5.2–5.8). Compiling `simulate` and its gradient at 16
# links: VI 7.5–7.9 → 4.3–5.2 s, RK4 18.5 → 8.6 s. Vmapped over 1024 16-link chains on one host
# device the VI runs at 0.27 M steps/s against 0.40 with prefix sums (`Rattle` 0.88: for batches
# take it). Written out elementwise, 2.27 / 3.17 µs, 0.48 M steps/s, but 8.5 / 21 s to compile
# (docs/performance.md, "Chain solves").
_DENSE_PRODUCT_BODIES = 20
# Up to this many links `tilted_chain_solve` (the VI's Newton step) solves by multipliers, beyond
# by the articulated-body recursion: in the VI's step, chain pendulum, the multiplier form took
# 0.66 / 0.76 / 1.01 / 0.97 × the recursion's time at n = 4 / 8 / 16 / 24 and 1.22–1.29 × at
# n = 28–40 (docs/performance.md, "Chain solves").
_MULTIPLIER_LINKS = 24


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
    """M x: elementwise up to 8 bodies, `inertia @ x` up to `_DENSE_PRODUCT_BODIES` and for any M
    not a chain's, in O(n) for a longer chain (`chain` = (l, c) of `SystemArgs.chain`).

    For M_ij = c_{max(i,j)} l_i l_j, (M x)_i = l_i (c_i S_i + T_i) with the prefix sums
    S_i = Σ_{j≤i} l_j x_j and the suffix sums T_i = Σ_{j>i} c_j l_j x_j.
    """
    if x.shape[0] <= _ELEMENTWISE_BODIES:
        # Σ_j M_ij x_j as elementwise products and sums, which XLA fuses with their neighbours
        # (a dot of 2 × 2 by 2 × 3 is a kernel call of its own on CPU).
        return sum(inertia[:, j, None] * x[None, j] for j in range(x.shape[0]))
    if chain is None or x.shape[0] <= _DENSE_PRODUCT_BODIES:
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


def chain_inverse_bands(
    lengths: Float[Array, " n"], carried: Float[Array, " n"]
) -> tuple[Float[Array, " n"], Float[Array, " n-1"]]:
    """The main and first off-diagonal of W = M⁻¹ for a chain, M_ij = c_{max(i,j)} l_i l_j.

    M = D C D with D = diag(l) and C_ij = c_{max(i,j)} = Σ_k m_k [i ≤ k][j ≤ k], i.e.
    C = U diag(m) Uᵀ with U_ik = [i ≤ k]. U⁻¹ is bidiagonal (1 on the diagonal, −1 above it),
    so C⁻¹ = U⁻ᵀ diag(1/m) U⁻¹ is tridiagonal: (C⁻¹)_ii = 1/m_i + 1/m_{i−1} (the second term
    from i ≥ 1), (C⁻¹)_{i,i+1} = −1/m_i; and W = D⁻¹ C⁻¹ D⁻¹.

    **Returns:** `(main, upper)`: W_ii, shape (n,), and W_{i,i+1} = W_{i+1,i}, shape (n − 1,).
    """
    inverse_masses = 1.0 / _link_masses(carried)
    previous = jnp.concatenate([jnp.zeros(1, carried.dtype), inverse_masses[:-1]])
    return (inverse_masses + previous) / lengths**2, -inverse_masses[:-1] / (lengths[:-1] * lengths[1:])


def tridiagonal_times(lower, main, upper, x):
    """T x for the tridiagonal T with T_{i+1,i} = `lower`_i, T_ii = `main`_i, T_{i,i+1} = `upper`_i
    (the bands as `thomas_solve` takes them), x of shape (n, …)."""
    rest = [(0, 0)] * (x.ndim - 1)
    shape = (-1,) + (1,) * (x.ndim - 1)
    above = jnp.pad(upper.reshape(shape) * x[1:], [(0, 1)] + rest)  # T_{i,i+1} x_{i+1}; none in row n − 1
    below = jnp.pad(lower.reshape(shape) * x[:-1], [(1, 0)] + rest)  # T_{i,i−1} x_{i−1}; none in row 0
    return main.reshape(shape) * x + above + below


def _sweep(body, carry, rows, reverse=False):
    """`lax.scan(body, carry, rows, reverse=reverse)`, unrolled for a few rows (`_UNROLLED_LINKS`),
    where XLA then fuses the whole recursion with its neighbours."""
    n = rows[0].shape[0]
    if n > _UNROLLED_LINKS:
        return lax.scan(body, carry, rows, reverse=reverse)
    outputs = [None] * n
    for i in reversed(range(n)) if reverse else range(n):
        carry, outputs[i] = body(carry, tuple(x[i] for x in rows))
    if isinstance(outputs[0], tuple):
        return carry, tuple(jnp.stack(parts) for parts in zip(*outputs))
    return carry, jnp.stack(outputs)


def thomas_solve(
    lower: Float[Array, " n-1"], main: Float[Array, " n"], upper: Float[Array, " n-1"], rhs: Float[Array, " n"]
) -> Float[Array, " n"]:
    """x with T x = rhs for tridiagonal T (T_{i+1,i} = `lower`_i, T_ii = `main`_i,
    T_{i,i+1} = `upper`_i) by Thomas's elimination, without pivoting: stable for the symmetric
    positive definite S of `chain_solve` (it is the LDLᵀ factorisation) and for `tilted_chain_solve`'s
    H, a small change of such an S. One division per row (its reciprocal used twice), as a
    `lax.scan` over rows, unrolled for up to `_UNROLLED_LINKS`."""
    zero = jnp.zeros(1, main.dtype)

    def eliminate(carry, row):
        c_previous, d_previous = carry
        a, b, c, r = row
        inverse_pivot = 1.0 / (b - a * c_previous)
        c_i, d_i = c * inverse_pivot, (r - a * d_previous) * inverse_pivot
        return (c_i, d_i), (c_i, d_i)

    rows = (jnp.concatenate([zero, lower]), main, jnp.concatenate([upper, zero]), rhs)
    _, (c, d) = _sweep(eliminate, (zero[0], zero[0]), rows)

    def substitute(x_next, row):
        c_i, d_i = row
        x = d_i - c_i * x_next
        return x, x

    return _sweep(substitute, zero[0], (c, d), reverse=True)[1]


def _articulated_sweeps(
    q: Float[Array, "n 3"], p: Float[Array, "n 3"], g: Float[Array, "n 3"], masses: Float[Array, " n"]
) -> Float[Array, "n 3"]:
    """u = (l_i v_i) with P_{q_i} Π_i = g_i and p_i·u_i = 0, in two sweeps: `tilted_chain_solve`
    beyond `_MULTIPLIER_LINKS` links.

    The articulated-body recursion of docs/api/systems.md with the unknowns in the planes ⊥ p_i:
    the articulated inertia beyond joint i + 1 is κ q pᵀ, so with
    J_i = m_i I + κ_{i+1} q_{i+1} p_{i+1}ᵀ both w_i = J_i⁻¹ q_i and w̃_i = J_i⁻ᵀ p_i enter:
    s_i = p_i·w_i, κ_i = 1/s_i, z_i = g_i − q_i (w̃_i·(g_i − z_{i+1}))/s_i and
    u_i = J_i⁻¹ r_i − X_{i−1} + w_i (p_i·X_{i−1} − w̃_i·r_i)/s_i with r_i = g_i − z_{i+1}.
    Sherman–Morrison, J_i⁻¹ x = (x − β_i (p_{i+1}·x) q_{i+1}) / m_i with
    β_i = κ_{i+1}/(m_i + κ_{i+1} p_{i+1}·q_{i+1}) (J⁻ᵀ: q and p swapped): two divisions a link.
    """
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
        w_adjoint = solve_j(beta, inverse_mass, pn, qn, pi)
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

    The tangential part as `_inertia.tangent_solve` (u_j = q_j × ω_j, (M u)_i = q_i × b_i +
    λ_i q_i, u_i ⊥ q_i; then ω_i = u_i × q_i) with W = M⁻¹ tridiagonal (`chain_inverse_bands`),
    so S = W ∘ Gram(q) is tridiagonal too and λ costs one `thomas_solve`; the normal part
    (q_i·b_i) q_i / M_ii, from A's diagonal blocks M_ii I. Off the sphere (Runge–Kutta stages) it
    is the same smooth extension of A⁻¹ as `tangent_solve`'s.

    **Arguments:** `q`, the unit vectors; `rhs`, b; `lengths`, `carried`: l and c of M.

    **Returns:** ω, shape (n, 3).
    """
    u = _by_multipliers(q, q, jnp.cross(q, rhs), lengths, carried)
    normal = dot(q, rhs)[:, None] * q / (carried * lengths**2)[:, None]
    return jnp.cross(u, q) + normal


def tilted_chain_solve(
    q: Float[Array, "n 3"],
    p: Float[Array, "n 3"],
    g: Float[Array, "n 3"],
    lengths: Float[Array, " n"],
    carried: Float[Array, " n"],
) -> Float[Array, "n 3"]:
    """v with v_i ⊥ p_i and P_{q_i} (M v)_i = g_i, for a chain's M, in O(n).

    For p = q this is the tangential part of (2.11)'s solve. With p_i = q_{i,k+1} it is the
    Newton step of (3.16) written in the displacements (`variational._displacement_newton`): the rows
    are projected at q_k, the unknowns vary along the sphere at q_{k+1}. By multipliers, as in
    `chain_solve`: (M v)_i = g_i + μ_i q_i, so v = W(g + μ ⊙ q) with W = M⁻¹ tridiagonal, and
    p_i·v_i = 0 gives H μ = −(p_i·(W g)_i)_i with H_ij = W_ij (p_i·q_j), tridiagonal (H = S for
    p = q), one `thomas_solve`. Needs H nonsingular, which holds for p near q (the two points on
    the same hemisphere, as for any step that (3.16) can take). Beyond `_MULTIPLIER_LINKS` links,
    the articulated-body recursion (`_articulated_sweeps`) instead: inside the VI's Newton loop
    it measured faster there, though the multiplier form alone is about twice as fast at every n
    (see docs/performance.md, "Chain solves").

    **Arguments:** unit vectors `q`, `p`; `g` tangent at q; `lengths`, `carried`: l and c of M.

    **Returns:** v, shape (n, 3).
    """
    if q.shape[0] > _MULTIPLIER_LINKS:
        inverse_lengths = (1.0 / lengths)[:, None]
        return _articulated_sweeps(q, p, g * inverse_lengths, _link_masses(carried)) * inverse_lengths
    return _by_multipliers(q, p, g, lengths, carried)


def _by_multipliers(q, p, g, lengths, carried):
    """v = W(g + μ ⊙ q) with p_i·v_i = 0: H μ = −(p_i·(W g)_i)_i, H_ij = W_ij (p_i·q_j), by
    `thomas_solve` (`tilted_chain_solve`; `chain_solve` with p = q, g = q × b)."""
    main, upper = chain_inverse_bands(lengths, carried)
    y = tridiagonal_times(upper, main, upper, g)
    multipliers = thomas_solve(
        upper * dot(p[1:], q[:-1]), main * dot(p, q), upper * dot(p[:-1], q[1:]), -dot(p, y)
    )
    return y + tridiagonal_times(upper, main, upper, multipliers[:, None] * q)
