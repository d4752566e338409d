"""Files: written atomically (a reader never sees a half-written file, and a failed write
leaves the previous file as it was), and a `Solution` saved to and loaded from a plain `.npz`
(`save_solution`, `load_solution`)."""

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
    temporary file.

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
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
        if isinstance(error, OSError) and error.errno is not None and error.filename in (None, temporary):
            raise _naming_target(error, path) from None
        raise


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


def _key_name(key) -> str:
    for attribute in ("key", "name", "idx"):
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


def flatten_params(params) -> dict[str, np.ndarray]:
    """The leaves of a params PyTree by readable key path: `{"params.masses": array, …}`.

    A dict key, an attribute name or a sequence index each make one dotted component
    (`params.links.0.length`); a params that is itself one leaf is `params`.
    """
    flat = {}
    for path, leaf in jtu.tree_flatten_with_path(params)[0]:
        name = ".".join(["params", *(_key_name(k) for k in path)])
        flat[name] = np.asarray(leaf)
    return flat


def save_solution(path: str | os.PathLike, solution, *, params=None, metadata: dict | None = None) -> None:
    """Write `solution` (with its parameters and anything JSON can hold) as a plain `.npz`.

    The file needs only numpy to read (`numpy.load(path)`; no pickles), with the keys:

    - `t`, `q`, `omega`, `failed_step`: the `Solution`'s arrays, bit for bit;
    - `result`: the result code's name(s), e.g. `"successful"` (an array of names for a batch),
      and `result_code`, the integer code(s) of this version of s2jax;
    - `params.<key path>`: each leaf of `params` (see `flatten_params`);
    - `s2jax_version`, `format` (`"s2jax.Solution/1"`), `integrator` (when the solution names
      one) and `metadata`, a JSON string (`json.loads(str(data["metadata"]))`).

    The write is atomic (`atomic_write`): a reader never sees a half-written file; the temporary
    file of a write that was killed is removed by the next save of the same `path`, and an error
    of the write names `path`.

    **Arguments:**

    - `path`: the file; numpy adds no suffix (write `.npz` yourself).
    - `solution`: a `Solution`, also a batched one (from `jax.vmap` or `simulate_batch`).
    - `params`: the parameters the run used (any PyTree of numbers or arrays), or None.
    - `metadata`: a JSON-serialisable dict (a description, a seed, …), or None.
    """
    from . import __version__

    if any(isinstance(x, jax.core.Tracer) for x in jtu.tree_leaves(solution)):
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
        for name, leaf in flatten_params(params).items():
            if leaf.dtype == object:
                raise ValueError(f"{name} is not a number or an array of numbers or strings: {leaf!r}")
            arrays[name] = leaf
    with atomic_write(path) as file:
        np.savez_compressed(file, **arrays)


def load_solution(path: str | os.PathLike, *, params_like=None):
    """Read a file of `save_solution`.

    **Arguments:**

    - `path`: the `.npz` file.
    - `params_like`: optional, a PyTree of the structure of the saved params (e.g. the
      model's `paper_params()`): the loaded leaves are put back into that structure.

    **Returns:** `(solution, params, metadata)`: the `Solution` (numpy arrays, bit for bit as
    saved; the result code looked up by name, so that it survives a reordering of `RESULTS`);
    the params, as `{"params.<key path>": array}` or, with `params_like`, in its structure;
    the metadata dict, with `"s2jax_version"` (of the writer) and `"integrator"` (if saved)
    added.

    **Raises:** `ValueError`, naming the file and what is wrong with it, for a file that is not
    one of `save_solution` or is damaged (truncated, not an `.npz`, a corrupt or missing array,
    metadata that is not a JSON object); `FileNotFoundError` (an `OSError`) where it cannot be
    opened.
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
    metadata = _metadata(path, arrays["metadata"])
    metadata["s2jax_version"] = str(arrays["s2jax_version"])
    if "integrator" in arrays:
        metadata["integrator"] = str(arrays["integrator"])
    return solution, params, metadata


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
