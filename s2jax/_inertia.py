"""`Inertia`: the constant inertia matrix M of (2.2) of 002 with its structure, and the solves of A.

A(q) is the operator of (2.11)/(3.13), blocks M_ii I₃ and −M_ij q̂_i q̂_j; it is solved in closed
form for two bodies, in O(n) for a chain (`_structured_solve`), by block elimination for fewer
than `MIN_CHOLESKY_BODIES` bodies, and from there through M⁻¹ and one n × n Cholesky
(`tangent_solve`).
Built once per simulation by `LagrangianSystem.prepare`; see docs/integrators/variational.md.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._block_elimination import block_solve
from ._custom_types import Array, Bool, Float
from ._geometry import dot, gram
from ._structured_solve import (
    MIN_CHAIN_BODIES,
    chain_factors,
    chain_parameters,
    chain_solve,
    inertia_times,
    is_chain,
    is_diagonal,
    matrix_diagonal,
    two_body_solve,
)

# From this many bodies a dense M is solved through M⁻¹ and a Cholesky (`tangent_solve`), and the
# VI's chord on (3.16) with it: the unrolled 3 × 3 block elimination of 8 bodies compiled in 15 s
# and ran 7.9 µs a step (a random dense M, `benchmarks/dense_inertia.py`'s model), this path 2.0 s
# and 11.8 µs; at 5 bodies the elimination wins (4.1 s and 0.73 µs against 2.0 s and 10.2 µs).
MIN_CHOLESKY_BODIES = 8
# Up to this many bodies, on several CPU devices, `cholesky` factorises in XLA (a `lax.fori_loop`),
# beyond by LAPACK: the dense model of `benchmarks/dense_inertia.py`, µs per step, LAPACK →
# fori_loop: n = 16, VI 22 → 5.4,
# RK4 19 → 9.6, Rattle 13 → 4.6; n = 32, 43 → 18, 43 → 34, 62 → 24; n = 64, 81 → 130, 109 → 200,
# 70 → 103 (docs/performance.md, "Dense inertia").
MAX_XLA_CHOLESKY_BODIES = 32

STRUCTURES = ("dense", "chain", "diagonal")
"""What an `Inertia` may know of M: nothing ("dense"), M_ij = c_{max(i,j)} l_i l_j ("chain"), or
M_ij = 0 for i ≠ j ("diagonal"). Two bodies are solved in closed form whatever M is."""


class Inertia(eqx.Module):
    """M of (2.2) and what is known of its structure, with its products and solves.

    **Fields:**

    - `matrix`: M, shape (n, n).
    - `chain`: (l, c) with M_ij = c_{max(i,j)} l_i l_j where `structure` is "chain", else None.
    - `structure`: one of `STRUCTURES` (static).
    - `inverse`: M⁻¹ for a dense M of at least `MIN_CHOLESKY_BODIES` bodies, else None.
    """

    matrix: Float[Array, "n n"]
    chain: tuple[Float[Array, " n"], Float[Array, " n"]] | None
    structure: str = eqx.field(static=True)
    inverse: Float[Array, "n n"] | None = None

    @classmethod
    def of(cls, matrix: Float[Array, "n n"], structure: str) -> "Inertia":
        """The `Inertia` of M known to have `structure` (the chain's (l, c), or M⁻¹ of many bodies,
        computed once: `LagrangianSystem.prepare` builds it once per run)."""
        chain = chain_parameters(matrix) if structure == "chain" else None
        many = structure == "dense" and matrix.shape[0] >= MIN_CHOLESKY_BODIES
        return cls(matrix, chain, structure, jnp.linalg.inv(matrix) if many else None)

    @staticmethod
    def recognise(matrix: np.ndarray) -> str:
        """The structure of a concrete M: "diagonal", "chain" or "dense" (decided in numpy)."""
        if is_diagonal(matrix):
            return "diagonal"
        return "chain" if chain_factors(matrix) is not None else "dense"

    def is_diagonal(self) -> Bool[Array, ""]:
        """Whether M_ij = 0 for i ≠ j, exactly (in the graph, for a traced M)."""
        return is_diagonal(self.matrix)

    def is_chain(self) -> Bool[Array, ""]:
        """Whether M is a chain's, to 1e-12 relative (in the graph, for a traced M)."""
        return is_chain(self.matrix)

    def times(self, x: Float[Array, "n 3"]) -> Float[Array, "n 3"]:
        """M x (elementwise for few bodies, O(n) for a chain)."""
        return inertia_times(self.matrix, x, self.chain)

    def operator(self, q: Float[Array, "n 3"]) -> Float[Array, "n n 3 3"]:
        """The 3n × 3n matrix on the left of (2.11) and (3.13), as n × n blocks of 3 × 3.

        Diagonal blocks M_ii I₃; off-diagonal blocks −M_ij q̂_i q̂_j = −M_ij (q_j q_iᵀ − (q_i·q_j) I₃).
        """
        n = q.shape[0]
        eye3 = jnp.eye(3, dtype=q.dtype)[None, None]
        gram_q = gram(q, q)[:, :, None, None]
        outer = q[None, :, :, None] * q[:, None, None, :]  # q_j q_iᵀ
        off = -self.matrix[:, :, None, None] * (outer - gram_q * eye3)
        diag = matrix_diagonal(self.matrix)[:, None, None, None] * eye3
        is_diag = jnp.eye(n, dtype=bool)[:, :, None, None]
        return jnp.where(is_diag, diag, off)

    def gram_factor(self, q: Float[Array, "n 3"]) -> Float[Array, "n n"] | None:
        """The Cholesky factor of M⁻¹ ∘ Gram(q) that `solve` uses at q (`gram_cholesky`), where it
        uses one (a dense M of many bodies); else None."""
        return None if self.inverse is None else gram_cholesky(self.inverse, q)

    def solve(
        self, q: Float[Array, "n 3"], rhs: Float[Array, "n 3"], factor: Float[Array, "n n"] | None = None
    ) -> Float[Array, "n 3"]:
        """ω with A(q) ω = rhs, A the operator of (2.11)/(3.13) (`factor`: `gram_factor(q)`, if
        already computed).

        The O(n) recursion of `chain_solve` for a chain (from `MIN_CHAIN_BODIES` links), the
        closed form of `two_body_solve` for two bodies (both assume |q_i| = 1: off the sphere, at
        the stages of Runge–Kutta methods, they are a smooth extension of the operator, which
        leaves the methods' order alone); `tangent_solve` for a dense M of many bodies (the
        same); otherwise `block_solve` (unrolled 3 × 3 elimination).
        """
        if self.chain is not None and q.shape[0] >= MIN_CHAIN_BODIES:
            return chain_solve(q, rhs, *self.chain)
        if q.shape[0] == 2:
            return two_body_solve(q, rhs, self.matrix)
        if self.inverse is not None:
            return tangent_solve(q, rhs, self.inverse, factor)
        return block_solve(self.operator(q), rhs)


