"""Files: written atomically (a reader never sees a half-written file, and a failed write
leaves the previous file as it was) with the permissions of an ordinary `open(path, "w")`, and a
`Solution` saved to and loaded from a plain `.npz` (`save_solution`, `load_solution`)."""

import contextlib
import glob
import json
import os
import pathlib
import re
import socket
import tempfile
import zipfile
import zlib
from typing import Any, NamedTuple

import jax
import jax.tree_util as jtu
import numpy as np

from ._results import RESULTS, _names
from ._solution import Solution


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike):
    """Open a temporary file beside `path` for binary writing; on success, rename it to `path`.

    The temporary file lives in the same folder, so the final `os.replace` is a rename within
    one file system, which POSIX makes atomic. If the block raises, `path` keeps its previous
    content and the temporary file is removed. A process killed mid-write cannot remove it: it
    stays, named `.<name>.<random>.<pid>@<host>.tmp`, never under `path`'s own name, and the
    next write of the same `path` removes it (`_remove_stale_temporaries`: those whose writer,
    on this host, is no longer running). An `OSError` of the write names `path`, not the
    temporary file. The file gets the permissions that `open(path, "w")` gives a new file,
    0o666 less the umask (the temporary file is created 0o600, readable by its owner only).

    **Arguments:** `path`: the file to write.

    **Yields:** a file object open for binary writing.
    """
    path = pathlib.Path(path)
    _remove_stale_temporaries(path)
    writer = f"{os.getpid()}@{socket.gethostname()}"  # at each write: a forked child is another writer
    try:
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".{writer}.tmp")
    except OSError as error:
        raise _naming_target(error, path) from None
    try:
        with os.fdopen(handle, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
        if isinstance(error, OSError) and error.errno is not None and error.filename in (None, temporary):
            raise _naming_target(error, path) from None
        raise


def _umask(status: str | os.PathLike = "/proc/self/status") -> int:
    """The umask of this process.

    Read from `status` (Linux's `/proc/self/status` has it since 4.7), which changes nothing;
    elsewhere set and restored with `os.umask`, the only portable way, in between which a file
    created by another thread gets the umask 0o077: fewer permissions, never more.
    """
    with contextlib.suppress(OSError, ValueError):
        with open(status) as lines:
            for line in lines:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def _naming_target(error: OSError, path: pathlib.Path) -> OSError:
    """`error` (same type and errno) about `path`, where it named the temporary file or nothing."""
    return type(error)(error.errno, error.strerror, str(path))


def _remove_stale_temporaries(path: pathlib.Path) -> None:
    """Remove the temporary files of earlier writes of `path` whose writer was killed.

    A temporary file names its writer (`.<name>.<random>.<pid>@<host>.tmp`); it is stale where
    that host is this one and no process `pid` runs. Another host's, a live writer's, and those
    of other files are left alone, as are files that vanish meanwhile (a concurrent clean-up).
    """
    if os.name != "posix":  # `os.kill(pid, 0)` probes a process only on POSIX
        return
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.(\d+)@(.+)\.tmp")
    with contextlib.suppress(OSError):  # an unreadable folder: the write itself will say why
        for candidate in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
            match = pattern.fullmatch(candidate.name)
            if match and match[2] == socket.gethostname() and not _running(int(match[1])):
                with contextlib.suppress(FileNotFoundError):
                    candidate.unlink()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


FORMAT = "s2jax.Solution/1"

_STRUCTURE = "params_structure"
"""The array of a file of `save_solution` that records the structure of the params; files
written before it existed lack it (their params load flat-keyed), and readers that predate it
ignore it, so the format stays `s2jax.Solution/1`."""

_PYTHON_SCALARS = {type_.__name__: type_ for type_ in (bool, int, float, complex, str)}
"""The Python types of leaves that `load_solution` gives back as such, by their kind (name)."""

_STORED_DTYPE_KINDS = "biufcU"
"""Booleans, integers, floats, complex numbers and strings: what an `.npz` holds bit for bit
without pickles (`load_solution` reads with `allow_pickle=False`)."""


class LoadedSolution(NamedTuple):
    """What `load_solution` returns: a tuple, so `sol, params, metadata = load_solution(path)`
    unpacks it as well.

    **Fields:**

    - `solution`: the `Solution`, numpy arrays bit for bit as saved.
    - `params`: the params, in the structure they were saved with (see `load_solution`).
    - `metadata`: the metadata dict, with `"s2jax_version"` (of the writer) and `"integrator"`
      (if saved) added.
    """

    solution: Solution
    params: Any
    metadata: dict


def _key_name(key) -> str:
    for attribute in ("key", "name", "idx"):
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


def _named_leaves(params) -> list[tuple[str, Any]]:
    """The leaves of `params` with their names (`params.<key path>`); a `ValueError` where two
    leaves get one name."""
    named = [
        (".".join(["params", *(_key_name(k) for k in path)]), leaf)
        for path, leaf in jtu.tree_flatten_with_path(params)[0]
    ]
    seen, repeated = set(), set()
    for name, _ in named:
        (repeated if name in seen else seen).add(name)
    if repeated:
        raise ValueError(
            f"several leaves of params are named {sorted(repeated)} (a key with a dot in it, or a key "
            "that spells an index); rename one, so that each leaf has a name of its own"
        )
    return named


def flatten_params(params) -> dict[str, np.ndarray]:
    """The leaves of a params PyTree by readable key path: `{"params.masses": array, …}`.

    A dict key, an attribute name or a sequence index each make one dotted component
    (`params.links.0.length`); a params that is itself one leaf is `params`. Two leaves with one
    name (`{"a.b": 1.0, "a": {"b": 2.0}}`) are a `ValueError`.
    """
    return {name: np.asarray(leaf) for name, leaf in _named_leaves(params)}


def _stored(name: str, leaf) -> tuple[np.ndarray, str]:
    """The array that stores the leaf `name` of params, and its kind: how `load_solution` gives
    it back (see `save_solution`); a `ValueError` naming it where it cannot come back exactly."""
    if type(leaf) in _PYTHON_SCALARS.values():
        kind = type(leaf).__name__
    elif isinstance(leaf, np.generic):
        kind = "numpy scalar"
    elif type(leaf) is np.ndarray or isinstance(leaf, jax.Array):
        kind = "array"
    else:
        kind = None
    if kind is not None:
        array = np.asarray(leaf)
        # an int outside int64 and uint64 becomes an object array; np.asarray drops a string's trailing NULs
        if array.dtype.kind in _STORED_DTYPE_KINDS and not (isinstance(leaf, str) and leaf.endswith("\0")):
            return array, kind
    raise ValueError(
        f"{name} = {repr(leaf)[:80]} (a {type(leaf).__name__}) cannot be saved exactly: a leaf of params must "
        "be a bool, an int (from -2**63 to 2**64 - 1), a float, a complex, a str (not ending in a NUL character), "
        "or a numpy scalar, numpy array or JAX array of booleans, numbers or strings"
    )


def _plain(node) -> bool:
    """Whether `node` is None, a list, a tuple or a dict with string keys: a container that JSON
    can describe (a namedtuple, an OrderedDict or an equinox Module is not)."""
    return node is None or type(node) in (list, tuple) or (type(node) is dict and all(isinstance(k, str) for k in node))


def _structure(params, kinds: dict[str, str]) -> str | None:
    """The JSON record of the structure of `params`, or None where a container in it is not
    `_plain`.

    The record is `null` for None, `{"dict": {key: record, …}}` (keys in their order),
    `{"list": [record, …]}`, `{"tuple": [record, …]}`, and `{"leaf": name, "kind": kind}` for a
    leaf: its array `name` in the file, `kind` (`kinds[name]`) as `_stored` gives it.
    """
    if not jtu.all_leaves(jtu.tree_leaves(params, is_leaf=lambda node: not _plain(node))):
        return None

    def record(node, name):
        if node is None:
            return None
        if type(node) is dict:
            return {"dict": {key: record(child, f"{name}.{key}") for key, child in node.items()}}
        if type(node) in (list, tuple):
            return {type(node).__name__: [record(child, f"{name}.{i}") for i, child in enumerate(node)]}
        return {"leaf": name, "kind": kinds[name]}

    return json.dumps(record(params, "params"), ensure_ascii=False)


def _rebuild(record, leaves: dict[str, np.ndarray]):
    """The params that `record` (of `_structure`) describes, taking their leaves out of `leaves`."""
    if record is None:
        return None
    if "leaf" in record:
        array, kind = leaves.pop(record["leaf"]), record["kind"]
        if kind == "array":
            return array
        if kind == "numpy scalar":
            return array[()]
        return _PYTHON_SCALARS[kind](array.item())
    ((container, children),) = record.items()
    if container == "dict":
        return {key: _rebuild(child, leaves) for key, child in children.items()}
    return {"list": list, "tuple": tuple}[container](_rebuild(child, leaves) for child in children)


def save_solution(path: str | os.PathLike, solution, *, params=None, metadata: dict | None = None) -> None:
    """Write `solution` (with its parameters and anything JSON can hold) as a plain `.npz`.

    The file needs only numpy to read (`numpy.load(path)`; no pickles), with the keys:

    - `t`, `q`, `omega`, `failed_step`: the `Solution`'s arrays, bit for bit;
    - `result`: the result code's name(s), e.g. `"successful"` (an array of names for a batch),
      and `result_code`, the integer code(s) of this version of s2jax;
    - `params.<key path>`: each leaf of `params` as an array (see `flatten_params`): a Python
      float as a 0-d float64 array, a str as a 0-d string array, a tuple of ints as one 0-d
      int64 array per int (`params.connections.0.1`), …;
    - `params_structure` (where params is made of dicts with string keys, lists, tuples and None
      only): a JSON string recording that structure and the Python type of each leaf, from
      which `load_solution` rebuilds params exactly;
    - `s2jax_version`, `format` (`"s2jax.Solution/1"`), `integrator` (when the solution names
      one) and `metadata`, a JSON string (`json.loads(str(data["metadata"]))`).

    A leaf of `params` may be a `bool`, an `int` (from −2⁶³ to 2⁶⁴ − 1), a `float`, a `complex`, a
    `str` (not ending in a NUL character), or a numpy scalar, numpy array or JAX array of booleans,
    numbers or strings. Any other leaf (an object, `bytes`, a bfloat16 array, …) is a `ValueError`
    naming it, as are two leaves with one name (`{"a.b": 1.0, "a": {"b": 2.0}}`), and nothing is
    written. Params in other containers (a namedtuple, an equinox Module, …) are saved leaf by
    leaf without `params_structure`: load them with `params_like`.

    The write is atomic (`atomic_write`): a reader never sees a half-written file; the temporary
    file of a write that was killed is removed by the next save of the same `path`, an error of
    the write names `path`, and the file gets the permissions of `open(path, "w")`.

    **Arguments:**

    - `path`: the file; numpy adds no suffix (write `.npz` yourself).
    - `solution`: a `Solution`, also a batched one (from `jax.vmap` or `simulate_batch`).
    - `params`: the parameters the run used (a PyTree, e.g. a model's `paper_params()`), or None.
    - `metadata`: a JSON-serialisable dict (a description, a seed, …), or None.
    """
    from . import __version__

    if any(isinstance(x, jax.core.Tracer) for x in jtu.tree_leaves((solution, params))):
        raise ValueError("save_solution needs concrete arrays; call it outside jax.jit / jax.vmap")
    try:
        metadata_json = json.dumps({} if metadata is None else metadata, ensure_ascii=False)
    except TypeError as error:
        raise ValueError(f"`metadata` must be JSON-serialisable: {error}") from error
    codes = np.asarray(solution.result._value)
    arrays = {
        "t": np.asarray(solution.t),
        "q": np.asarray(solution.q),
        "omega": np.asarray(solution.omega),
        "failed_step": np.asarray(solution.failed_step),
        "result": _names(codes),
        "result_code": codes,
        "s2jax_version": np.array(__version__),
        "format": np.array(FORMAT),
        "metadata": np.array(metadata_json),
    }
    arrays["integrator"] = np.array(solution.integrator)
    if params is not None:
        kinds = {}
        for name, leaf in _named_leaves(params):
            arrays[name], kinds[name] = _stored(name, leaf)
        structure = _structure(params, kinds)
        if structure is not None:
            arrays[_STRUCTURE] = np.array(structure)
    with atomic_write(path) as file:
        np.savez_compressed(file, **arrays)


def load_solution(path: str | os.PathLike, *, params_like=None) -> LoadedSolution:
    """Read a file of `save_solution`.

    **Arguments:**

    - `path`: the `.npz` file.
    - `params_like`: optional, a PyTree of the structure of the saved params (e.g. the
      model's `paper_params()`): the loaded leaves, numpy arrays, are put into that structure.
      Needed only for a file without `params_structure` (see below).

    **Returns:** a `LoadedSolution` `(solution, params, metadata)`: the `Solution` (numpy arrays,
    bit for bit as saved; the result code looked up by name, so that it survives a reordering of
    `RESULTS`); the params; the metadata dict, with `"s2jax_version"` (of the writer) and
    `"integrator"` (if saved) added.

    The params come back as saved: the same dicts (keys in their order), lists, tuples and
    None; each leaf of the type it was saved as, a Python `bool`, `int`, `float`, `complex` or
    `str`, a numpy scalar, or a numpy array of the same dtype, shape and bits (a JAX array comes
    back as a numpy array). A file without `params_structure` (params in another container, or
    a file written before s2jax recorded it) gives them flat-keyed, `{"params.<key path>": array}`
    (`{}` where none were saved); with `params_like`, any file gives them in its structure.

    **Raises:** `ValueError`, naming the file and what is wrong with it, for a file that is not
    one of `save_solution` or is damaged (truncated, not an `.npz`, a corrupt or missing array,
    metadata that is not a JSON object, a params structure that does not match the params);
    `FileNotFoundError` (an `OSError`) where it cannot be opened.
    """
    arrays = _read(path)
    unknown = sorted({str(n) for n in np.unique(arrays["result"])} - set(RESULTS._name_to_item))
    if unknown:
        raise ValueError(f"{path}: result code(s) {unknown} are not codes of this version of s2jax")
    index = {name: int(item._value) for name, item in RESULTS._name_to_item.items()}
    codes = np.vectorize(index.__getitem__, otypes=[np.int32])(arrays["result"])
    result = type(RESULTS.successful)(codes, RESULTS)  # equinox's EnumerationItem
    fields = {"t": arrays["t"], "q": arrays["q"], "omega": arrays["omega"], "result": result,
              "failed_step": arrays["failed_step"]}
    fields["integrator"] = str(arrays["integrator"]) if "integrator" in arrays else "unknown"
    solution = Solution(**fields)
    params = {key: value for key, value in arrays.items() if key == "params" or key.startswith("params.")}
    if params_like is not None:
        expected = list(flatten_params(params_like))
        if sorted(expected) != sorted(params):
            raise ValueError(f"the saved params {sorted(params)} do not match params_like's {sorted(expected)}")
        params = jtu.tree_unflatten(jtu.tree_structure(params_like), [params[name] for name in expected])
    elif _STRUCTURE in arrays:
        params = _params(path, arrays[_STRUCTURE], params)
    metadata = _metadata(path, arrays["metadata"])
    metadata["s2jax_version"] = str(arrays["s2jax_version"])
    if "integrator" in arrays:
        metadata["integrator"] = str(arrays["integrator"])
    return LoadedSolution(solution, params, metadata)


_SAVED = ("t", "q", "omega", "failed_step", "result", "s2jax_version", "metadata")
"""The arrays that every file of `save_solution` holds, besides `format`."""


def _read(path) -> dict[str, np.ndarray]:
    """The arrays of a file of `save_solution`, or one `ValueError` naming `path` and what is wrong."""
    with open(path, "rb") as file:  # a file that cannot be opened raises its own OSError
        if not zipfile.is_zipfile(file):
            raise ValueError(
                f"{path} is not a file of s2jax.io.save_solution: not an .npz (zip) archive (truncated, "
                "or another kind of file)"
            )
    try:
        with np.load(path, allow_pickle=False) as data:
            saved_format = str(data["format"]) if "format" in data.files else None
            arrays = {key: data[key] for key in data.files} if saved_format == FORMAT else None
    except (ValueError, EOFError, zipfile.BadZipFile, zlib.error) as error:
        # a corrupt member (bad CRC, bad compressed data, a broken .npy header), or a pickled array
        raise ValueError(f"{path} is damaged: {error}") from None
    if arrays is None:
        raise ValueError(f"{path} is not a file of s2jax.io.save_solution (no format = {FORMAT!r})")
    missing = [key for key in _SAVED if key not in arrays]
    if missing:
        raise ValueError(f"{path} is damaged: it lacks {missing} (it holds {sorted(arrays)})")
    return arrays


def _metadata(path, saved: np.ndarray) -> dict:
    try:
        metadata = json.loads(str(saved))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is damaged: its metadata is not valid JSON ({error})") from None
    if not isinstance(metadata, dict):
        raise ValueError(f"{path} is damaged: its metadata is not a JSON object: {str(saved)[:80]!r}")
    return metadata


def _params(path, saved: np.ndarray, leaves: dict[str, np.ndarray]):
    """The params that the record `saved` (of `_structure`) describes, built from `leaves`."""
    leaves = dict(leaves)
    try:
        params = _rebuild(json.loads(str(saved)), leaves)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        # not JSON (a ValueError), a leaf that the file lacks, an unknown kind or container, a leaf not 0-d
        raise ValueError(
            f"{path} is damaged: its params structure does not describe its params ({type(error).__name__}: {error})"
        ) from None
    if leaves:
        raise ValueError(f"{path} is damaged: its params structure lacks the saved params {sorted(leaves)}")
    return params
