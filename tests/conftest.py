import jax
import pytest

# float64 is the reference precision of s2jax; promotion rules as strict as diffrax's and
# optimistix's test suites: no implicit dtype promotion, no implicit rank promotion.
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_code():
    """Drop JAX's compiled executables after each test module.

    A worker keeps every executable it compiles; over the whole suite that grew past 5 GB per
    worker, and XLA's CPU compiler then crashed (segfault, abort) at random points in the last
    modules. Modules rarely share executables, so little is recompiled.
    """
    yield
    jax.clear_caches()
