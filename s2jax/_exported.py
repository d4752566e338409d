"""Programs kept with their tracing: s2jax's own compiled calls exported (`jax.export`) to disk.

JAX's persistent compilation cache skips XLA's compile in a later process, but not the tracing
and lowering that find the program: Python runs every line of the solver again to build the
jaxpr whose HLO is the cache's key. For the swing-up of `python -m s2jax control 1` that was a
third of a second run (its solve 1.4 s, of which 0.1 s running; docs/performance.md, "Compile
once"). Within `exported_programs(folder)`, an outermost call of a function compiled by
`_jit.filter_jit` (the control and fitting programs) is exported once (`jax.export`), its
StableHLO written to `folder`, and a later process calls the stored program: no tracing of the
solver, one small lowering, and XLA's compile loaded from the persistent cache as before.

**Only for s2jax's own code.** A stored program is found again by a key of what tracing reads:
the function, and the static arguments by value (`_describe`: numbers, strings, arrays by their
bytes, functions by their code, defaults, closures and the globals they read, as `_by_value`
compares costs), the shapes and dtypes of the array arguments, a digest of s2jax's source files,
the versions of jax and jaxlib, the platform, `XLA_FLAGS`, the compiler options, the x64 flag and
the `tag` of the context. It does not follow code that a function reaches through an attribute
of a module (`helpers.cost(q)`), nor what a Python callback computes: for a user's script, whose
helpers change between runs, a stale program could be called. So only the command line
(`python -m s2jax`, tagged with its command) opens the context, whose programs are s2jax's
source; a library call never does. A program that is not stored (one holding a host
callback, or spanning several devices) is marked so and runs as usual; a file that cannot be read
is exported again.
"""

import contextlib
import dataclasses
import functools
import hashlib
import importlib.util
import os
import pathlib
import pickle
import re
import threading
import types

import equinox as eqx
import jax
import jax.tree_util as jtu
import jaxlib
import numpy as np

from ._by_value import FunctionByValue, _Identity, _key as snapshot

_FORMAT = 1  # of the stored files; a file of another format is ignored and written again
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_STATE = threading.local()


@contextlib.contextmanager
def exported_programs(folder: str | os.PathLike, tag: str = ""):
    """Within it, `filter_jit`'s outermost calls go through programs stored in `folder` (created
    if missing), keyed with `tag` among the rest (module docstring). Without the `flatbuffers`
    package (`jax.export`'s serialisation), or where `folder` cannot be made, it does nothing."""
    folder = pathlib.Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # a cache folder that cannot be written (read-only, a file in the way): none
        folder = None
    if folder is None or importlib.util.find_spec("flatbuffers") is None:
        yield None
        return
    before = getattr(_STATE, "context", None)
    _STATE.context = (folder, tag)
    try:
        yield folder
    finally:
        _STATE.context = before


def active() -> bool:
    """Whether an `exported_programs` context is open in this thread."""
    return getattr(_STATE, "context", None) is not None


def call(fun, options: dict, args: tuple, kwargs: dict):
    """`fun(*args, **kwargs)` by its stored program (exported and stored first if there is none),
    compiled with `options`; `NotImplemented` where it cannot be exported (the caller then runs
    `fun` as usual)."""
    folder, tag = _STATE.context
    dynamic, static = eqx.partition((args, kwargs), eqx.is_array)
    leaves, in_tree = jtu.tree_flatten(dynamic)
    avals = tuple(jax.ShapeDtypeStruct(np.shape(x), x.dtype, weak_type=jax.typeof(x).weak_type) for x in leaves)
    key = _key(fun, options, tag, static, in_tree, avals)
    path = folder / f"{key}.program"
    program = _PROGRAMS.get(path)
    if program is None:
        program = _load(path, options)
        if program is None:
            program = _export(fun, options, path, static, in_tree, avals)
        _PROGRAMS[path] = program
    if program is NotImplemented:
        return NotImplemented
    compiled, out_tree = program
    return jtu.tree_unflatten(out_tree, compiled(*leaves))


_PROGRAMS: dict = {}  # file → (compiled call, output structure) or NotImplemented, this process's


