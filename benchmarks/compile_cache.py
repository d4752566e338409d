"""First run against second run, each in a fresh process, with the persistent compilation cache.

    python benchmarks/compile_cache.py [--repeats 5] [--quick]

Each repeat starts from an empty cache folder (`S2JAX_CACHE_DIR`): a first ("cold") process
compiles and stores, a second ("warm") one loads. Timed from outside (wall time of the whole
process: import, tracing, compiling or loading, running, writing figures), cold and warm
alternating, median of the repeats. Entry points: `python -m s2jax control 1` (the swing-up,
figures included), the README's first example followed by a gradient through it (what a
newcomer runs first), and the fit of `compile_times.py` (three params of the double pendulum
from 3 s of directions, two segments). Writes benchmarks/results/compile_cache.json.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from _common import write

# What every script starts with: float64 and the persistent cache.
_PRELUDE = """
import numpy as np
import jax
jax.config.update("jax_enable_x64", True)
import s2jax as s2
s2.enable_compilation_cache()
"""

_README = _PRELUDE + """
model = s2.models.double_spherical_pendulum
params = model.paper_params()
q0, omega0 = model.paper_state()
sol = s2.simulate(model.lagrangian, q0, omega0, params, dt=0.01, num_steps={steps}, save_every=10)
def final_height(l1):
    p = {{**params, "l1": l1}}
    return s2.simulate(model.lagrangian, q0, omega0, p, dt=0.01, num_steps={steps}).q[-1, 1, 2]
print(float(jax.grad(final_height)(params["l1"])))
"""


_FIT = _PRELUDE + """
dsp = s2.models.double_spherical_pendulum
truth = dsp.paper_params()
q0, omega0 = dsp.paper_state()
observed = np.arange(5, {steps} + 1, 5)
data = s2.simulate(dsp.lagrangian, q0, omega0, truth, dt=0.01, num_steps={steps}).q[observed][:, [1]]
guess = dict(truth, l1=1.08 * truth["l1"], l2=0.93 * truth["l2"], m2=1.1 * truth["m2"])
result = s2.fit.fit(dsp.lagrangian, guess, np.asarray(data), times=observed * 0.01, bodies=[1], dt=0.01,
                    q0=q0, omega0=omega0, free=("l1", "l2", "m2"), segments=2)
print(result.params["l1"])
"""


def _commands(quick: bool, out: str) -> dict[str, list[str]]:
    return {
        "python -m s2jax control 1": [sys.executable, "-m", "s2jax", "control", "1", "--out", out],
        "README example + its gradient": [sys.executable, "-c", _README.format(steps=100 if quick else 10_000)],
        "a fit (benchmarks/compile_times.py's)": [sys.executable, "-c", _FIT.format(steps=100 if quick else 300)],
    }


def _wall(command: list[str], cache: str) -> float:
    environment = {**os.environ, "S2JAX_CACHE_DIR": cache}
    start = time.perf_counter()
    subprocess.run(command, env=environment, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one repeat, a short run: checks the script works")
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats
    load_before = os.getloadavg()
    rows = {}
    with tempfile.TemporaryDirectory() as out:
        for name, command in _commands(args.quick, out).items():
            cold, warm = [], []
            for _ in range(repeats):
                with tempfile.TemporaryDirectory() as cache:
                    cold.append(_wall(command, cache))
                    warm.append(_wall(command, cache))
            rows[name] = {
                "cold_s": statistics.median(cold), "warm_s": statistics.median(warm),
                "warm_over_cold": statistics.median(w / c for w, c in zip(warm, cold)),
                "cold_runs_s": cold, "warm_runs_s": warm,
            }
            print(f"{name}: cold {rows[name]['cold_s']:.1f} s, warm {rows[name]['warm_s']:.1f} s, "
                  f"warm/cold {rows[name]['warm_over_cold']:.2f}", flush=True)
    path = write("compile_cache", {"repeats": repeats, "load_before": load_before, "rows": rows}, quick=args.quick)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
