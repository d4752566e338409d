"""What the benchmarks share: medians of repeated runs, machine info, results files, and the
diffrax baseline on the equations of motion (2.9)–(2.11)."""

import json
import os
import pathlib
import platform
import statistics
import tempfile
import time

import diffrax
import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec

import s2jax as s2

# Where results go: benchmarks/results/ (the runs the docs cite, a shared 2-core AMD EPYC), or
# the folder named by S2JAX_BENCHMARK_RESULTS, for runs on another machine that must not
# overwrite those (benchmarks/results/intel_xeon/: a shared 2-core Intel Xeon).
RESULTS = pathlib.Path(os.environ.get("S2JAX_BENCHMARK_RESULTS") or pathlib.Path(__file__).parent / "results")


SEQUENTIAL_THUNKS = "--xla_cpu_enable_concurrency_optimized_scheduler=false"
"""The XLA flag that turns off XLA CPU's concurrency-optimised scheduler (docs/performance.md,
"Calls from Python"): an XLA flag only (a compiler option does not reach it)."""


def use_sequential_thunks() -> None:
    """Add `SEQUENTIAL_THUNKS` to `XLA_FLAGS`: before JAX starts its backends (its first
    computation), which read the flags once."""
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {SEQUENTIAL_THUNKS}".strip()


def jit(fn, **kwargs):
    """`jax.jit` with the XLA options s2jax compiles with (`s2jax.compiler_options()`: no YNNPACK
    fusions, XLA CPU's classic fusion emitters), so that every baseline gets the same compiler as
    the code it is compared with."""
    return jax.jit(fn, compiler_options=s2.compiler_options() or None, **kwargs)


def classical_rk4(field, y0, dt, num_steps):
    """`num_steps` of classical RK4 on y′ = field(y), y a PyTree, in a `lax.scan`: the loop of the
    hand-written baselines (`batch_throughput.py`, `chain_batch.py`). Returns the final y."""

    def step(y, _):
        def along(k, scale):
            return jax.tree_util.tree_map(lambda a, b: a + scale * dt * b, y, k)

        k1 = field(y)
        k2 = field(along(k1, 0.5))
        k3 = field(along(k2, 0.5))
        k4 = field(along(k3, 1.0))

        def combine(a, b1, b2, b3, b4):
            return a + dt / 6 * (b1 + 2 * b2 + 2 * b3 + b4)

        return jax.tree_util.tree_map(combine, y, k1, k2, k3, k4), None

    return jax.lax.scan(step, y0, length=num_steps)[0]


def sharded_batch(fn, chunk=None):
    """`fn(q0, ω0)` of one member over a batch, as `s2.simulate_batch` runs its members: vmapped,
    each device of a one-axis mesh of all devices mapping its own slice (`jax.shard_map`), and with
    `chunk`, `chunk` members at a time (`lax.map` of the vmap; the slice must be a multiple of it).
    Compiled with s2jax's XLA options (`jit`)."""
    mesh = Mesh(np.array(jax.devices()), ("batch",))
    if chunk is None:
        local = jax.vmap(fn)
    else:
        def local(q0, omega0):
            return jax.lax.map(lambda inputs: fn(*inputs), (q0, omega0), batch_size=chunk)
    spec = PartitionSpec("batch")
    return jit(jax.shard_map(local, mesh=mesh, in_specs=(spec, spec), out_specs=spec, check_vma=False))


