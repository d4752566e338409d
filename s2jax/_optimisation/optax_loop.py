"""The optax loop of every optimisation in s2jax (the shooting solvers of trajectory optimisation,
`s2jax.fit` with an optax optimiser), run inside a compiled program (`lax.while_loop`), so that it
can be jitted, vmapped and differentiated around.
"""

import functools

import jax
import jax.numpy as jnp
import optax
from jax import lax


@functools.cache
def named_optimizer(name: str, learning_rate: float) -> optax.GradientTransformation:
    """`optax.lbfgs()` or `optax.adam(learning_rate)` by name.

    Cached so that repeated fits reuse the same object, and hence the compiled program.
    """
    if name == "lbfgs":
        return optax.lbfgs()
    if name == "adam":
        return optax.adam(learning_rate)
    raise ValueError(
        f'optimizer must be "levenberg_marquardt", "lbfgs", "adam" or an optax transformation; '
        f"got {name!r}"
    )


def optax_minimise(loss, z, optimizer: optax.GradientTransformation, max_steps: int, rtol: float, gtol: float):
    """`optimizer` on `loss` from z, in a `lax.while_loop` (so it can be jitted and vmapped).

    Stops at an iterate where max|∇loss| ≤ gtol, or whose loss is at most rtol·|loss| below
    the previous iterate's. optax mixes int32 and int64 counters, which strict dtype promotion
    rejects, so the loop is traced under standard promotion.

    **Returns:** `(z, values, num_steps, converged)`, values the loss at each iterate.
    """
    with jax.numpy_dtype_promotion("standard"):
        state = jax.tree.map(lambda x: jnp.asarray(x, dtype=x.dtype), optimizer.init(z))
        if optax.tree.get(state, "value") is None:  # optimisers without a line search
            value_and_grad = lambda z, state: jax.value_and_grad(loss)(z)  # noqa: E731
        else:  # L-BFGS keeps the value and gradient of the accepted line-search point
            value_and_grad = lambda z, state: optax.value_and_grad_from_state(loss)(z, state=state)  # noqa: E731

        def cond(carry):
            _, _, k, _, _, done = carry
            return (k < max_steps) & ~done

        def body(carry):
            z, state, k, values, previous, _ = carry
            value, grad = value_and_grad(z, state)
            updates, state = optimizer.update(grad, state, z, value=value, grad=grad, value_fn=loss)
            values = values.at[k].set(value)
            flat_grad = jnp.concatenate([jnp.ravel(g) for g in jax.tree.leaves(grad)])
            small_grad = jnp.max(jnp.abs(flat_grad)) <= gtol
            stalled = (k > 0) & (jnp.abs(previous - value) <= rtol * jnp.abs(previous))
            done = small_grad | stalled
            z = jax.tree.map(lambda old, new: jnp.where(done, old, new), z, optax.apply_updates(z, updates))
            return z, state, k + 1, values, value, done

        dtype = jax.tree.leaves(z)[0].dtype
        values = jnp.full((max_steps,), jnp.nan, dtype)
        carry = (z, state, jnp.array(0), values, jnp.asarray(jnp.inf, dtype), jnp.array(False))
        z, _, steps, values, _, done = lax.while_loop(cond, body, carry)
    return z, values, steps, done
