"""Newton's method, differentiated by the implicit function theorem.

The Jacobian is `jax.jacfwd`'s unless the caller gives it in closed form (the Cayley equation
(3.16) of 002 does: its 3 × 3 blocks cost less than a forward-mode pass per unknown).
"""

import functools
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jax.ad_checkpoint import checkpoint_name

from ._block_elimination import block_solve
from ._custom_types import Array, Float, Int

CHORD_STALL = 0.25
"""A chord whose update shrinks by less than this factor in an iteration hands over to Newton."""

NEWTON_ROOT = "s2jax.newton_root"
"""The `jax.ad_checkpoint.checkpoint_name` of what each solve returns (root, iteration count,
convergence): `CheckpointedAdjoint` keeps these, so its second forward pass skips the iterations."""


class NewtonSettings(eqx.Module):
    """Newton's stopping rule and iteration cap: the `newton` field of every implicit integrator
    and of the systems that invert a Legendre map by Newton's method.

    **Fields:**

    - `rtol`, `atol`: the iterations stop once the error left is estimated below
      atol + rtol·max|x| (see `newton_root`); the defaults leave round-off.
    - `max_steps`: the iteration cap; reaching it gives `RESULTS.newton_failed`.
    """

    rtol: float = 1e-12
    atol: float = 1e-12
    max_steps: int = 20

    @property
    def options(self) -> dict:
        """`rtol`, `atol`, `max_steps` as keyword arguments of `newton_root`."""
        return {"rtol": self.rtol, "atol": self.atol, "max_steps": self.max_steps}


def solve_jacobian(jacobian: Float[Array, "n 3 n 3"], rhs: Float[Array, "n 3"]) -> Float[Array, "n 3"]:
    """x with Σ_j J[i, :, j, :] x_j = rhs_i, for `jax.jacfwd`'s Jacobian of a map of (n, 3) arrays
    (block elimination, `block_solve`): Newton's default solve."""
    return block_solve(jnp.swapaxes(jacobian, 1, 2), rhs)


