"""`fit`'s checks of its arguments, made before anything is compiled."""

import math
import numbers
from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._by_value import by_value
from .._optimisation.parameterisation import AbstractParameterisation, Positive
from ._observation import Directions, largest_body


def grid_steps(times, dt) -> np.ndarray:
    try:
        times = np.asarray(times, dtype=float)
    except jax.errors.TracerArrayConversionError:
        raise TypeError("times must be concrete (they fix the program's shapes), not traced") from None
    if times.ndim != 1 or times.size == 0:
        raise ValueError(f"times must have shape (J,) with J ≥ 1; got {times.shape}")
    for j, t in enumerate(times):
        if not np.isfinite(t) or t < 0:
            raise ValueError(f"times[{j}] = {t} is outside the horizon: it must be finite and ≥ 0")
    steps = np.rint(times / dt).astype(int)
    off_grid = np.abs(times / dt - steps) > 1e-6
    if np.any(off_grid):
        j = int(np.argmax(off_grid))
        raise ValueError(f"times[{j}] = {times[j]} is not a multiple of dt = {dt}")
    if np.any(np.diff(steps) <= 0):
        j = int(np.argmax(np.diff(steps) <= 0)) + 1
        raise ValueError(f"times must be strictly increasing; times[{j}] = {times[j]} is not")
    return steps


def count(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an int ≥ {minimum}; got {value!r}")
    return int(value)


def positive(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a finite positive number; got {value!r}")
    return float(value)


def is_concrete(tree) -> bool:
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(tree))


def floats_as_arrays(leaf):
    """A float (or float array) leaf of params as a JAX array, a value of the compiled program; other
    leaves (ints, index lists a model reads with numpy) stay as they are, static."""
    if isinstance(leaf, (float, np.floating)) and not isinstance(leaf, bool):
        return jnp.asarray(leaf)
    if isinstance(leaf, (np.ndarray, jax.Array)) and jnp.issubdtype(leaf.dtype, jnp.floating):
        return jnp.asarray(leaf)
    return leaf


def parameterisations_of(free) -> dict[str, AbstractParameterisation]:
    """`free` as {key: parameterisation}: a sequence of keys means `Positive` for each."""
    if isinstance(free, str):
        free = (free,)
    if isinstance(free, Mapping):
        for key, p in free.items():
            if not isinstance(p, AbstractParameterisation):
                raise TypeError(
                    f"free[{key!r}] must be s2jax.fit.Positive(), Bounded(lower, upper) or Unconstrained(); got {p!r}"
                )
        free = dict(free)
    else:
        keys = tuple(free)
        if len(set(keys)) != len(keys):
            raise ValueError(f"free must name distinct keys of params; got {keys}")
        free = {key: Positive() for key in keys}
    if not free:
        raise ValueError("free must name at least one key of params")
    return free


def observation(bodies, observe, n):
    """The observation function: `Directions(bodies)` by default, else `observe` (compared by value)."""
    if (bodies is None) == (observe is None):
        raise ValueError("give either bodies (their directions are observed) or observe(q, omega, params), not both")
    if observe is None:
        bodies = tuple(int(i) for i in np.atleast_1d(np.asarray(bodies)))
        if not bodies or len(set(bodies)) != len(bodies) or not all(0 <= i < n for i in bodies):
            raise ValueError(f"bodies must be distinct indices of the {n} bodies of q0; got {bodies}")
        return Directions(bodies)
    if not callable(observe):
        raise TypeError(f"observe must be a function observe(q, omega, params) -> array; got {observe!r}")
    largest = largest_body(observe)
    if largest is not None and largest >= n:
        raise ValueError(f"{type(observe).__name__} reads body {largest}, but q0 has {n} bodies")
    return observe if isinstance(observe, eqx.Module) else by_value(observe)
