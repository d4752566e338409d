"""Model predictive control: time per control step and closed-loop error (issue 31, item 3).

    python benchmarks/mpc.py [--quick] [--repeats 7] [--horizons 10,25,50,100]

The spherical pendulum held upright (m = 1 kg, r = 1 m, h = 0.02 s; ℓ = |q − up|² + 0.1 |ω|² +
0.01 |u|², Φ = 10 |q_N − up|² + |ω_N|², a pivot torque u ∈ ℝ³), the plant's rod 5 % longer than the
model's, started 0.2 rad from upright and moving away at 0.5 rad/s; 150 control steps (3 s), one
plant step each. For each prediction horizon N (steps):

- in one compiled program (`s2.control.receding_horizon`, the plant simulated in the graph), per
  control step (the loop's time / 150): MPC solving to convergence at each step (`ILQR(max_steps=20)`,
  warm-started from the shifted solution), MPC with at most 5 iterations per step (`ILQR(max_steps=5)`),
  and real-time iterations, 1 and 2 per step (`real_time_iterations`), the first solve from
  `initial_guess` (continuation in the horizon); medians of `--repeats`
  interleaved runs; the first call's time less a run's is its compile time;
- from Python (`s2.control.RealTimeController`, one iteration per call, the plant a `s2.Stepper`):
  the latency of each controller call, the controls read back to the host (`np.asarray`), median
  and 95th percentile over every call of every repeat;
- the closed-loop error of each: the largest distance |q − up| after the first second, and the
  distance at the end.

Results: benchmarks/results/mpc.json with the machine and the load before and after.
"""

import argparse
import os
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _common import interleaved_medians, write  # noqa: E402

import s2jax as s2  # noqa: E402

pendulum = s2.models.spherical_pendulum
PARAMS = {"m": 1.0, "r": 1.0, "g": 9.81}
PLANT = {"m": 1.0, "r": 1.05, "g": 9.81}
DT = 0.02
UP = np.array([[0.0, 0.0, -1.0]])
Q0 = np.array([[np.sin(0.2), 0.0, -np.cos(0.2)]])
OMEGA0 = np.array([[0.0, 0.5, 0.0]])
NUM_SOLVES = 150


def running(t, q, w, u):
    return jnp.sum((q - UP) ** 2) + 0.1 * jnp.sum(w**2) + 0.01 * jnp.sum(u**2)


def terminal(q, w):
    return 10.0 * jnp.sum((q - UP) ** 2) + jnp.sum(w**2)


def problem(num_steps, params=PARAMS):
    return s2.control.Problem(
        pendulum.lagrangian, params, s2.forces.PivotTorque(0), DT, num_steps, running_cost=running,
        terminal_cost=terminal,
    )


def initial_guess(num_steps):
    """The first solve's guess: a converged 25-step solve's controls, then zeros. From zeros the
    100-step solve converges to a local optimum that lets the pendulum fall through hanging and
    swing back (J = 5.19); from this guess it balances (J = 0.0145): continuation in the horizon."""
    short = s2.control.solve(problem(25), Q0, OMEGA0, solver=s2.control.ILQR())
    guess = np.zeros((num_steps, 3))
    guess[: min(num_steps, 25)] = np.asarray(short.controls)[:num_steps]
    return guess


def errors(q) -> dict:
    distance = np.linalg.norm(np.asarray(q)[:, 0] - UP[0], axis=-1)
    return {"max_error_after_1s": float(np.max(distance[round(1.0 / DT) :])), "final_error": float(distance[-1])}


