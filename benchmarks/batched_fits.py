"""Many parameter fits in one call (issue 30, items 2 and 3).

    python benchmarks/batched_fits.py [--quick] [--sizes 1,4,16,64] [--repeats 5]

The fit of `tests/test_fit.py`: the double spherical pendulum of 002 Example 1, 3 s at h = 0.01,
the direction of body 2 observed every 5 steps with noise σ = 10⁻³ (a new draw per member, seed 0),
l₁, l₂ and m₂ fitted from a guess 8 %, 7 % and 10 % off, 2 shooting segments, Levenberg–Marquardt
(the default). B datasets are fitted

- in turn: `s2.fit.fit` for each member in a Python loop (compiled once);
- in one call, `jax.jit(jax.vmap(fit))` over the data: in lockstep, every member's iterations
  masked once it has converged;
- in one call, `jax.jit(lambda data: jax.lax.map(fit, data))`: the members one after another
  inside one program, each with its own iterations.

"One fit" is the median over the members of their own `fit` times. Each call's time is the median
of `--repeats` runs after a first (compiling) call, the contenders interleaved. The loop
iterations of each member (`FitResult` history entries) and of the batch (the slowest member's)
are recorded. Results: benchmarks/results/batched_fits.json with the machine and the load.
"""

import argparse
import os

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _common import timed, write  # noqa: E402

import s2jax as s2  # noqa: E402
from s2jax.models import double_spherical_pendulum as model  # noqa: E402

DT, NUM_STEPS, NOISE = 0.01, 300, 1e-3
OBSERVED = np.arange(5, NUM_STEPS + 1, 5)
FREE = ("l1", "l2", "m2")


def setup(size, g=None):
    """`(one, data)`: `one(observations)` fits the problem (at gravity `g`, the paper's if None), and
    `data` holds `size` noisy datasets."""
    truth = model.paper_params()
    guess = dict(truth, l1=1.08 * truth["l1"], l2=0.93 * truth["l2"], m2=1.1 * truth["m2"])
    q0, omega0 = model.paper_state()
    run = s2.simulate(model.lagrangian, q0, omega0, truth, dt=DT, num_steps=NUM_STEPS)
    clean = np.asarray(run.q[OBSERVED][:, [1]])
    data = clean + NOISE * np.random.default_rng(0).normal(size=(size, *clean.shape))

    def one(observations, g=truth["g"] if g is None else g):
        return s2.fit.fit(
            model.lagrangian, dict(guess, g=g), observations, times=OBSERVED * DT, bodies=[1], dt=DT, q0=q0,
            omega0=omega0, free=FREE, segments=2, fidelity=None,
        )

    return one, data



def iterates(result):
    return np.sum(np.isfinite(np.asarray(result.loss_history)), axis=-1)


def measure(size, repeats):
    one, data = setup(size)
    singles, counts = [], []
    for b in range(size):
        call = lambda b=b: one(data[b])  # noqa: E731
        timed(call)  # the first compiles (once for all members)
        singles.append(min(timed(call) for _ in range(3)))
        counts.append(int(iterates(call())))
    batched = jnp.asarray(data)
    vmapped = jax.jit(jax.vmap(one))
    mapped = jax.jit(lambda data: jax.lax.map(one, data))
    calls = {"vmap": lambda: vmapped(batched), "map": lambda: mapped(batched)}
    first = {mode: timed(call) for mode, call in calls.items()}
    times = {mode: [] for mode in calls}
    for _ in range(repeats):
        for mode, call in calls.items():
            times[mode].append(timed(call))
    alone = float(np.median(singles))
    row = {
        "members": size,
        "one_fit_s_median": alone,
        "in_turn_s": float(np.sum(singles)),
        "iterates_per_member": counts,
    }
    reference = [one(data[b]) for b in range(size)]
    for mode, call in calls.items():
        seconds = float(np.median(times[mode]))
        results = call()
        difference = max(
            float(np.max(np.abs(np.asarray(results.params[key]) - np.array([float(r.params[key]) for r in reference]))))
            for key in FREE
        )
        row[mode] = {
            "s": seconds,
            "runs_s": times[mode],
            "first_call_s": first[mode],
            "times_one_fit": seconds / alone,
            "times_in_turn": seconds / row["in_turn_s"],
            "converged": int(np.sum(np.asarray(results.converged))),
            "largest_difference_from_single_fits": difference,
        }
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 members, 1 repeat: checks that it runs")
    parser.add_argument("--sizes", default="1,4,16,64")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sizes = [2] if args.quick else [int(s) for s in args.sizes.split(",")]
    repeats = 1 if args.quick else args.repeats
    load_before = os.getloadavg()
    rows = []
    for size in sizes:
        row = measure(size, repeats)
        rows.append(row)
        line = f"B = {size:3d}: one fit {row['one_fit_s_median'] * 1e3:.1f} ms, in turn {row['in_turn_s']:.3f} s"
        line += f", iterates median {np.median(row['iterates_per_member']):.0f} max {max(row['iterates_per_member'])}"
        for mode in ("vmap", "map"):
            r = row[mode]
            line += f"; {mode} {r['s']:.3f} s = {r['times_one_fit']:.1f}x one, {r['times_in_turn']:.2f}x in turn"
            off = r["largest_difference_from_single_fits"]
            line += f" (first call {r['first_call_s']:.1f} s, off single fits by {off:.1e})"
        print(line, flush=True)
    path = write(
        "batched_fits",
        {
            "command": f"python benchmarks/batched_fits.py --sizes {','.join(map(str, sizes))} --repeats {repeats}",
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "rows": rows,
        },
        quick=args.quick,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