def cholesky(matrix: Float[Array, "n n"]) -> Float[Array, "n n"]:
    """The lower Cholesky factor L of a symmetric positive definite matrix, L Lᵀ = matrix: where
    the default backend is CPU with several devices and n ≤ `MAX_XLA_CHOLESKY_BODIES`, column by
    column in a `lax.fori_loop` (O(n²) a column, so n³ multiply–adds against LAPACK's n³/3);
    otherwise by the backend's library (`jax.scipy.linalg.cho_factor`: LAPACK on CPU).

    Inside the steps' loops LAPACK's `potrf` is a custom call, and a program that vmaps it over
    256 or more members per device inside a loop, sharded over two host CPU devices, never returns
    on jaxlib 0.10.2 (a deadlock, reproduced with JAX alone: docs/batches.md); one device runs it.
    Written in JAX the factorisation is ordinary XLA code. It also runs 2–4× faster at 16–32
    bodies, but its loops add ~1 s to a dense program's compilation, so with one CPU device, where
    LAPACK cannot deadlock, LAPACK is kept (docs/performance.md, "Dense inertia").
    """
    n = matrix.shape[-1]
    if not _xla_cholesky(n):
        return jax.scipy.linalg.cho_factor(matrix, lower=True)[0]
    rows = jnp.arange(n)

    def column(j, lower):
        # Column j of L from the columns before it (row j of `lower` holds L_jk, k < j, else 0).
        v = matrix[:, j] - lower @ lower[j]
        return lower.at[:, j].set(jnp.where(rows >= j, v / jnp.sqrt(v[j]), 0.0))

    return lax.fori_loop(0, n, column, jnp.zeros_like(matrix))


