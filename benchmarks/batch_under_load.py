"""Batch throughput on a loaded CPU: what makes it swing (issue 32, item 3).

    python benchmarks/batch_under_load.py [--repeats 7] [--quick]

`simulate_batch` of 1024 double pendula (002 Example 1's params, random states, h = 0.01, 1000
steps) with the default VI and with `RungeKutta4`, in fresh processes, on one host device and on
two (`--xla_force_host_platform_device_count=2`), while 0, 1 or 2 other processes keep a core
busy (a Python busy loop each, started before and stopped after). Million system-steps per
second, median of `--repeats` calls after a compiling one. Results:
benchmarks/results/batch_under_load.json with the machine and the load.
"""

import argparse
import json
import multiprocessing
import os
import subprocess
import sys

from _common import median_time, write


def _child(repeats: int) -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import s2jax as s2
    from s2jax.models import double_spherical_pendulum as dsp

    params = jax.tree_util.tree_map(jnp.asarray, dsp.paper_params())
    keys = jax.random.split(jax.random.PRNGKey(0), 1024)
    q0, omega0 = jax.vmap(lambda k: s2.random_state(k, 2))(keys)
    rates = {}
    for name, integrator in (("VariationalIntegrator", s2.VariationalIntegrator()), ("RungeKutta4", s2.RungeKutta4())):

        def run(integrator=integrator):
            return s2.simulate_batch(
                dsp.lagrangian, q0, omega0, params, dt=0.01, num_steps=1000, save_every=1000, integrator=integrator
            ).q

        rates[name] = 1024 * 1000 / median_time(run, repeats)[0] / 1e6
    print(json.dumps({"msteps_per_s": rates, "devices": len(jax.devices()), "load": os.getloadavg()}))


def _busy(stop) -> None:
    while not stop.is_set():
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="2 repeats, no busy cores: checks that it runs")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(args.repeats)
    repeats = 2 if args.quick else args.repeats
    load_before = os.getloadavg()
    rows = []
    for busy in (0,) if args.quick else (0, 1, 2):
        stop = multiprocessing.Event()
        loops = [multiprocessing.Process(target=_busy, args=(stop,), daemon=True) for _ in range(busy)]
        for loop in loops:
            loop.start()
        try:
            for devices in (1, 2):
                flags = os.environ.get("XLA_FLAGS", "")
                if devices > 1:
                    flags = f"{flags} --xla_force_host_platform_device_count={devices}"
                out = subprocess.run(
                    [sys.executable, __file__, "--child", "--repeats", str(repeats)],
                    env={**os.environ, "XLA_FLAGS": flags}, capture_output=True, text=True, check=True,
                ).stdout
                row = {"busy_cores": busy, **json.loads(out.strip().splitlines()[-1])}
                rows.append(row)
                rates = ", ".join(f"{k} {v:.2f}" for k, v in row["msteps_per_s"].items())
                print(f"{busy} busy core(s), {devices} host device(s): {rates} M steps/s", flush=True)
        finally:
            stop.set()
            for loop in loops:
                loop.join()
    path = write(
        "batch_under_load",
        {
            "command": f"python benchmarks/batch_under_load.py {'--quick' if args.quick else f'--repeats {repeats}'}",
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "rows": rows,
        },
        quick=args.quick,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
