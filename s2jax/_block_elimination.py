"""Solving 3n × 3n linear systems made of 3 × 3 blocks by block Gaussian elimination.

The operators of (2.11), (3.13) and the Jacobian of (3.16) in Lee–Leok–McClamroch 2009 are
n × n arrays of 3 × 3 blocks. For the small n of most models they are eliminated block by block,
with 3 × 3 inverses written as cross products and 3 × 3 products as broadcast multiplications and
sums, not `@`: elementwise operations that XLA fuses. For larger n (beyond `MAX_UNROLLED_BODIES`)
the dense solve wins, and is used. Why, and the timings: docs/performance.md ("Small solves").
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp

from ._custom_types import Array, Float

# Beyond this many bodies the unrolled elimination (O(n²) traced 3 × 3 operations, O(n³) flops)
# costs more to compile and run than one dense LU. With XLA's CPU loops compiled whole (`_jit`)
# a loop around a large unrolled elimination compiles slowly (measured: see docs/performance.md,
# "Small solves").
MAX_UNROLLED_BODIES = 8


def inverse_3x3(a: Float[Array, "... 3 3"]) -> Float[Array, "... 3 3"]:
    """The inverse of a 3 × 3 matrix from its adjugate: columns are cross products of rows."""
    r0, r1, r2 = a[..., 0, :], a[..., 1, :], a[..., 2, :]
    c0, c1, c2 = jnp.cross(r1, r2), jnp.cross(r2, r0), jnp.cross(r0, r1)
    det = jnp.sum(r0 * c0, axis=-1)
    return jnp.stack([c0, c1, c2], axis=-1) / det[..., None, None]


def matmul_3x3(a: Float[Array, "... 3 3"], b: Float[Array, "... 3 3"]) -> Float[Array, "... 3 3"]:
    """a @ b for 3 × 3 matrices, as elementwise operations that XLA fuses."""
    return jnp.sum(a[..., :, :, None] * b[..., None, :, :], axis=-2)


def matvec_3x3(a: Float[Array, "... 3 3"], x: Float[Array, "... 3"]) -> Float[Array, "... 3"]:
    """a @ x for a 3 × 3 matrix, as elementwise operations that XLA fuses."""
    return jnp.sum(a * x[..., None, :], axis=-1)


def assemble(blocks: Float[Array, "n n 3 3"]) -> Float[Array, "3n 3n"]:
    """The 3n × 3n matrix whose (i, j) block is blocks[i, j]."""
    n = blocks.shape[0]
    return jnp.transpose(blocks, (0, 2, 1, 3)).reshape(3 * n, 3 * n)


def block_factor(blocks: Float[Array, "n n 3 3"]) -> Callable[[Float[Array, "n 3"]], Float[Array, "n 3"]]:
    """Factor Σ_j blocks[i, j] x_j = rhs_i once: **returns** `solve(rhs) -> x`, shape (n, 3).

    Block LU without pivoting. The leading principal block minors of the operators that
    s2jax solves are nonsingular whenever the inertia matrix M is positive definite (the
    argument of 002 §2.1 applied to each leading sub-system), so no pivoting is needed. Each
    `solve` then costs the two block-triangular sweeps only (a chord iteration reuses one
    factorisation for every right-hand side).
    """
    n = blocks.shape[0]
    if n > MAX_UNROLLED_BODIES:
        factors = jax.scipy.linalg.lu_factor(assemble(blocks))
        return lambda rhs: jax.scipy.linalg.lu_solve(factors, rhs.reshape(3 * n)).reshape(n, 3)
    a = [[blocks[i, j] for j in range(n)] for i in range(n)]
    pivots, multipliers = [], {}
    for k in range(n):
        pivots.append(inverse_3x3(a[k][k]))
        for i in range(k + 1, n):
            multipliers[i, k] = matmul_3x3(a[i][k], pivots[k])
            for j in range(k + 1, n):
                a[i][j] = a[i][j] - matmul_3x3(multipliers[i, k], a[k][j])

    def solve(rhs):
        b = [rhs[i] for i in range(n)]
        for k in range(n):
            for i in range(k + 1, n):
                b[i] = b[i] - matvec_3x3(multipliers[i, k], b[k])
        x = [None] * n
        for k in reversed(range(n)):
            acc = b[k]
            for j in range(k + 1, n):
                acc = acc - matvec_3x3(a[k][j], x[j])
            x[k] = matvec_3x3(pivots[k], acc)
        return jnp.stack(x)

    return solve


def block_solve(blocks: Float[Array, "n n 3 3"], rhs: Float[Array, "n 3"]) -> Float[Array, "n 3"]:
    """Solve Σ_j blocks[i, j] x_j = rhs_i for x of shape (n, 3) (`block_factor`, applied once)."""
    return block_factor(blocks)(rhs)


def dense_block_solve(blocks: Float[Array, "n n 3 3"], rhs: Float[Array, "n 3"]) -> Float[Array, "n 3"]:
    """Solve Σ_j blocks[i, j] x_j = rhs_i by one LU (LAPACK, with pivoting) of the assembled
    matrix, whatever n: for a solve inside an inner loop, where the unrolled elimination of
    `block_factor` would be compiled into the loop body (XLA's CPU loops are compiled whole, and
    a loop around an unrolled elimination of 8 bodies compiles slowly: docs/performance.md,
    "Small solves")."""
    n = blocks.shape[0]
    return jnp.linalg.solve(assemble(blocks), rhs.reshape(3 * n)).reshape(n, 3)
