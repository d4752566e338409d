"""Functions compared by what they compute from, so that rebuilt costs do not recompile.

JAX keys a compiled program by its static arguments, and a Python function is equal only to
itself: a `control.Problem` rebuilt with new lambdas (a notebook cell run again) compiled its
solve again, though nothing had changed. `FunctionByValue` makes two functions equal when
tracing them gives the same program: the same code, and equal defaults, closure values and
globals read. What tracing bakes into the program is read from exactly these.
"""

import types
from collections.abc import Callable

import jax
import numpy as np

# How deep `_key` follows functions called from a function (a helper defined beside a cost,
# redefined by a cell run again); beyond it only identity counts.
_MAX_DEPTH = 4


def _global_names(code: types.CodeType) -> set[str]:
    """The names `code` and the code nested in it (comprehensions, inner lambdas) may read as
    globals (a superset: attribute names are among them, harmless)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


class _Identity:
    """An object without value equality in a key: equal only to itself (held, so that its id
    is not reused while the key lives)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return isinstance(other, _Identity) and self.obj is other.obj

    def __hash__(self):
        return id(self.obj)


def _key(value, depth: int = 0):
    """A hashable snapshot of what tracing reads from `value`, taken now: numbers (by type and
    exact value), strings, code, concrete arrays (dtype, shape and bytes), containers of these,
    functions (their code, defaults, closure values and the globals they read, to `_MAX_DEPTH`);
    anything else (modules, classes, other objects, tracers) by identity."""
    if isinstance(value, (bool, int, str, bytes, types.CodeType, type(None))):
        return (type(value).__name__, value)
    if isinstance(value, float):
        return ("float", value.hex())  # exact: 0.0 and -0.0 differ, a NaN equals itself
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_key(x, depth) for x in value))
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return ("dict", tuple((k, _key(value[k], depth)) for k in sorted(value)))
    if isinstance(value, types.FunctionType) and depth < _MAX_DEPTH:
        fn = value
        closure = tuple(cell.cell_contents for cell in fn.__closure__ or ())
        names = sorted(name for name in _global_names(fn.__code__) if name in fn.__globals__)
        read = tuple((name, fn.__globals__[name]) for name in names)
        inputs = (fn.__defaults__, fn.__kwdefaults__ or {}, closure, dict(read))
        return ("function", fn.__code__, _key(inputs, depth + 1))
    if isinstance(value, np.ndarray) or (isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer)):
        array = np.asarray(value)
        return ("array", str(array.dtype), array.shape, array.tobytes())
    return _Identity(value)


class FunctionByValue:
    """`fn`, callable as `fn`, equal to another `FunctionByValue` whose function had, when each
    was made, the same code and equal defaults, closure values and globals read (`_key`). Not a
    pytree: it is a static leaf, which `jax.jit` and `equinox.filter_jit` compare with `==`.

    The snapshot is taken when it is made (a `Problem` is built), as JAX reads these inputs when
    it traces: a global changed between building a Problem and its first solve is read by that
    trace, as for any function JAX traces. Inputs without value equality (a closure over an
    arbitrary object) compare by identity: never wrongly equal, at worst compiled again."""

    __slots__ = ("fn", "_key", "_hash")

    def __init__(self, fn: Callable):
        self.fn = fn.fn if isinstance(fn, FunctionByValue) else fn
        self._key = _key(self.fn)
        self._hash = hash(self._key)

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __eq__(self, other):
        if not isinstance(other, FunctionByValue):
            return NotImplemented
        return self._hash == other._hash and self._key == other._key

    def __hash__(self):
        return self._hash

    def __repr__(self):
        return repr(self.fn)


def by_value(fn: Callable | None) -> FunctionByValue | None:
    """`FunctionByValue(fn)` for a Python function; anything else (None, a callable object such
    as an `equinox.Module`, which compares by its fields already) unchanged."""
    return FunctionByValue(fn) if isinstance(fn, (types.FunctionType, FunctionByValue)) else fn
