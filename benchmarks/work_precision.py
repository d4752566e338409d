"""Work–precision measurements on the double spherical pendulum: wall time, max energy error and
max unit-length error, for T = 100 s and T = 10⁴ s, for every integrator.

    python benchmarks/work_precision.py [--quick]   # measure, write the JSON
    python benchmarks/plot_work_precision.py        # summary and figure from the JSON

System: the double spherical pendulum of 002 Example 1 from its paper state (E₀ = −72.18 J).
Methods: s2jax's VariationalIntegrator (VI, order 2), its triple-jump compositions VI-4 and
VI-6, its Kahan–Li compositions VI-6KL and VI-8KL (9 and 17 sub-steps), the same compositions of
`Rattle` (RATTLE-6KL, RATTLE-8KL: the same maps, computed by multipliers), the Lie group methods
LieEuler, LieEulerHeun, RKMK3, RKMK4, CommutatorFreeRK4 (CFRK4), plain RungeKutta4 (RK4, not
structure-preserving), each at several fixed steps h; and diffrax Tsit5 and Dopri8 on the same
equations (2.9)–(2.11) (`_common.diffrax_solve`)
with `PIDController(rtol = atol = tol)` at several tolerances. float64, CPU, one process.

Errors: max_k |E_k − E₀| / |E₀| and max_k max_i ||q_i| − 1| over states saved every 0.1 s of
simulated time (10⁵ states at T = 10⁴ s; every 0.125 s for the steps h = 0.125 and 0.0625 of
the order-8 race at T = 10⁴ s, which 0.1 s is no multiple of). The max over saved states slightly underestimates the
max over all steps: for VI and VI-4 the 0.1-s max is within 2 % of the every-step max at T = 100,
10³, 10⁴ s, while a 1-s grid misses up to 30 % at T = 100 s (and would inflate the growth ratios
of `plot_work_precision.py`). diffrax's states on the 0.1-s grid come from its dense output
(interpolation).

Wall time: each measured function is `jit(...).lower(...).compile()`d ahead of time, so
compilation is excluded; the fixed-step methods call `s2.simulate` inside the jitted function
(the 0.1-s grid is what they save; the cost of saving is within noise). For the fixed-step
methods the first, untimed run of the compiled function gives the states for the errors; for
diffrax an untimed run of the same solve with `SaveAt(ts=0.1-s grid)` gives them, and the timed
solve saves on a 1-s grid (evaluating the dense output at 10⁵ points would double diffrax's time;
measured). Then medians of 7 runs (runs < 1 s), 5 runs (< 10 s) or 3 runs (≥ 10 s); the
repeats go round-robin over all points of one horizon, so that the load of other processes on a
shared machine falls on all methods alike (the load averages are recorded in the JSON).

Results go to benchmarks/results/work_precision.json, which `plot_work_precision.py` reads.
`--quick` measures each method's first setting at T = 1 s and 100 s and writes to a temporary
folder. `--horizon T` and `--methods NAME ...` measure a subset and write
results/work_precision_subset.json (the full file is left alone). The recorded full run took
199 s on 2 CPU cores shared with other jobs, compilation included (956 s two releases ago).
"""

import argparse
import os
import statistics
import time

import diffrax
import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _common import diffrax_solve, jit, write  # noqa: E402

import s2jax as s2  # noqa: E402

dsp = s2.models.double_spherical_pendulum
Q0, OMEGA0 = (jnp.asarray(x) for x in dsp.paper_state())
PARAMS = {k: jnp.asarray(v) for k, v in dsp.paper_params().items()}
E0 = float(s2.energy(dsp.lagrangian, Q0, OMEGA0, PARAMS))
HORIZONS = (100.0, 10_000.0)
SAVE_SPACING = 0.1  # s of simulated time between the states the errors are taken over
TIMED_SAVE_SPACING_DIFFRAX = 1.0
TARGETS = (1e-4, 1e-5, 1e-6, 1e-7, 1e-8)  # max relative energy errors, for the summary

