"""Many trajectory optimisations in one call (issue 30, item 3).

    python benchmarks/batched_solves.py [--quick] [--sizes 16,64]

The swing-up of `s2.control.examples.spherical_pendulum_swing_up` (300 steps, |u_i| ≤ 0.3 m g r,
terminal constraint upright at rest; iLQR) from B random near-hanging states (tilts of 0.1 rad
and angular velocities of 0.1 rad/s, standard deviations; seed 0), solved

- in turn: `s2.control.solve` for each member in a Python loop (compiled once);
- in one call, `s2.control.solve_many(batch="map")`: the members one after another inside one
  program, each with its own iterations (on one device, then on two host devices:
  `--xla_force_host_platform_device_count=2`, a second process);
- in one call, `s2.control.solve_many(batch="vmap")`, i.e. `jax.vmap(solve)`: in lockstep.

"One solve" is the median over the members of their own `solve` times. Each call's time is the
median of `--repeats` runs after a first (compiling) call, the contenders interleaved. Results:
benchmarks/results/batched_solves.json with the machine and the load.
"""

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile

if "--host-devices" in sys.argv:  # before jax is imported
    count = sys.argv[sys.argv.index("--host-devices") + 1]
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={count}"

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from _common import timed, write  # noqa: E402

import s2jax as s2  # noqa: E402
from s2jax.control.examples import spherical_pendulum_swing_up  # noqa: E402


def near_hanging(size, seed=0):
    rng = np.random.default_rng(seed)
    tilt = 0.1 * rng.normal(size=(size, 2))
    q = np.stack([np.sin(tilt[:, 0]), np.sin(tilt[:, 1]), np.cos(tilt[:, 0]) * np.cos(tilt[:, 1])], -1)
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    omega = 0.1 * rng.normal(size=(size, 3))
    omega -= np.sum(omega * q, -1, keepdims=True) * q
    return q[:, None], omega[:, None]



def measure(size, repeats, modes):
    problem, _, _, init = spherical_pendulum_swing_up()
    # the solver's speed on the discrete model at one sub-step (control_fidelity.py measures refinement)
    problem = dataclasses.replace(problem, fidelity=None)
    solver = s2.control.ILQR()
    q0, omega0 = near_hanging(size)
    singles, iterations = [], []
    for b in range(size):
        one = lambda b=b: s2.control.solve(problem, q0[b], omega0[b], solver=solver, init=init, throw=False)  # noqa: E731
        timed(one)  # the first compiles
        singles.append(min(timed(one) for _ in range(3)))
        iterations.append(int(one().num_iterations))
    calls = {
        mode: (lambda mode=mode: s2.control.solve_many(
            problem, q0, omega0, solver=solver, init=init, batch=mode, throw=False
        ))
        for mode in modes
    }
    first = {mode: timed(call) for mode, call in calls.items()}
    times = {mode: [] for mode in calls}
    for _ in range(repeats):
        for mode, call in calls.items():
            times[mode].append(timed(call))
    one = float(np.median(singles))
    result = {
        "members": size,
        "devices": [str(d) for d in jax.devices()],
        "one_solve_s_median": one,
        "in_turn_s": float(np.sum(singles)),
        "iterations_median": float(np.median(iterations)),
        "iterations_max": int(np.max(iterations)),
    }
    for mode in calls:
        seconds = float(np.median(times[mode]))
        solutions = calls[mode]()
        result[mode] = {
            "s": seconds,
            "runs_s": times[mode],
            "first_call_s": first[mode],
            "times_one_solve": seconds / one,
            "times_in_turn": seconds / result["in_turn_s"],
            "converged": int(np.sum(np.asarray(solutions.result._value) == s2.RESULTS.successful._value)),
        }
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 members, 1 repeat: checks that it runs")
    parser.add_argument("--sizes", default="16,64")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--host-devices", type=int, default=1, help="(internal) the second process's device count")
    parser.add_argument("--out", help="(internal) where the second process writes its rows")
    args = parser.parse_args()
    sizes = [4] if args.quick else [int(s) for s in args.sizes.split(",")]
    repeats = 1 if args.quick else args.repeats
    modes = ("map",) if args.host_devices > 1 else ("map", "vmap")
    load_before = os.getloadavg()
    rows = [measure(size, repeats, modes) for size in sizes]
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f)
        return
    out = os.path.join(tempfile.mkdtemp(prefix="s2jax-batched-solves-"), "two_devices.json")
    command = [sys.executable, __file__, "--host-devices", "2", "--sizes", ",".join(map(str, sizes)),
               "--repeats", str(repeats), "--out", out]
    subprocess.run(command, check=True)
    with open(out) as f:
        two = json.load(f)
    for row in rows + two:
        line = f"B = {row['members']:3d} on {len(row['devices'])} device(s): "
        line += f"one solve {row['one_solve_s_median']:.3f} s, in turn {row['in_turn_s']:.2f} s"
        for mode in ("map", "vmap"):
            if mode in row:
                r = row[mode]
                line += f"; {mode} {r['s']:.2f} s = {r['times_one_solve']:.1f}x one, {r['times_in_turn']:.2f}x in turn"
        print(line, flush=True)
    path = write(
        "batched_solves",
        {
            "command": f"python benchmarks/batched_solves.py --sizes {','.join(map(str, sizes))} --repeats {repeats}",
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "one_device": rows,
            "two_host_devices": two,
        },
        quick=args.quick,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
