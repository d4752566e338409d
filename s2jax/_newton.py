"""Newton's method with a `jax.jacfwd` Jacobian, differentiated by the implicit function theorem."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from ._block_elimination import block_solve
from ._custom_types import Array, Float, Int


def _solve_jacobian(jacobian: Float[Array, "n 3 n 3"], rhs: Float[Array, "n 3"]) -> Float[Array, "n 3"]:
    return block_solve(jnp.swapaxes(jacobian, 1, 2), rhs)


def newton_root(
    residual: Callable[[Float[Array, "n 3"]], Float[Array, "n 3"]],
    initial_guess: Float[Array, "n 3"],
    *,
    rtol: float,
    atol: float,
    max_steps: int,
) -> tuple[Float[Array, "n 3"], Int[Array, ""], jax.Array]:
    """Find x with residual(x) = 0 for x of shape (n, 3).

    Each iteration forms the Jacobian with `jax.jacfwd` and solves with the 3 × 3 block
    elimination of `block_solve`. It stops once the Newton update satisfies
    max|δx| ≤ atol + rtol·max|x|; since the convergence is quadratic, the error left after
    that update is of order (δx)², i.e. round-off for tolerances near 1e-12 in float64.

    Derivatives are those of the exact root (implicit function theorem, through
    `jax.lax.custom_root`): dx*/dθ = −(∂r/∂x)⁻¹ ∂r/∂θ at the converged point, for forward and
    reverse mode alike; the iterations themselves are never differentiated.

    **Returns:** `(x, num_steps, converged)`.
    """

    def solve(fn, x0):
        def cond(carry):
            _, step, size, scale = carry
            unconverged = size > atol + rtol * scale
            return (step < max_steps) & unconverged & jnp.isfinite(size)

        def body(carry):
            x, step, _, _ = carry
            delta = _solve_jacobian(jax.jacfwd(fn)(x), -fn(x))
            x = x + delta
            return x, step + 1, jnp.max(jnp.abs(delta)), jnp.max(jnp.abs(x))

        big = jnp.array(jnp.finfo(x0.dtype).max, dtype=x0.dtype)
        zero = jnp.zeros((), dtype=x0.dtype)
        x, steps, size, scale = lax.while_loop(cond, body, (x0, jnp.array(0), big, zero))
        converged = size <= atol + rtol * scale
        # Returned as floats: `custom_root` gives its auxiliary outputs tangents of their own
        # dtype, which JAX rejects for ints and bools.
        return x, (steps.astype(x.dtype), converged.astype(x.dtype))

    def tangent_solve(linear_fn, rhs):
        return _solve_jacobian(jax.jacfwd(linear_fn)(rhs), rhs)

    x, (steps, converged) = lax.custom_root(
        residual, initial_guess, solve, tangent_solve, has_aux=True
    )
    return x, lax.stop_gradient(steps).astype(int), lax.stop_gradient(converged) > 0
