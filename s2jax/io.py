"""Files written atomically: a reader never sees a half-written file, and a failed write
leaves the previous file as it was."""

import contextlib
import os
import pathlib
import tempfile


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike):
    """Open a temporary file beside `path` for binary writing; on success, rename it to `path`.

    The temporary file lives in the same folder, so the final `os.replace` is a rename within
    one file system, which POSIX makes atomic. If the block raises (or the process is killed),
    `path` keeps its previous content and the temporary file is removed (after a kill it
    stays, named `.<name>.*.tmp`, never under `path`'s own name).

    **Arguments:** `path`: the file to write.

    **Yields:** a file object open for binary writing.
    """
    path = pathlib.Path(path)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
        raise
