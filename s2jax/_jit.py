"""How s2jax compiles its entry points: `equinox.filter_jit` with XLA options that suit it.

`compiler_options()` turns off the YNNPACK elementwise fusions of XLA's CPU backend (jaxlib ≥ 0.8), which
are slower on the small (…, n, 3) arrays of s2jax, and its MLIR fusion emitters, which compile
slower than the classic ones for the same speed (before jaxlib 0.11), and from jaxlib 0.11 Eigen's
thread pool for small dots; per-compilation options, so they change
nothing else in the user's program (inside a `jax.jit` of their own, they pass them there).
`configure_xla_flags` adds XLA CPU's small-loop threshold `LOOP_BYTES` (8 MiB), an XLA flag only, to
`XLA_FLAGS` at import, so that s2jax's loops run as one compiled function: speed only, CPU only;
`S2JAX_KEEP_XLA_FLAGS=1` leaves `XLA_FLAGS` alone. Why 8 MiB, the XLA pass behind it and the
measurements: docs/performance.md, "How s2jax compiles on CPU".
"""

import functools
import os
import warnings

import equinox as eqx
import jax
import jaxlib
import numpy as np
from jax._src import core as jax_core

from . import _exported

# No YNNPACK fusion types: XLA's own elementwise fusion emitter runs every fusion. And XLA CPU's classic
# (LLVM IR) fusion emitters, not the MLIR ones: the same speed, less compile time (measured in
# docs/performance.md, "How s2jax compiles on CPU").
_CANDIDATES = {"xla_cpu_experimental_ynn_fusion_type": "", "xla_cpu_use_fusion_emitters": False}
# From jaxlib 0.11 (where the classic emitters are gone) XLA CPU runs each of a step's small dots
# on Eigen's thread pool, a hand-off per dot per step: a 16-link chain's VI step 3.5 µs (0.11.2)
# and 7.4 µs (0.12.0.1) with the pool, 2.2 and 2.0 µs without; on 0.10.2 the pool costs nothing
# (2.0 µs with it, 2.2 without), so it stays on there. Measured ad hoc, docs/performance.md ("Newer JAX").
JAXLIB_VERSION = tuple(int(part) for part in jaxlib.__version__.split(".")[:2])
"""(major, minor) of the installed jaxlib: XLA's CPU options differ between versions."""
if JAXLIB_VERSION >= (0, 11):
    _CANDIDATES["xla_cpu_multi_thread_eigen"] = False
# JAX takes compiler options only on a top-level `jax.jit`. Whether a call is made under any
# transformation (`jax.jit`, `jax.grad`, `jax.vmap`, `lax.scan`, …, whose tracers may also hide in
# closures) is known only from JAX's trace state; there is no public query.
_trace_state_clean = getattr(jax_core, "trace_state_clean", None)


def trace_state_clean() -> bool:
    """Whether no JAX transformation is tracing now (a call here is an outermost compilation);
    False where this JAX cannot tell."""
    return _trace_state_clean is not None and _trace_state_clean()


def evaluate_now(fn, *args):
    """`fn(*args)` as concrete arrays, for a jitted `fn` of concrete arguments (a check made
    before compiling): one compiled program where JAX evaluates calls (outside any transformation,
    or under an eager `jax.grad` or `jax.vmap` of other values), and op by op under
    `jax.ensure_compile_time_eval` inside a trace that stages them (a user's `jax.jit` or
    `lax.scan` closing over concrete values), where a call of `fn` would be staged into that
    computation and return tracers.

    Op by op, every operation is a program of its own, traced, lowered and compiled (or loaded
    from the persistent cache) on its first use in a process: ~10 ms apiece, and the form check
    of (2.2) was 34 of them (0.30 s against 0.09 s as one program, in a process whose persistent
    cache holds both; measured on the double pendulum).
    """
    if trace_state_clean() or not isinstance(jax.device_put(np.zeros(())), jax.core.Tracer):
        return fn(*args)
    with jax.ensure_compile_time_eval():
        return fn(*args)


LOOP_BYTES_OPTION = "xla_cpu_small_while_loop_byte_threshold"
LOOP_BYTES = 1 << 23  # 8 MiB: why, see docs/performance.md ("How s2jax compiles on CPU")
_EXTRA_FLAG = "--xla_backend_extra_options="


