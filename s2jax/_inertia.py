"""`Inertia`: the constant inertia matrix M of (2.2) of 002 with its structure, and the solves of A.

A(q) is the operator of (2.11)/(3.13), blocks M_ii I₃ and −M_ij q̂_i q̂_j; it is solved in closed
form for two bodies, in O(n) for a chain (`_structured_solve`), by block elimination otherwise.
Built once per simulation by `LagrangianSystem.prepare`; see docs/integrators/variational.md.
"""

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ._block_elimination import block_solve
from ._custom_types import Array, Bool, Float
from ._geometry import dot
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

STRUCTURES = ("dense", "chain", "diagonal")
"""What an `Inertia` may know of M: nothing ("dense"), M_ij = c_{max(i,j)} l_i l_j ("chain"), or
M_ij = 0 for i ≠ j ("diagonal"). Two bodies are solved in closed form whatever M is."""


class Inertia(eqx.Module):
    """M of (2.2) and what is known of its structure, with its products and solves.

    **Fields:**

    - `matrix`: M, shape (n, n).
    - `chain`: (l, c) with M_ij = c_{max(i,j)} l_i l_j where `structure` is "chain", else None.
    - `structure`: one of `STRUCTURES` (static).
    """

    matrix: Float[Array, "n n"]
    chain: tuple[Float[Array, " n"], Float[Array, " n"]] | None
    structure: str = eqx.field(static=True)

    @classmethod
    def of(cls, matrix: Float[Array, "n n"], structure: str) -> "Inertia":
        """The `Inertia` of M known to have `structure` (the chain's (l, c) computed once)."""
        chain = chain_parameters(matrix) if structure == "chain" else None
        return cls(matrix, chain, structure)

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
        gram = dot(q[:, None], q[None, :])[:, :, None, None]
        outer = q[None, :, :, None] * q[:, None, None, :]  # q_j q_iᵀ
        off = -self.matrix[:, :, None, None] * (outer - gram * eye3)
        diag = matrix_diagonal(self.matrix)[:, None, None, None] * eye3
        is_diag = jnp.eye(n, dtype=bool)[:, :, None, None]
        return jnp.where(is_diag, diag, off)

    def solve(self, q: Float[Array, "n 3"], rhs: Float[Array, "n 3"]) -> Float[Array, "n 3"]:
        """ω with A(q) ω = rhs, A the operator of (2.11)/(3.13).

        The O(n) recursion of `chain_solve` for a chain (from `MIN_CHAIN_BODIES` links), the
        closed form of `two_body_solve` for two bodies (both assume |q_i| = 1: off the sphere, at
        the stages of Runge–Kutta methods, they are a smooth extension of the operator, which
        leaves the methods' order alone); otherwise `block_solve` (unrolled 3 × 3 elimination for
        few bodies, dense LU beyond).
        """
        if self.chain is not None and q.shape[0] >= MIN_CHAIN_BODIES:
            return chain_solve(q, rhs, *self.chain)
        if q.shape[0] == 2:
            return two_body_solve(q, rhs, self.matrix)
        return block_solve(self.operator(q), rhs)