VI = s2.VariationalIntegrator()
# name: (integrator, structure-preserving, {T: steps h}); the saves are every round(0.1 s / h)
# steps (`save_every_for`): every 0.1 s where h divides it, else every 0.125 s (h = 0.125,
# 0.0625) or 0.08 s (h = 0.08).
FIXED_STEP = {
    "VI": (
        VI,
        True,
        {100.0: [0.05, 0.025, 0.0125, 0.005, 0.0025], 10_000.0: [0.05, 0.025, 0.0125]},
    ),
    "VI-4": (
        s2.Composition(VI, order=4),
        True,
        {100.0: [0.1, 0.05, 0.025, 0.0125, 0.005], 10_000.0: [0.05, 0.025, 0.0125]},
    ),
    "VI-6": (
        s2.Composition(VI, order=6),
        True,
        {100.0: [0.1, 0.05, 0.025, 0.0125], 10_000.0: [0.05]},
    ),
    "VI-6KL": (
        s2.Composition(VI, order=6, method="kahan_li"),
        True,
        {100.0: [0.1, 0.05, 0.025], 10_000.0: [0.1, 0.0625, 0.05]},
    ),
    "VI-8KL": (
        s2.Composition(VI, order=8, method="kahan_li"),
        True,
        {100.0: [0.1, 0.05, 0.025], 10_000.0: [0.125, 0.1, 0.08, 0.0625, 0.05]},
    ),
    # The same maps as VI-6KL and VI-8KL, computed by RATTLE's multipliers (`Rattle`).
    "RATTLE-6KL": (
        s2.Composition(s2.Rattle(), order=6, method="kahan_li"),
        True,
        {100.0: [0.1, 0.05, 0.025], 10_000.0: [0.1, 0.08, 0.0625, 0.05]},
    ),
    "RATTLE-8KL": (
        s2.Composition(s2.Rattle(), order=8, method="kahan_li"),
        True,
        {100.0: [0.1, 0.05, 0.025], 10_000.0: [0.125, 0.1, 0.08, 0.0625, 0.05]},
    ),
    "LieEuler": (s2.LieEuler(), True, {100.0: [0.02, 0.01, 0.005, 0.0025], 10_000.0: [0.01]}),
    "LieEulerHeun": (
        s2.LieEulerHeun(),
        True,
        {100.0: [0.05, 0.025, 0.0125, 0.005], 10_000.0: [0.025]},
    ),
    "RKMK3": (s2.RKMK3(), True, {100.0: [0.05, 0.025, 0.0125, 0.005], 10_000.0: [0.025]}),
    "RKMK4": (
        s2.RKMK4(),
        True,
        {100.0: [0.1, 0.05, 0.025, 0.0125, 0.005], 10_000.0: [0.05, 0.025]},
    ),
    "CFRK4": (
        s2.CommutatorFreeRK4(),
        True,
        {100.0: [0.1, 0.05, 0.025, 0.0125, 0.005], 10_000.0: [0.05, 0.025]},
    ),
    "RK4": (
        s2.RungeKutta4(),
        False,
        {100.0: [0.1, 0.05, 0.025, 0.0125, 0.005], 10_000.0: [0.05, 0.025, 0.0125]},
    ),
}
ADAPTIVE = {
    "Tsit5": (
        diffrax.Tsit5(),
        {
            100.0: [10.0**-k for k in np.arange(3.0, 12.01, 0.5)],
            10_000.0: [10.0**-k for k in np.arange(6.0, 12.01, 0.5)],
        },
    ),
    "Dopri8": (
        diffrax.Dopri8(),
        {
            100.0: [10.0**-k for k in np.arange(3.0, 12.01, 0.5)],
            10_000.0: [10.0**-k for k in np.arange(6.0, 12.01, 0.5)],
        },
    ),
}
STRUCTURE_PRESERVING = [name for name, (_, sp, _) in FIXED_STEP.items() if sp]