def _with_loop_option(flags: str) -> str:
    """`flags` (an `XLA_FLAGS` value) with `LOOP_BYTES_OPTION` added to the backend's extra
    options, which XLA reads as one comma-separated `key=value` list; unchanged if it is there."""
    words = flags.split()
    for index, word in enumerate(words):
        if word.startswith(_EXTRA_FLAG):
            if LOOP_BYTES_OPTION in word:
                return flags
            words[index] = f"{word},{LOOP_BYTES_OPTION}={LOOP_BYTES}"
            return " ".join(words)
    return " ".join([*words, f"{_EXTRA_FLAG}{LOOP_BYTES_OPTION}={LOOP_BYTES}"])


def configure_xla_flags() -> bool:
    """Add XLA CPU's small-loop threshold to `XLA_FLAGS` (module docstring), at import.

    **Returns:** whether the option is in effect: added now, or set by the user. False where
    `S2JAX_KEEP_XLA_FLAGS` is set, or where a JAX backend already runs (too late: then a
    warning says how to get the speed back).
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if LOOP_BYTES_OPTION in flags:
        return True
    if os.environ.get("S2JAX_KEEP_XLA_FLAGS"):
        return False
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        warnings.warn(
            "s2jax was imported after JAX started its backends, so it could not set XLA's CPU "
            f"loop threshold ({LOOP_BYTES_OPTION}); with XLA's own (1 kB before jaxlib 0.12) "
            "simulations on CPU run 3-4x slower, and with none (jaxlib 0.12) loops with heavy "
            "steps may run slower. Import "
            "s2jax before running JAX code, or start Python with XLA_FLAGS="
            f"'{_EXTRA_FLAG}{LOOP_BYTES_OPTION}={LOOP_BYTES}'. Set S2JAX_KEEP_XLA_FLAGS=1 to "
            "silence this.",
            stacklevel=3,
        )
        return False
    os.environ["XLA_FLAGS"] = _with_loop_option(flags)
    return True


@functools.cache
def compiler_options() -> dict[str, str | bool]:
    """The XLA compiler options s2jax compiles with: `jax.jit(f, compiler_options=...)`.

    Turns off XLA's YNNPACK elementwise fusions on CPU (several times slower on the small
    (…, n, 3) arrays of s2jax) and its MLIR fusion emitters (slower to compile, no faster to
    run), and from jaxlib 0.11 Eigen's threads for its small dots; other backends ignore them.
    Each option is kept only where this JAX knows it: found once, at the first call, by
    compiling a one-line function with it.
    """
    if _trace_state_clean is None:
        return {}
    options = {}
    for name, value in _CANDIDATES.items():
        try:
            jax.jit(lambda x: x + 1, compiler_options={name: value}).lower(1.0).compile()
        except Exception:  # an older (or newer) jaxlib rejects an option it does not know
            continue
        options[name] = value
    return options


def filter_jit(fun):
    """`equinox.filter_jit(fun)`, compiled with `compiler_options()` when it is the outermost
    compilation.

    Inside a user's `jax.jit` (or `lax.scan`, `jax.checkpoint`, …) JAX refuses compiler
    options, and the outer compilation's options apply; so does `jax.grad`, which stages the
    call. So under any transformation it compiles without them.
    The options are decided at the first call, so that importing s2jax neither starts a
    backend nor compiles anything.
    """
    plain = eqx.filter_jit(fun)
    with_options = None

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        nonlocal with_options
        if not trace_state_clean():
            return plain(*args, **kwargs)
        if with_options is None:
            options = compiler_options()
            with_options = eqx.filter_jit(fun, compiler_options=options) if options else plain
        if _exported.active():
            out = _exported.call(fun, compiler_options(), args, kwargs)
            if out is not NotImplemented:
                return out
        return with_options(*args, **kwargs)

    def cache_size() -> int:
        """How many compilations this function holds (tests check that new values reuse one)."""
        jitted = {id(f): f for f in (plain, with_options) if f is not None}.values()
        return sum(f._cached._cache_size() for f in jitted)

    wrapper.cache_size = cache_size
    return wrapper


def stop_gradients(tree):
    """`tree` with the derivatives of its floating-point arrays stopped (other leaves as they are):
    what an implicit-differentiation rule runs its iterations on."""
    return jax.tree.map(lambda x: jax.lax.stop_gradient(x) if eqx.is_inexact_array(x) else x, tree)
