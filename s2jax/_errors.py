"""Errors raised from inside compiled computations, in a way compilation cannot remove."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax import lax


class SimulationError(RuntimeError):
    """A simulation, or its gradient, could not be computed as asked (`throw=True`).

    Raised as it is when `simulate` runs eagerly. Inside `jax.jit`, `jax.vmap` or `jax.grad`
    the check runs on the host during the computation, and JAX re-raises the error as a
    `jax.errors.JaxRuntimeError` whose message ends with this one.
    """


def error_if(tree, check: Callable[..., None], *operands):
    """`tree`, after `check(*operands)` has run on the host (it raises to report an error).

    Under `jax.vmap` the host sees the whole batch (`vmap_method="broadcast_all"`), so a
    message can name the batch index. Every leaf of `tree` is selected on the callback's answer
    (which is always "fine": the callback raises otherwise), so compilation cannot remove the
    check as dead code: an unused callback result, or one tied to the outputs only by an
    optimisation barrier, is deleted by XLA. The operands are not differentiated.
    """
    operands = lax.stop_gradient(operands)
    shape = jnp.shape(operands[0])  # the answer has the shape of the first operand

    def host(*operands):
        check(*operands)
        return np.ones(np.shape(operands[0]), np.bool_)

    fine = jax.pure_callback(host, jax.ShapeDtypeStruct(shape, jnp.bool_), *operands, vmap_method="broadcast_all")
    return jtu.tree_map(lambda x: jnp.where(fine, x, _poison(x)), tree)


def _poison(x):
    """What an output would be replaced with if the check could fail: NaN, or the largest int."""
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.full_like(x, jnp.nan)
    return jnp.full_like(x, jnp.iinfo(x.dtype).max)