def repeats_for(first_seconds):
    return 7 if first_seconds < 1.0 else 5 if first_seconds < 10.0 else 3


def time_interleaved(jobs):
    """Set `wall_s` (median) and `times_s` of every job; the repeats go round-robin over the jobs.

    Each job is (point, fn, first_seconds), `fn` already compiled and run once. Interleaving the
    repeats spreads the load of other processes on the machine over all points alike.
    """
    repeats = [repeats_for(first) for _, _, first in jobs]
    times = [[] for _ in jobs]
    for r in range(max(repeats)):
        for (point, fn, _), n, ts in zip(jobs, repeats, times):
            if r < n:
                start = time.perf_counter()
                jax.block_until_ready(fn())
                ts.append(time.perf_counter() - start)
    for (point, _, _), ts in zip(jobs, times):
        point["wall_s"] = statistics.median(ts)
        point["times_s"] = ts


def errors(q, omega):
    energy = np.asarray(s2.energy(dsp.lagrangian, q, omega, PARAMS))
    return (
        float(np.max(np.abs(energy - E0)) / abs(E0)),
        float(np.max(np.asarray(s2.unit_length_error(q)))),
    )


def save_every_for(h):
    """Steps between saves: the multiple of h nearest SAVE_SPACING (at least one step)."""
    return max(1, int(round(SAVE_SPACING / h)))


def fixed_step_job(name, integrator, horizon, h):
    num_steps = int(round(horizon / h))
    save_every = save_every_for(h)

    def run(q0, omega0, params, dt):
        sol = s2.simulate(
            dsp.lagrangian,
            q0,
            omega0,
            params,
            dt=dt,
            num_steps=num_steps,
            save_every=save_every,
            integrator=integrator,
            throw=False,
        )
        return sol.q, sol.omega, sol.result == s2.RESULTS.successful

    args = (Q0, OMEGA0, PARAMS, jnp.asarray(h))
    start = time.perf_counter()
    compiled = jit(run).lower(*args).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    q, omega, ok = jax.block_until_ready(compiled(*args))
    first = time.perf_counter() - start
    energy_error, unit_error = errors(q, omega)
    point = {
        "method": name,
        "T": horizon,
        "h": h,
        "save_spacing_s": save_every * h,
        "num_steps": num_steps,
        "successful": bool(ok),
        "first_run_s": first,
        "compile_s": compile_s,
        "energy_error": energy_error,
        "unit_length_error": unit_error,
    }
    print(
        f"  prepared T={horizon:g} {name} h={h:g}: "
        f"E-err {energy_error:.2e}, first run {first:.3g} s",
        flush=True,
    )
    return point, lambda: compiled(*args), first


def compiled_diffrax_solve(solver, horizon, spacing):
    system = s2.LagrangianSystem(dsp.lagrangian)
    ts = jnp.linspace(0.0, horizon, int(round(horizon / spacing)) + 1)

    def run(q0, omega0, params, tol):
        sol = diffrax_solve(
            system,
            system.prepare(q0, params),
            (q0, omega0),
            horizon,
            solver,
            rtol=tol,
            atol=tol,
            dt0=0.01,
            max_steps=10_000_000,
            saveat=diffrax.SaveAt(ts=ts),
            throw=False,
        )
        return sol.ys, sol.stats["num_steps"], sol.result == diffrax.RESULTS.successful

    args = (Q0, OMEGA0, PARAMS, jnp.asarray(1e-8))
    return jit(run).lower(*args).compile()


