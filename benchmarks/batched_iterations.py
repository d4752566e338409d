"""What an iLQR iteration costs per member when B problems iterate in lockstep (issue 30, item 3).

    python benchmarks/batched_iterations.py [--sizes 1,4,16,64] [--repeats 5] [--quick]

`batched_solves.py` times whole solves, where lockstep (`jax.vmap`) also loses because every
member runs as many iterations as the slowest. This holds the iterations equal, to measure what
running B members together buys per iteration: the swing-up of
`s2.control.examples.spherical_pendulum_swing_up` (300 steps, fidelity None) from B near-hanging
states, `ILQR(max_steps=20)` and one augmented-Lagrangian round (`max_outer_steps=1`): 20
iterations each (none converges in 20), each an expansion (`jax.jacfwd` of every step), a
Riccati pass and line-search rollouts. Timed:

- `one`: `s2.control.solve` of one member (the median over the members);
- `vmap`: `s2.control.solve_many(batch="vmap")`, the B members in lockstep;
- `map`: `s2.control.solve_many(batch="map")`, one after another in one program.

A batched call that costs B× one gains nothing from vectorising. Medians of `--repeats` runs after
a compiling call, the contenders interleaved. Results: benchmarks/results/batched_iterations.json
with the machine and the load.
"""

import argparse
import dataclasses
import os

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from _common import timed, write  # noqa: E402
from batched_solves import near_hanging  # noqa: E402

import s2jax as s2  # noqa: E402
from s2jax.control.examples import spherical_pendulum_swing_up  # noqa: E402

ITERATIONS = 20



def measure(size, repeats):
    problem, _, _, init = spherical_pendulum_swing_up()
    problem = dataclasses.replace(problem, fidelity=None)
    solver = s2.control.ILQR(max_steps=ITERATIONS)
    q0, omega0 = near_hanging(size)
    options = dict(solver=solver, init=init, max_outer_steps=1, throw=False)
    calls = {"one": lambda b=0: s2.control.solve(problem, q0[b], omega0[b], **options)}
    for mode in ("vmap", "map"):
        calls[mode] = lambda mode=mode: s2.control.solve_many(problem, q0, omega0, batch=mode, **options)
    iterations = {mode: np.asarray(calls[mode]().num_iterations) for mode in ("vmap", "map")}
    ones = [calls["one"](b) for b in range(size)]
    assert all(int(s.num_iterations) == ITERATIONS for s in ones), "a member converged: raise ITERATIONS"
    times = {mode: [] for mode in calls}
    for _ in range(repeats):
        for mode, call in calls.items():
            if mode == "one":
                times[mode].append(float(np.median([timed(lambda b=b: call(b)) for b in range(min(size, 4))])))
            else:
                times[mode].append(timed(call))
    one = float(np.median(times["one"]))
    row = {"members": size, "iterations_per_member": ITERATIONS, "one_s": one, "one_runs_s": times["one"]}
    for mode in ("vmap", "map"):
        seconds = float(np.median(times[mode]))
        row[mode] = {"s": seconds, "runs_s": times[mode], "times_one": seconds / one,
                     "per_member_over_one": seconds / one / size,
                     "iterations": [int(k) for k in np.atleast_1d(iterations[mode])]}
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="B = 4, 1 repeat: checks that it runs")
    parser.add_argument("--sizes", default="1,4,16,64")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sizes = [4] if args.quick else [int(s) for s in args.sizes.split(",")]
    repeats = 1 if args.quick else args.repeats
    load_before = os.getloadavg()
    rows = []
    for size in sizes:
        row = measure(size, repeats)
        rows.append(row)
        print(f"B = {size:3d}: one {row['one_s'] * 1e3:.1f} ms ({ITERATIONS} iterations); "
              + "; ".join(f"{mode} {row[mode]['s'] * 1e3:.1f} ms = {row[mode]['times_one']:.1f}x one "
                          f"({row[mode]['per_member_over_one']:.2f}x per member)" for mode in ("vmap", "map")),
              flush=True)
    path = write(
        "batched_iterations",
        {
            "command": f"python benchmarks/batched_iterations.py --sizes {','.join(map(str, sizes))} "
                       f"--repeats {repeats}",
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "results": rows,
        },
        quick=args.quick,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
