import gc
import os
import pathlib

import jax
import pytest

from s2jax._jit import JAXLIB_VERSION  # importing s2jax starts no backend: XLA_FLAGS can still change

# float64 is the reference precision of s2jax; promotion rules as strict as diffrax's and
# optimistix's test suites: no implicit dtype promotion, no implicit rank promotion.
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

# The suite checks results, not speed (that is benchmarks/): XLA's CPU backend compiles without
# LLVM's optimisation passes, which halves compile time, most of the suite's time (measured:
# test_hessian_through_the_reversible_adjoint 40.4 -> 21.4 s, 2-core AMD EPYC). Both sides of every
# comparison in a test are compiled alike. S2JAX_TEST_OPTIMISED=1 runs the suite with XLA's
# default optimisation level instead. Set here, before any JAX backend starts (it reads XLA_FLAGS
# once), so the notebooks' kernels and the `python -m s2jax` subprocesses inherit it.
if not os.environ.get("S2JAX_TEST_OPTIMISED") and "xla_backend_optimization_level" not in os.environ.get(
    "XLA_FLAGS", ""
):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0".strip()
# XLA CPU's classic fusion emitters for every program, the tests' own `jax.jit`s included (s2jax's
# entry points compile with them anyway, `s2.compiler_options()`): ~30 % less compile time, the
# same trajectories (measured: a gradient through 300 steps of a 4-link chain, 3.3 -> 2.3 s).
# jaxlib 0.11 has no such flag (the MLIR emitters are XLA CPU's only ones there), and an unknown
# flag in XLA_FLAGS aborts the process when the backend starts: so only before 0.11.
if JAXLIB_VERSION < (0, 11) and "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_cpu_use_fusion_emitters=false".strip()

# JAX's persistent compilation cache: a program compiled by one test worker is read back by the
# other, by a later module after `_release_compiled_code`, by the notebooks' kernels (through the
# environment) and by the next run. `.ci/run` starts from a clean clone, so there it only shares
# work within the run. Set S2JAX_TEST_COMPILATION_CACHE to move it; delete the folder to clear it.
_CACHE = os.environ.setdefault(
    "S2JAX_TEST_COMPILATION_CACHE", str(pathlib.Path(__file__).resolve().parent.parent / ".cache" / "jax-tests")
)
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", _CACHE)
os.environ.setdefault("S2JAX_CACHE_DIR", _CACHE)  # where `python -m s2jax` (tests/test_reproduce.py) puts it
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


# Python's cyclic garbage collector, tuned for tracing: JAX's tracing and differentiation allocate
# millions of short-lived objects, and at Python's default thresholds (700, 10, 10) a worker's
# heap of jaxprs and tracers is walked over and over by full collections (9 during the trace of
# test_hessian_through_the_reversible_adjoint's program). At these thresholds none runs there:
# that trace 5.9 -> 4.7 s (medians of 3, alternating), the fast tier 162 / 154 -> 156 / 145 s
# (two alternating pairs, 2-core AMD EPYC, load 2.0-2.5). Garbage left for the full collection
# is collected after each module (`_release_compiled_code`).
gc.set_threshold(100_000, 50, 1000)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_code():
    """Drop JAX's compiled executables after each test module.

    A worker keeps every executable it compiles; over the whole suite that grew past 5 GB per
    worker, and XLA's CPU compiler then crashed (segfault, abort) at random points in the last
    modules. Modules rarely share executables, so little is recompiled. The module's cyclic
    garbage, left by the raised thresholds above, is collected with them.
    """
    yield
    jax.clear_caches()
    gc.collect()


@pytest.fixture
def compilations():
    """`compilations(run)`: how many programs JAX compiled (or loaded from the persistent cache,
    which reports the same event) while `run()` ran."""

    def count(run) -> int:
        events = []

        def listener(event, duration, **kwargs):
            if event.endswith("backend_compile_duration"):
                events.append(event)

        jax.monitoring.register_event_duration_secs_listener(listener)
        try:
            run()
        finally:
            jax.monitoring.unregister_event_duration_listener(listener)
        return len(events)

    return count


def pytest_collection_modifyitems(items):
    """The notebooks first: each runs one to two minutes in one test, and started last it would
    leave the other worker idle at the end of the suite."""
    items.sort(key=lambda item: not item.nodeid.startswith("tests/test_notebooks.py::test_notebook_runs"))


@pytest.fixture
def built(monkeypatch):
    """The members-last evaluations (`s2jax._members_last.members_last`) that `simulate`'s batching
    rule (`s2jax._member_program`) builds while the test runs, each with its `vmapped` set."""
    from s2jax import _member_program
    from s2jax._members_last import members_last

    made = []

    def recorded(*args, **kwargs):
        made.append(members_last(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(_member_program, "members_last", recorded)
    _member_program._members_last_run.cache_clear()  # built anew, not taken from an earlier test
    return made