def adaptive_jobs(name, solver, horizon, tols):
    start = time.perf_counter()
    accurate = compiled_diffrax_solve(solver, horizon, SAVE_SPACING)
    fast = compiled_diffrax_solve(solver, horizon, TIMED_SAVE_SPACING_DIFFRAX)
    compile_s = time.perf_counter() - start
    jobs = []
    for tol in tols:
        args = (Q0, OMEGA0, PARAMS, jnp.asarray(tol))
        start = time.perf_counter()
        (q, omega), num_steps, ok = jax.block_until_ready(accurate(*args))
        first = (time.perf_counter() - start) / 2  # the 0.1-s grid roughly doubles the time
        energy_error, unit_error = errors(q, omega)
        point = {
            "method": name,
            "T": horizon,
            "tol": float(tol),
            "num_steps": int(num_steps),
            "successful": bool(ok),
            "first_run_s": first,
            "compile_s": compile_s,
            "energy_error": energy_error,
            "unit_length_error": unit_error,
        }
        jobs.append((point, lambda args=args: fast(*args), first))
    print(f"  prepared T={horizon:g} {name}: {len(tols)} tolerances", flush=True)
    return jobs


def report(p):
    setting = f"h={p['h']:<7g}" if "h" in p else f"tol={p['tol']:<7.1e}"
    flag = "" if p["successful"] else "  FAILED"
    print(
        f"  T={p['T']:<7g} {p['method']:13s} {setting:12s} steps {p['num_steps']:>8d}  "
        f"wall {p['wall_s']:8.4f} s (n={len(p['times_s'])})  E-err {p['energy_error']:.2e}  "
        f"unit {p['unit_length_error']:.1e}{flag}",
        flush=True,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="first settings at T = 1 s and 100 s, to check it runs")
    parser.add_argument("--horizon", type=float, choices=HORIZONS, help="only this horizon")
    parser.add_argument("--methods", nargs="+", choices=[*FIXED_STEP, *ADAPTIVE], help="only these methods")
    options = parser.parse_args()
    quick = options.quick
    subset = options.horizon is not None or options.methods is not None
    methods = set(options.methods or [*FIXED_STEP, *ADAPTIVE])
    start_all = time.perf_counter()
    print(f"E0 = {E0:.6f}")
    points = []
    load = {"before": os.getloadavg()}
    for horizon in [options.horizon] if options.horizon else HORIZONS:
        # A quick run takes each method's first setting over a hundredth of the horizon.
        T = horizon / 100 if quick else horizon
        first = 1 if quick else None
        jobs = [
            fixed_step_job(name, integrator, T, h)
            for name, (integrator, _, steps) in FIXED_STEP.items()
            if name in methods
            for h in steps[horizon][:first]
        ]
        for name, (solver, tols) in ADAPTIVE.items():
            if name in methods:
                jobs += adaptive_jobs(name, solver, T, tols[horizon][:first])
        print(f"timing {len(jobs)} points at T = {T:g} s (repeats interleaved)", flush=True)
        time_interleaved(jobs)
        for point, _, _ in jobs:
            report(point)
            points.append(point)
        load[f"after_T{T:g}"] = os.getloadavg()
    total = time.perf_counter() - start_all
    path = write(
        "work_precision_subset" if subset else "work_precision",
        {
            "method": (
                "wall time: median of 7 (runs < 1 s), 5 (< 10 s) or 3 (≥ 10 s) runs of an "
                "ahead-of-time compiled function, repeats interleaved round-robin over the points "
                "of one horizon; errors: max over states saved every 0.1 s (diffrax: dense output "
                "on that grid, from an untimed run; its timed runs save every 1 s)"
            ),
            "E0": E0,
            "save_spacing_s": SAVE_SPACING,
            "targets": TARGETS,
            "structure_preserving": STRUCTURE_PRESERVING,
            "total_runtime_s": total,
            "load_average_1_5_15_min": load,
            "points": points,
        },
        quick=quick,
    )
    print(f"wrote {path} in {total:.0f} s; summary and figure: python benchmarks/plot_work_precision.py {path}")


if __name__ == "__main__":
    main()