def _export(fun, options, path: pathlib.Path, static, in_tree, avals):
    """Trace and export `fun` for these arguments, store it at `path` and return its call;
    `NotImplemented`, stored too, where it cannot be exported (later processes then trace it once,
    as usual, not twice)."""
    skeleton = []

    def flat(*leaves):
        args, kwargs = eqx.combine(jtu.tree_unflatten(in_tree, leaves), static)
        out = fun(*args, **kwargs)
        out_leaves = jtu.tree_leaves(out)
        if not all(eqx.is_array(x) for x in out_leaves):  # `filter_jit` returns these as they are
            raise TypeError("an output that is not an array")
        skeleton.append(jtu.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), out))
        return out_leaves

    try:
        exported = jax.export.export(jax.jit(flat))(*avals)
        if exported.nr_devices != 1:  # a program over a mesh (`solve_many` on several devices): as usual
            raise ValueError(f"a program for {exported.nr_devices} devices")
        serialized = exported.serialize()
        blob = pickle.dumps({"format": _FORMAT, "program": serialized, "skeleton": skeleton[0]})
        # Called as read back, here too: the stored form keeps no weak types, and the outputs (the
        # arguments of a next program, part of its key) must have the same types in every process.
        exported = jax.export.deserialize(serialized)
    except Exception:  # a host callback, several devices; an output that is not an array or cannot be pickled
        exported, blob = None, pickle.dumps({"format": _FORMAT, "program": None})
    from .io import atomic_write  # not at import: io imports the public API

    try:
        with atomic_write(path) as file:
            file.write(blob)
    except OSError:
        pass  # a folder that cannot be written: this process still uses the program
    return NotImplemented if exported is None else _compiled(exported, skeleton[0], options)


def _load(path: pathlib.Path, options):
    """The call of the program stored at `path` (`NotImplemented` if stored as not exportable);
    None if there is none, or it cannot be read (then it is exported and written again)."""
    try:
        stored = pickle.loads(path.read_bytes())
        if stored["format"] != _FORMAT:
            return None
        if stored["program"] is None:
            return NotImplemented
        exported = jax.export.deserialize(stored["program"])
        skeleton = stored["skeleton"]
    except Exception:  # missing, truncated, of another version
        return None
    return _compiled(exported, skeleton, options)


def _compiled(exported, skeleton, options):
    # Every argument on the default device, committed or not: without the shardings given, an
    # argument committed there (a previous solve's controls) would lower and compile the program again.
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    call = jax.jit(exported.call, in_shardings=(device,) * len(exported.in_avals), compiler_options=options or None)
    return call, jtu.tree_structure(skeleton)


def _key(fun, options, tag, static, in_tree, avals) -> str:
    parts = (
        _FORMAT, tag, _source_digest(), jax.__version__, jaxlib.__version__, jax.default_backend(),
        str(jax.devices()[0].device_kind), os.environ.get("XLA_FLAGS", ""), sorted(options.items()),
        bool(jax.config.jax_enable_x64), _describe(fun), _describe(static), _ADDRESS.sub("", str(in_tree)),
        tuple((a.shape, str(a.dtype), a.weak_type) for a in avals),
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()


@functools.cache
def _source_digest() -> str:
    """The SHA-256 of s2jax's source files (every `.py` of the package, in name order)."""
    digest = hashlib.sha256()
    root = pathlib.Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _describe(x, depth: int = 0) -> str:
    """What tracing reads from `x`, as a string that is the same in every process: `_by_value`'s
    snapshot (numbers, strings, arrays by their bytes, functions by their code, defaults, closure
    and the globals they read), rendered with digests; dataclasses (equinox Modules) field by
    field; anything else by its type and `repr` without memory addresses."""
    if depth > 32:
        return "…"
    if isinstance(x, FunctionByValue):
        return _describe(x.fn, depth + 1)
    if isinstance(x, functools.partial):
        return f"partial({_describe((x.func, x.args, x.keywords), depth + 1)})"
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        fields = ",".join(f"{f.name}={_describe(getattr(x, f.name, None), depth + 1)}" for f in dataclasses.fields(x))
        return f"{type(x).__module__}.{type(x).__qualname__}({fields})"
    return _render(snapshot(x), depth)


def _render(key, depth: int) -> str:
    if isinstance(key, _Identity):  # an object `_by_value` keeps by identity: described here
        obj = key.obj
        if dataclasses.is_dataclass(obj) or isinstance(obj, (FunctionByValue, functools.partial)):
            return _describe(obj, depth + 1)
        if isinstance(obj, type):
            return f"{obj.__module__}.{obj.__qualname__}"
        if isinstance(obj, types.FunctionType):  # beyond `_by_value`'s depth: its code, not what it reads
            return f"{obj.__module__}.{obj.__qualname__}:{_code(obj.__code__)}"
        if isinstance(obj, (set, frozenset)):  # in an order that does not depend on string hashing
            return "{" + ",".join(sorted(_describe(item, depth + 1) for item in obj)) + "}"
        return f"{type(obj).__module__}.{type(obj).__qualname__}:{_ADDRESS.sub('', repr(obj))}"
    if isinstance(key, tuple):
        return "(" + ",".join(_render(part, depth + 1) for part in key) + ")"
    if isinstance(key, bytes):
        return hashlib.sha256(key).hexdigest()
    if isinstance(key, types.CodeType):
        return _code(key)
    return repr(key)


def _code(code: types.CodeType) -> str:
    consts = tuple(_code(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts)
    return hashlib.sha256(repr((code.co_code, consts, code.co_names)).encode()).hexdigest()

