"""How s2jax compiles its entry points: `equinox.filter_jit` with XLA options that suit it.

The arrays of s2jax are small and shaped (…, n, 3): per body one ℝ³ vector, under `jax.vmap` a
batch axis in front. XLA's CPU backend (jaxlib ≥ 0.8) hands elementwise fusions to YNNPACK,
which on such shapes is several times slower than XLA's own fused loops: measured on a 2-core
AMD EPYC with jaxlib 0.10.2, a batch of 1024 double pendula runs `RungeKutta4` at 3.5 against
0.97 million system-steps per second and `VariationalIntegrator` at 2.2 against 0.57
(`benchmarks/batch_throughput.py`). The option is a per-compilation one, so it changes nothing
else in the user's program.

Where a user wraps s2jax in a `jax.jit` of their own (a loss, a training step), that outer
compilation decides: pass it `compiler_options=s2jax.compiler_options()` for the same effect.
"""

import functools

import equinox as eqx
import jax
from jax._src import core as jax_core

# No YNNPACK fusion types: XLA's own elementwise fusion emitter runs every fusion.
_CANDIDATE = {"xla_cpu_experimental_ynn_fusion_type": ""}
# JAX takes compiler options only on a top-level `jax.jit`. Whether a call is made under any
# transformation (`jax.jit`, `jax.grad`, `jax.vmap`, `lax.scan`, …, whose tracers may also hide in
# closures) is known only from JAX's trace state; there is no public query.
_trace_state_clean = getattr(jax_core, "trace_state_clean", None)


@functools.cache
def compiler_options() -> dict[str, str]:
    """The XLA compiler options s2jax compiles with: `jax.jit(f, compiler_options=...)`.

    Turns off XLA's YNNPACK elementwise fusions on CPU (several times slower on the small
    (…, n, 3) arrays of s2jax; ignored by other backends). Empty where this JAX does not know
    the option. Found once, at the first call, by compiling a one-line function.
    """
    if _trace_state_clean is None:
        return {}
    try:
        jax.jit(lambda x: x + 1, compiler_options=_CANDIDATE).lower(1.0).compile()
    except Exception:  # an older jaxlib rejects the unknown option
        return {}
    return dict(_CANDIDATE)


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
        if _trace_state_clean is None or not _trace_state_clean():
            return plain(*args, **kwargs)
        if with_options is None:
            options = compiler_options()
            with_options = eqx.filter_jit(fun, compiler_options=options) if options else plain
        return with_options(*args, **kwargs)

    def cache_size() -> int:
        """How many compilations this function holds (tests check that new values reuse one)."""
        jitted = {id(f): f for f in (plain, with_options) if f is not None}.values()
        return sum(f._cached._cache_size() for f in jitted)

    wrapper.cache_size = cache_size
    return wrapper
