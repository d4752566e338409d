"""s2jax compiles its entry points with `s2.compiler_options()` only at the top level."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax.models import double_spherical_pendulum as model


def _final_q(params):
    q0, omega0 = model.paper_state()
    return s2.simulate(model.lagrangian, q0, omega0, params, dt=0.01, num_steps=50).q[-1]


def test_compiler_options_are_accepted_by_jax_jit():
    options = s2.compiler_options()
    assert isinstance(options, dict)
    # The options must compile (an unknown option raises); `simulate` relies on it.
    out = jax.jit(lambda x: 2.0 * x, compiler_options=options or None)(jnp.arange(3.0))
    np.testing.assert_array_equal(out, [0.0, 2.0, 4.0])


def test_simulate_runs_the_same_eagerly_and_inside_transformations():
    params = {k: jnp.asarray(v) for k, v in model.paper_params().items()}
    eager = _final_q(params)
    # Inside a user's jit, scan or checkpoint JAX refuses compiler options on the inner
    # compilation: simulate must compile without them there, not raise.
    jitted = jax.jit(_final_q)(params)
    scanned = jax.lax.scan(lambda c, _: (c, _final_q(params)), 0.0, length=1)[1][0]
    checkpointed = jax.checkpoint(_final_q)(params)
    # Different fusions round differently; 50 steps keep that at the level of round-off.
    for other in (jitted, scanned, checkpointed):
        np.testing.assert_allclose(other, eager, rtol=0, atol=1e-13)


@pytest.mark.slow
def test_gradients_eager_and_jitted_agree():
    params = {k: jnp.asarray(v) for k, v in model.paper_params().items()}

    def loss(p):
        return _final_q(p)[1, 0]

    eager = jax.grad(loss)(params)
    jitted = jax.jit(jax.grad(loss))(params)
    for key in params:
        np.testing.assert_allclose(jitted[key], eager[key], rtol=1e-10, atol=1e-14)


def test_loop_option_is_merged_into_xla_flags():
    from s2jax._jit import LOOP_BYTES, LOOP_BYTES_OPTION, _with_loop_option

    ours = f"{LOOP_BYTES_OPTION}={LOOP_BYTES}"
    assert _with_loop_option("") == f"--xla_backend_extra_options={ours}"
    assert _with_loop_option("--xla_force_host_platform_device_count=4") == (
        f"--xla_force_host_platform_device_count=4 --xla_backend_extra_options={ours}"
    )
    # XLA reads one extra-options flag, a comma-separated list: ours joins the user's.
    assert _with_loop_option("--xla_backend_extra_options=a=1 --x=2") == f"--xla_backend_extra_options=a=1,{ours} --x=2"
    # A threshold the user chose is theirs.
    mine = f"--xla_backend_extra_options={LOOP_BYTES_OPTION}=5"
    assert _with_loop_option(mine) == mine


_HOISTED_PROBE = """
import warnings, jax
jax.config.update("jax_enable_x64", True)
if {start_backend}:
    jax.numpy.zeros(1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import s2jax
print("warned" if any("loop threshold" in str(w.message) for w in caught) else "quiet")
# Scans whose loops move ~5 kB and ~10 MB: on either side of s2jax's threshold (8 MiB).
for rows in (100, 200_000):
    text = jax.jit(lambda x: jax.lax.scan(lambda c, _: (0.5 * c + 1.0, None), x, length=100)[0]).lower(
        jax.ShapeDtypeStruct((rows, 3), jax.numpy.float64)).compile().as_text()
    print("whole" if "xla_cpu_small_call" in text else "dispatched")
"""


def _probe(start_backend, **env):
    import os
    import subprocess
    import sys

    # The option is the CPU compiler's: probe on CPU whatever accelerator the machine has.
    environment = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "S2JAX_KEEP_XLA_FLAGS")}
    environment |= {"JAX_PLATFORMS": "cpu"} | env
    result = subprocess.run(
        [sys.executable, "-c", _HOISTED_PROBE.format(start_backend=start_backend)],
        env=environment, capture_output=True, text=True, check=True,
    )
    return result.stdout.split()


def test_importing_s2jax_makes_xla_compile_small_loops_whole():
    """XLA's CPU compiler runs a while loop as one function only below a byte threshold, which
    s2jax sets to 8 MiB at import through XLA_FLAGS (`_jit.configure_xla_flags`): checked on the
    compiled program, so that a jaxlib which drops or renames the option fails here. XLA's own
    threshold is 1 kB up to jaxlib 0.11 (both loops dispatched) and none from 0.12 (both
    compiled whole): either way not s2jax's, which compiles the small loop whole and
    dispatches the large one."""
    assert _probe(False) == ["quiet", "whole", "dispatched"]
    xla_default = _probe(False, S2JAX_KEEP_XLA_FLAGS="1")
    assert xla_default[0] == "quiet" and xla_default[1:] in (["dispatched"] * 2, ["whole"] * 2)
    # Too late once a backend runs: a warning, and XLA's default threshold.
    assert _probe(True) == ["warned", *xla_default[1:]]


def test_host_check_runs_only_when_the_graph_says_it_can_fail():
    """`error_if` calls the host inside a `lax.cond`: a successful run pays no host round trip
    (0.12 ms a call on a 2-core CPU), a failing one raises, and under vmap (both branches run)
    the host sees the whole batch."""
    from s2jax._errors import error_if

    calls = []

    def check(codes):
        calls.append(np.asarray(codes).copy())
        if np.any(codes):
            raise s2.SimulationError(f"codes {np.asarray(codes).tolist()}")

    guarded = jax.jit(lambda x, codes: error_if(2.0 * x, codes != 0, check, codes))
    np.testing.assert_array_equal(guarded(jnp.arange(3.0), jnp.asarray(0)), [0.0, 2.0, 4.0])
    assert calls == []
    with pytest.raises(Exception, match="codes 3"):
        jax.block_until_ready(guarded(jnp.arange(3.0), jnp.asarray(3)))
    assert len(calls) == 1
    batched = jax.jit(jax.vmap(lambda x, codes: error_if(2.0 * x, codes != 0, check, codes)))
    with pytest.raises(Exception, match=r"codes \[0, 5\]"):
        jax.block_until_ready(batched(jnp.ones((2, 3)), jnp.asarray([0, 5])))
    # The derivative passes through the check (its operands are not differentiated).
    grad = jax.grad(lambda x: jnp.sum(error_if(x**2, jnp.asarray(False), check, jnp.asarray(0))))(jnp.arange(3.0))
    np.testing.assert_array_equal(grad, [0.0, 2.0, 4.0])
