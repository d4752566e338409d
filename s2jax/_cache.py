"""JAX's persistent compilation cache for s2jax: one call, one folder per user.

A compiled program (a simulation, its gradient, a control solve) is written to disk and read back
by later processes instead of compiled again. Measured in benchmarks/compile_cache.py.
"""

import os
import pathlib

import jax


def default_cache_dir() -> pathlib.Path:
    """`$S2JAX_CACHE_DIR`, else `$XDG_CACHE_HOME/s2jax/jax`, else `~/.cache/s2jax/jax`."""
    if os.environ.get("S2JAX_CACHE_DIR"):
        return pathlib.Path(os.environ["S2JAX_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "s2jax" / "jax"


def enable_compilation_cache(path: str | os.PathLike | None = None, *, min_compile_time: float = 0.0) -> pathlib.Path:
    """Turn on JAX's persistent compilation cache (for every JAX program of this process).

    Programs that take longer than `min_compile_time` seconds to compile are stored in `path`
    and, in a later process, loaded instead of compiled (the README example's first gradient
    and a control example's first solve: see docs/performance.md). The default stores every
    program: a first call of s2jax also compiles ~100 small ones (~10 KB each, a few seconds
    in all), which JAX's default threshold of 1 s would leave out. An entry is keyed by the
    program, the compile options, the XLA flags and the jax/jaxlib versions, so a stale one is
    never used. `python -m s2jax` and the notebooks call this; a library never turns it on by
    itself. To clear the cache, delete the folder (`shutil.rmtree(path)`); nothing else refers
    to it. It grows by roughly 0.1–5 MB per program.

    **Arguments:**

    - `path`: the folder; default `default_cache_dir()` (`$S2JAX_CACHE_DIR`, else
      `$XDG_CACHE_HOME/s2jax/jax`, else `~/.cache/s2jax/jax`).
    - `min_compile_time`: programs that compile faster are not stored (JAX's
      `jax_persistent_cache_min_compile_time_secs`).

    **Returns:** the folder, created if missing.
    """
    folder = pathlib.Path(path) if path is not None else default_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time))
    return folder