def newton_root(
    residual: Callable[[Float[Array, "n 3"]], Float[Array, "n 3"]],
    initial_guess: Float[Array, "n 3"],
    *,
    rtol: float,
    atol: float,
    max_steps: int,
    unrolled: int = 0,
    approximate_inverse: Callable[[Float[Array, "n 3"]], Float[Array, "n 3"]] | None = None,
    jacobian_solve: Callable[[Float[Array, "n 3"], Float[Array, "n 3"]], Float[Array, "n 3"]] | None = None,
) -> tuple[Float[Array, "n 3"], Int[Array, ""], jax.Array]:
    """Find x with residual(x) = 0 for x of shape (n, 3).

    By default each iteration forms the Jacobian by `jax.jacfwd` (blocks [i, j] = ∂r_i/∂x_j)
    and solves with the 3 × 3 block elimination of `block_solve`. The first
    `unrolled` iterations run unconditionally, outside the `while_loop` (on CPU a loop trip
    costs about as much as a small iteration); the loop then runs only while the test below
    fails, so the root is the same, with at most `unrolled` − 1 extra, harmless iterations.
    With `approximate_inverse` (a fixed approximation of the inverse Jacobian, such as the
    closed-form Jacobian at the starting point, factorised once) the updates are
    δ = −approximate_inverse(r(x)) instead (a chord, or simplified Newton, iteration). It
    converges linearly, at a rate θ set by how far the approximation is from the Jacobian at
    the root, so it stops only once |δ_j| ≤ tol, where the error left is |δ_j| θ. With
    `jacobian_solve(x, r)`, the Newton step J(x)⁻¹ r in closed form (a structured solve that
    never forms J), each iteration is a full Newton step without a Jacobian in memory. Given
    both, the iterations are the chord's, and `jacobian_solve` serves the derivative and the
    chord's stall: where the chord contracts by less than `CHORD_STALL` per iteration (its rate
    grows with the step's rotation h|ω|), full Newton steps finish the solve, in a second
    `while_loop` that runs only then, under the same cap. (A 12-link chain taken as dense, at
    h|ω| ≈ 0.33 on its last link, needed more than 20 chord iterations in the VI and in `Rattle`
    and failed; `tests/test_newton.py`.)

    With δ_j the j-th update and tol = atol + rtol·max|x|, Newton stops once the error left
    after the update is estimated below tol: either |δ_j| ≤ tol (the error left is then
    O(δ_j²)), or the iteration contracts, |δ_j| < |δ_{j−1}|, and the linear-rate estimate of the
    error left, |δ_j|²/|δ_{j−1}|, is ≤ tol (as optimistix does). The second test saves the
    last, confirming iteration: Newton converges quadratically, so its true remaining error,
    ~|δ_j|³/|δ_{j−1}|², is far smaller than the estimate. At rtol = atol = 1e-12 in float64
    the root is exact to round-off.

    Derivatives are those of the exact root (implicit function theorem): dx*/dθ =
    −(∂r/∂x)⁻¹ ∂r/∂θ at the converged point, for forward and reverse mode alike; the iterations
    themselves are never differentiated. The solve with ∂r/∂x at the root is
    `jacobian_solve(x*, ·)` (`_structured_root`): O(n) for a chain, the closed-form Jacobian of
    the dense (3.16) factorised once at the root, and by default `jax.jacfwd`'s Jacobian and
    the block elimination.

    The root, iteration count and convergence flag leave the solve under the checkpoint name
    `NEWTON_ROOT`, which `CheckpointedAdjoint` saves: its second forward pass then evaluates
    each step at the stored root, with no iterations. That is why every path, the `jax.jacfwd`
    one included, goes through `_structured_root`: under `jax.lax.custom_root` (which the
    default path used until 2026-11) the name is not seen, and the iterations ran again
    (measured: see docs/performance.md, "Keeping the Newton roots"). On one dense solve of
    (3.16) the default path is slower than optimistix's Newton + `ImplicitAdjoint`, a per-call
    overhead that made no difference measured inside simulations (measured: see
    docs/performance.md, "Newton's method against optimistix").

    **Returns:** `(x, num_steps, converged)`.
    """

    if jacobian_solve is None:
        def jacobian_solve(x, r):
            return solve_jacobian(jax.jacfwd(residual)(x), r)

    chord = approximate_inverse is not None

    def solve(fn, x0, newton_step):
        # `newton_step`: from `_structured_root`, the closure-converted `jacobian_solve`.
        def converged(x, step, size, previous, newton=not chord):
            tol = atol + rtol * jnp.max(jnp.abs(x))
            # A chord iteration's error left is about |δ_j| θ, not ~|δ_j|³/|δ_{j−1}|²: stopping
            # on the estimate |δ_j| θ ≤ tol would leave errors of tol, not of round-off.
            contracting = (step >= 2) & (size < previous) & newton
            return (size <= tol) | (contracting & (size * size <= tol * previous))

        def iterating(carry, newton=not chord):
            x, step, size, previous = carry
            return (step < max_steps) & ~converged(x, step, size, previous, newton) & jnp.isfinite(size)

        def chord_iterating(carry):
            _, step, size, previous = carry
            return iterating(carry) & ~((step >= 2) & (size > CHORD_STALL * previous))

        def body(carry, step_solve=(lambda x, r: approximate_inverse(r)) if chord else newton_step):
            x, step, size, _ = carry
            delta = step_solve(x, -fn(x))
            return x + delta, step + 1, jnp.max(jnp.abs(delta)), size

        big = jnp.array(jnp.finfo(x0.dtype).max, dtype=x0.dtype)
        carry = (x0, jnp.array(0), big, big)
        for _ in range(min(unrolled, max_steps)):
            carry = body(carry)
        carry = lax.while_loop(chord_iterating if chord else iterating, body, carry)
        ok = converged(*carry)
        if chord:
            # A stalled chord: Newton's steps from where it stopped (none where it converged),
            # judged by Newton's test once one has run.
            chord_steps = carry[1]
            newton = functools.partial(iterating, newton=True)
            carry = lax.while_loop(newton, functools.partial(body, step_solve=newton_step), carry)
            ok = jnp.where(carry[1] > chord_steps, converged(*carry, newton=True), ok)
        x, steps = carry[:2]
        return checkpoint_name((x, (steps, ok)), NEWTON_ROOT)

    x, (steps, ok) = _structured_root(residual, jacobian_solve, solve, initial_guess, chord)
    return x, steps, ok


