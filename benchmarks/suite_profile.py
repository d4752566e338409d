"""Where the test suite's time goes: tracing, lowering, XLA's compile, and the rest (running).

A pytest plugin and its summary. Run the suite with the plugin (a fresh cache, as CI has), then
summarise:

    S2JAX_TEST_COMPILATION_CACHE=$(mktemp -d) PYTHONPATH=benchmarks \
        .venv/bin/python -m pytest -q -p suite_profile
    .venv/bin/python benchmarks/suite_profile.py

Each worker appends one JSON line per test to `$S2JAX_SUITE_PROFILE` (default
`/tmp/s2jax_suite_profile.jsonl`): its wall time from setup to teardown and the seconds JAX's
monitoring events report for it (`jaxpr_trace_duration`, `jaxpr_to_mlir_module_duration`,
`backend_compile_duration`; traces nest, so tracing is counted once per level). The notebooks
run in kernels of their own, whose events are not seen: their time is all "rest".
The summary writes `benchmarks/results/suite_profile.json`: totals, per module, the slowest tests.
"""

import collections
import json
import os
import pathlib
import time

_PATH = os.environ.get("S2JAX_SUITE_PROFILE", "/tmp/s2jax_suite_profile.jsonl")
_EVENTS = {
    "jaxpr_trace_duration": "trace",
    "jaxpr_to_mlir_module_duration": "lower",
    "backend_compile_duration": "compile",
}


def _plugin():
    import jax
    import pytest

    seconds = collections.Counter()

    def listener(event, duration, **kwargs):
        name = _EVENTS.get(event.rsplit("/", 1)[-1])
        if name is not None:
            seconds[name] += duration

    jax.monitoring.register_event_duration_secs_listener(listener)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        seconds.clear()
        start = time.perf_counter()
        yield
        row = {"test": item.nodeid, "wall": time.perf_counter() - start, **seconds}
        with open(_PATH, "a") as file:
            file.write(json.dumps(row) + "\n")

    return pytest_runtest_protocol


if __name__ != "__main__":  # imported by pytest as a plugin (`-p suite_profile`)
    pytest_runtest_protocol = _plugin()


def summarise(path: str = _PATH, top: int = 15) -> dict:
    rows = [json.loads(line) for line in open(path)]
    parts = ("trace", "lower", "compile")
    totals = {part: sum(r.get(part, 0.0) for r in rows) for part in ("wall", *parts)}
    totals["rest"] = totals["wall"] - sum(totals[p] for p in parts)
    modules = collections.defaultdict(lambda: collections.Counter())
    for r in rows:
        module = r["test"].split("::")[0]
        modules[module].update({"wall": r["wall"], "tests": 1, **{p: r.get(p, 0.0) for p in parts}})
    by_module = sorted(({"module": m, **c} for m, c in modules.items()), key=lambda x: -x["wall"])
    slowest = sorted(rows, key=lambda r: -r["wall"])[:top]
    return {"tests": len(rows), "seconds": totals, "modules": by_module[:top], "slowest": slowest}


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from _common import write

    summary = summarise()
    seconds = summary["seconds"]
    print(f"{summary['tests']} tests, {seconds['wall']:.0f} s of test time: " + ", ".join(
        f"{k} {v:.0f} s ({100 * v / seconds['wall']:.0f} %)" for k, v in seconds.items() if k != "wall"))
    for m in summary["modules"]:
        print(f"  {m['wall']:7.1f} s {m['tests']:4d} tests  {m['module']}")
    write("suite_profile", {**summary, "command": "PYTHONPATH=benchmarks pytest -q -p suite_profile"})
