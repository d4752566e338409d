"""The optax loop shared by parameter fitting and trajectory optimisation."""

import functools

import jax
import jax.numpy as jnp
import optax

from ._jit import filter_jit


@functools.cache
def named_optimizer(name: str, learning_rate: float) -> optax.GradientTransformation:
    """`optax.lbfgs()` or `optax.adam(learning_rate)` by name.

    Cached so that repeated runs reuse the same object, and hence the compiled iteration.
    """
    if name == "lbfgs":
        return optax.lbfgs()
    if name == "adam":
        return optax.adam(learning_rate)
    raise ValueError(
        f'optimizer must be "levenberg_marquardt", "lbfgs", "adam" or an optax transformation; got {name!r}'
    )


@filter_jit
def iterate(loss, optimizer: optax.GradientTransformation, z, state):
    """One optimiser step on `loss(z)`: the new iterate, state, and the loss at the old iterate.

    `loss` is a pytree-callable (e.g. a bound method of an `eqx.Module`), so new data in it
    does not recompile. optax mixes int32 and int64 counters, which strict dtype promotion
    rejects, so the step is traced under standard promotion.
    """
    with jax.numpy_dtype_promotion("standard"):
        if optax.tree.get(state, "value") is None:  # optimisers without a line search
            value, grad = jax.value_and_grad(loss)(z)
        else:  # L-BFGS keeps the value and gradient of the accepted line-search point
            value, grad = optax.value_and_grad_from_state(loss)(z, state=state)
        updates, state = optimizer.update(grad, state, z, value=value, grad=grad, value_fn=loss)
        return optax.apply_updates(z, updates), state, value


def strongly_typed(tree):
    """optax initialises some scalars weakly typed and updates them strongly typed; without
    this the second iteration would compile `iterate` again."""
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=x.dtype), tree)


def minimise(
    loss, z, optimizer: optax.GradientTransformation, num_iterations: int, tolerance: float, on_value=lambda v: None
):
    """Run `optimizer` on `loss` from z for at most `num_iterations` steps.

    Stops once a step changes the loss by at most `tolerance` × loss. `on_value` is called with
    the loss at each iterate (`fit`'s progress).

    **Returns:** `(z, history, converged)`: the last iterate, the loss at each iterate before
    it (a list of floats), and whether the tolerance was met.
    """
    with jax.numpy_dtype_promotion("standard"):
        state = strongly_typed(optimizer.init(z))
    history = []
    for _ in range(num_iterations):
        z, state, value = iterate(loss, optimizer, z, state)
        history.append(float(value))
        on_value(history[-1])
        if len(history) > 1 and abs(history[-2] - history[-1]) <= tolerance * abs(history[-2]):
            return z, history, True
    return z, history, False