def cholesky_solve(lower: Float[Array, "n n"], rhs: Float[Array, " n"]) -> Float[Array, " n"]:
    """x with L Lᵀ x = rhs for the factor L of `cholesky`: two triangular sweeps in
    `lax.fori_loop`s, O(n²), where `cholesky` runs in XLA; else the library's `cho_solve`."""
    n = lower.shape[-1]
    if not _xla_cholesky(n):
        return jax.scipy.linalg.cho_solve((lower, True), rhs)

    def forward(i, y):  # L y = rhs; y_k = 0 for k ≥ i so far
        return y.at[i].set((rhs[i] - lower[i] @ y) / lower[i, i])

    y = lax.fori_loop(0, n, forward, jnp.zeros_like(rhs))

    def backward(k, x):  # Lᵀ x = y from the last row; x_k = 0 for k ≤ i so far
        i = n - 1 - k
        return x.at[i].set((y[i] - lower[:, i] @ x) / lower[i, i])

    return lax.fori_loop(0, n, backward, jnp.zeros_like(rhs))


def _xla_cholesky(n: int) -> bool:
    """Whether `cholesky` factorises n × n in XLA: up to `MAX_XLA_CHOLESKY_BODIES`, where the
    default backend is CPU with several devices (the deadlock's condition)."""
    return n <= MAX_XLA_CHOLESKY_BODIES and jax.default_backend() == "cpu" and jax.device_count() > 1


def gram_cholesky(inverse: Float[Array, "n n"], q: Float[Array, "n 3"]) -> Float[Array, "n n"]:
    """The Cholesky factor (`cholesky`) of S = W ∘ Gram(q), W = M⁻¹: symmetric positive definite
    (a Schur product of two), the n × n matrix of every many-body solve (`tangent_solve`, and
    RATTLE's multipliers, `_integrators.constrained`)."""
    return cholesky(inverse * gram(q, q))


def tangent_solve(
    q: Float[Array, "n 3"], rhs: Float[Array, "n 3"], inverse: Float[Array, "n n"], factor=None
) -> Float[Array, "n 3"]:
    """ω with A(q) ω = rhs for rhs_i ⊥ q_i (the right sides of (2.11) and (3.13) are), given W = M⁻¹
    (and `gram_cholesky(W, q)`, if already computed).

    For |q_i| = 1 and ω_i ⊥ q_i, (Aω)_i = −q_i × Σ_j M_ij (q_j × ω_j). With u_j = q_j × ω_j,
    A ω = b reads (M u)_i = q_i × b_i + λ_i q_i for some λ, so u = W(q × b + λ ⊙ q), and u_i ⊥ q_i
    fixes λ by S λ = −(q_i·(W(q × b))_i)_i with S = W ∘ Gram(q): one n × n Cholesky, n³/6 flops,
    against 18n³ for the LU of the 3n × 3n operator. Then ω_i = u_i × q_i. Off the sphere
    (Runge–Kutta stages) a smooth extension of A⁻¹, as `chain_solve`'s."""
    factor = gram_cholesky(inverse, q) if factor is None else factor
    y = inverse @ jnp.cross(q, rhs)
    multipliers = cholesky_solve(factor, -dot(q, y))
    return jnp.cross(y + inverse @ (multipliers[:, None] * q), q)