def in_graph(num_steps, repeats):
    modes = {
        "converged (ILQR max_steps=20)": {"solver": s2.control.ILQR(max_steps=20)},
        "at most 5 iterations (ILQR max_steps=5)": {"solver": s2.control.ILQR(max_steps=5)},
        "real-time, 1 iteration": {"solver": s2.control.ILQR(max_steps=20), "real_time_iterations": 1},
        "real-time, 2 iterations": {"solver": s2.control.ILQR(max_steps=20), "real_time_iterations": 2},
    }
    model, plant, init = problem(num_steps), problem(num_steps, PLANT), initial_guess(num_steps)
    calls = {
        name: (lambda options=options: s2.control.receding_horizon(
            model, Q0, OMEGA0, num_solves=NUM_SOLVES, plant=plant, init=init, **options
        ))
        for name, options in modes.items()
    }
    compile_seconds = {}
    for name, call in calls.items():
        start = time.perf_counter()
        jax.block_until_ready(call())
        first = time.perf_counter() - start
        start = time.perf_counter()
        closed = jax.block_until_ready(call())
        compile_seconds[name] = {
            "compile_s": first - (time.perf_counter() - start),
            "iterations_per_step_median": float(np.median(np.asarray(closed.iterations))),
            **errors(closed.q),
        }
    medians = interleaved_medians(calls, repeats=repeats)
    return {
        name: {
            "ms_per_control_step": medians[name][0] / NUM_SOLVES * 1e3,
            "ms_per_control_step_runs": [t / NUM_SOLVES * 1e3 for t in medians[name][1]],
            **compile_seconds[name],
        }
        for name in calls
    }


def from_python(num_steps, repeats):
    model, init = problem(num_steps), initial_guess(num_steps)
    stepper = s2.Stepper(pendulum.lagrangian, Q0, OMEGA0, PLANT, dt=DT, force=s2.forces.PivotTorque(0), u0=np.zeros(3))
    start = time.perf_counter()
    s2.control.RealTimeController(model, Q0, OMEGA0, solver=s2.control.ILQR(max_steps=20), init=init)
    first_solve = time.perf_counter() - start
    latencies, closed = [], None
    for _ in range(repeats):
        controller = s2.control.RealTimeController(model, Q0, OMEGA0, solver=s2.control.ILQR(max_steps=20), init=init)
        q, omega = jnp.asarray(Q0), jnp.asarray(OMEGA0)
        qs = [np.asarray(q)]
        for _ in range(NUM_SOLVES):
            start = time.perf_counter()
            controls = np.asarray(controller(q, omega))
            latencies.append(time.perf_counter() - start)
            q, omega = stepper(q, omega, controls[0])
            qs.append(np.asarray(q))
        closed = np.stack(qs)
    latencies = np.asarray(latencies[NUM_SOLVES // 10 :]) * 1e3  # the first calls of the first run compile
    return {
        "ms_per_call_median": float(np.median(latencies)),
        "ms_per_call_p95": float(np.percentile(latencies, 95)),
        "ms_per_call_max": float(np.max(latencies)),
        "calls": int(latencies.size),
        "construction_s_first": first_solve,
        "refused": int(controller.refused),
        **errors(closed),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one horizon, two repeats: checks that it runs")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--horizons", default="10,25,50,100")
    args = parser.parse_args()
    horizons = [25] if args.quick else [int(n) for n in args.horizons.split(",")]
    repeats = 2 if args.quick else args.repeats
    load_before = os.getloadavg()
    rows = []
    for num_steps in horizons:
        row = {"horizon_steps": num_steps, "in_graph": in_graph(num_steps, repeats)}
        row["from_python"] = from_python(num_steps, repeats)
        rows.append(row)
        for name, result in row["in_graph"].items():
            print(
                f"N = {num_steps:4d}  {name:42s} {result['ms_per_control_step']:.3f} ms/step  compile "
                f"{result['compile_s']:.1f} s  error after 1 s {result['max_error_after_1s']:.1e}, end "
                f"{result['final_error']:.1e}",
                flush=True,
            )
        python = row["from_python"]
        print(
            f"N = {num_steps:4d}  {'RealTimeController from Python':42s} median {python['ms_per_call_median']:.3f} ms, "
            f"p95 {python['ms_per_call_p95']:.3f} ms  error after 1 s {python['max_error_after_1s']:.1e}",
            flush=True,
        )
    load_after = os.getloadavg()
    path = write(
        "mpc",
        {
            "command": f"python benchmarks/mpc.py --repeats {repeats} --horizons {','.join(map(str, horizons))}",
            "repeats": repeats,
            "num_control_steps": NUM_SOLVES,
            "load_before": load_before,
            "load_after": load_after,
            "rows": rows,
        },
        quick=args.quick,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