def batch_last(fn, chunk):
    """`fn` over a batch with the members along the last axis: each device of a one-axis mesh of
    all devices takes its slice of the (B, n, 3) inputs in chunks of `chunk` members, transposes
    each chunk to (n, 3, chunk), calls `fn(q0, ω0)` on it (the hand-written baselines' fields
    take such trailing batch axes) and transposes the final q back. The members then lie along
    the minor axis of every array, where XLA vectorises the elementwise work across them; a
    `vmap` puts them along the major axis, and every operation works on 3-vectors. The slice
    must be a multiple of `chunk`. Compiled with s2jax's XLA options (`jit`)."""
    mesh = Mesh(np.array(jax.devices()), ("batch",))

    def local(q0, omega0):
        def one(inputs):
            q, omega = (jax.numpy.moveaxis(x, 0, -1) for x in inputs)
            return jax.numpy.moveaxis(fn(q, omega), -1, 0)

        chunks = [x.reshape(x.shape[0] // chunk, chunk, *x.shape[1:]) for x in (q0, omega0)]
        final = jax.lax.map(one, tuple(chunks))
        return final.reshape(-1, *final.shape[2:])

    spec = PartitionSpec("batch")
    return jit(jax.shard_map(local, mesh=mesh, in_specs=(spec, spec), out_specs=spec, check_vma=False))


def timed(call) -> float:
    """Wall time of one `call()`, blocking on its outputs."""
    start = time.perf_counter()
    jax.block_until_ready(call())
    return time.perf_counter() - start


def median_time(fn, repeats: int = 7) -> tuple[float, list[float]]:
    """Median wall time of `fn()` (blocking on its outputs) over `repeats` runs, after a warm-up."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def interleaved_medians(fns: dict, repeats: int = 9) -> dict[str, tuple[float, list[float]]]:
    """`median_time` for several functions at once, their runs interleaved round-robin, so that
    the load of other processes on a shared machine falls on all of them alike.

    **Returns:** name → (median wall time, all times).
    """
    for fn in fns.values():
        jax.block_until_ready(fn())
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn())
            times[name].append(time.perf_counter() - start)
    return {name: (statistics.median(ts), ts) for name, ts in times.items()}


def _cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cores_used": len(os.sched_getaffinity(0)),
        "load_average": os.getloadavg(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        # s2jax adds its XLA CPU loop threshold here at import (s2jax/_jit.py).
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def write(name: str, payload: dict, *, quick: bool = False) -> pathlib.Path:
    """Write `payload` and `machine()` to results/<name>.json.

    A quick run (`--quick`) only checks that a benchmark works: its numbers are not results,
    so they go to a new temporary folder and never over a recorded file.
    """
    folder = pathlib.Path(tempfile.mkdtemp(prefix=f"s2jax-{name}-quick-")) if quick else RESULTS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2))
    return path


def diffrax_solve(
    system: s2.AbstractSystem,
    args: s2.SystemArgs,
    y0,
    t1,
    solver: diffrax.AbstractSolver,
    *,
    rtol,
    atol,
    dt0,
    max_steps: int,
    saveat: diffrax.SaveAt = diffrax.SaveAt(t1=True),
    adjoint: diffrax.AbstractAdjoint = diffrax.RecursiveCheckpointAdjoint(),
    throw: bool = True,
    stepsize_controller: diffrax.AbstractStepSizeController | None = None,
) -> diffrax.Solution:
    """The diffrax baseline: `diffeqsolve` of (q̇, ω̇) = `system.vector_field` (002 (2.9)–(2.11))
    from y0 = (q0, ω0) at t = 0 to t1, with `PIDController(rtol, atol)` unless another
    `stepsize_controller` is given (`ConstantStepSize()`: steps of dt0).

    The same equations as s2jax's Runge–Kutta baselines, in the same (q, ω) variables, so the
    benchmarks compare integrators, not formulations. `saveat`, `adjoint` and `throw` are
    diffrax's, with its defaults.
    """
    return diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, args: system.vector_field(t, *y, args)),
        solver,
        t0=0.0,
        t1=t1,
        dt0=dt0,
        y0=y0,
        args=args,
        saveat=saveat,
        stepsize_controller=stepsize_controller or diffrax.PIDController(rtol=rtol, atol=atol),
        adjoint=adjoint,
        max_steps=max_steps,
        throw=throw,
    )