def _structured_root(residual, jacobian_solve, solve, initial_guess, chord):
    """`solve(residual, initial_guess)` = (x*, aux), differentiated by the implicit function
    theorem with `jacobian_solve(x*, ·)` = (∂r/∂x)⁻¹ at the root: dx* = −J⁻¹ (∂r/∂θ dθ).

    The arrays that `residual` and `jacobian_solve` close over (θ: q, d, M, …) become explicit
    arguments (`jax.closure_convert`). The iterations run on them with `stop_gradient` (they are
    never differentiated), and a `jax.custom_jvp` attaches the derivative to their root; reverse
    mode transposes its linear tangent, so the adjoint solve is the transpose of the structured
    one. Second derivatives are exact too (`_root_jvp`), inside `lax.scan` as well. With
    `chord`, the iterations use `newton_root`'s `approximate_inverse`, whose own arguments must
    carry no derivative (the caller stops them). The starting point gets no derivative."""
    x0 = lax.stop_gradient(initial_guess)
    residual_fn, residual_consts = jax.closure_convert(residual, x0)
    solve_fn, solve_consts = jax.closure_convert(jacobian_solve, x0, x0)
    fixed_residual = lax.stop_gradient(tuple(residual_consts))
    fixed_solve = lax.stop_gradient(tuple(solve_consts))
    x, aux = solve(
        lambda x: residual_fn(x, *fixed_residual),
        x0,
        lambda x, r: solve_fn(x, r, *fixed_solve),
    )
    return _root(residual_fn, solve_fn, x, tuple(residual_consts), tuple(solve_consts)), aux


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _root(residual_fn, solve_fn, x, residual_consts, solve_consts):
    """x, the root of residual_fn(·, *residual_consts), with its implicit-function derivative."""
    return x


@_root.defjvp
def _root_jvp(residual_fn, solve_fn, primals, tangents):
    x, residual_consts, solve_consts = primals
    _, residual_tangents, _ = tangents
    # x is the iterations' output and carries no derivative of its own. For second derivatives
    # (a Hessian, a jvp of a gradient) this rule is itself differentiated, and must then see x
    # depend on θ. Inside `lax.scan` (every simulation) JAX differentiates it with any nested
    # custom_jvp rule dropped (partial evaluation keeps only primal functions), so the
    # dependence is written with plain operations: one Newton step G(x, θ) = x − J⁻¹ r(x, θ) from
    # the root. Its value is x (r(x) ≈ 0; added as G − stop_gradient(G), exactly 0), and since
    # ∂G/∂x = 0 at a root, its derivative is dx*/dθ: first and second derivatives of the root
    # are exact (third ones would need a second step). Without it, second derivatives through
    # a simulation came out wrong, silently (`tests/test_newton.py`).
    newton = x - solve_fn(x, residual_fn(x, *residual_consts), *solve_consts)
    x = x + (newton - lax.stop_gradient(newton))
    # ∂r/∂θ dθ at the root, then −J⁻¹ of it; J's own dependence on θ is second order.
    _, dr = jax.jvp(lambda consts: residual_fn(x, *consts), (residual_consts,), (residual_tangents,))
    return x, -solve_fn(x, dr, *solve_consts)
