"""Timing helpers shared by the benchmarks: medians of repeated runs, machine info."""

import json
import os
import pathlib
import platform
import statistics
import time

import jax

RESULTS = pathlib.Path(__file__).parent / "results"


def median_time(fn, repeats: int = 7) -> tuple[float, list[float]]:
    """Median wall time of `fn()` (blocking on its outputs) over `repeats` runs, after a warm-up."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
    }


def write(name: str, payload: dict) -> pathlib.Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2))
    return path
