"""Work–precision diagrams on the double spherical pendulum: wall time against max energy error
and against max unit-length error, for T = 100 s and T = 10⁴ s, for every integrator.

    python benchmarks/work_precision.py              # measure, write JSON and PNG
    python benchmarks/work_precision.py --reanalyse  # summary and PNG again from the JSON's points

System: the double spherical pendulum of 002 Example 1 from its paper state (E₀ = −72.18 J).
Methods: s2jax's VariationalIntegrator (VI, order 2), its triple-jump compositions VI-4 and
VI-6, the Lie group methods LieEuler, LieEulerHeun, RKMK3, RKMK4, CommutatorFreeRK4 (CFRK4),
plain RungeKutta4 (RK4, not structure-preserving), each at several fixed steps h; and diffrax
Tsit5 and Dopri8 on the same equations (2.9)–(2.11) (`LagrangianSystem.vector_field`) with
`PIDController(rtol = atol = tol)` at several tolerances. float64, CPU, one process.

Errors: max_k |E_k − E₀| / |E₀| and max_k max_i ||q_i| − 1| over states saved every 0.1 s of
simulated time (10⁵ states at T = 10⁴ s). The max over saved states slightly underestimates the
max over all steps: for VI and VI-4 the 0.1-s max is within 2 % of the every-step max at T = 100,
10³, 10⁴ s, while a 1-s grid misses up to 30 % at T = 100 s (and would inflate the growth ratios
below). diffrax's states on the 0.1-s grid come from its dense output (interpolation).

Wall time: each measured function is `jax.jit(...).lower(...).compile()`d ahead of time, so
compilation is excluded; the fixed-step methods call `s2.simulate` inside the jitted function
(the 0.1-s grid is what they save; the cost of saving is within noise). For the fixed-step
methods the first, untimed run of the compiled function gives the states for the errors; for
diffrax an untimed run of the same solve with `SaveAt(ts=0.1-s grid)` gives them, and the timed
solve saves on a 1-s grid (evaluating the dense output at 10⁵ points would double diffrax's time;
measured). Then medians of 7 runs (runs < 1 s), 5 runs (< 10 s) or 3 runs (≥ 10 s); the
repeats go round-robin over all points of one horizon, so that the load of other processes on a
shared machine falls on all methods alike (the load averages are recorded in the JSON).

The summary printed at the end evaluates the targets of issue 5 from measured points only (no
interpolation): for each target relative energy error ε ∈ {1e-4, …, 1e-8} at T = 10⁴ s, the
fastest structure-preserving s2jax point (VIs and Lie group methods) with error ≤ ε against
Tsit5 and Dopri8 at the loosest measured tolerance with error ≤ ε; where no structure-preserving
point reaches ε, a log–log extrapolation of each method's two most accurate points is printed
and labelled as such. Then the growth ratio E-error(T = 10⁴) / E-error(T = 100) of every method
at each step (or tolerance) measured at both horizons.

Results go to benchmarks/results/work_precision.json and work_precision.png. The recorded run
took 956 s on 2 CPU cores shared with other jobs (load average ≈ 4), compilation included.
"""

import json
import os
import statistics
import sys
import time

import diffrax
import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from _common import RESULTS, write  # noqa: E402

import s2jax as s2  # noqa: E402

dsp = s2.models.double_spherical_pendulum
Q0, OMEGA0 = (jnp.asarray(x) for x in dsp.paper_state())
PARAMS = {k: jnp.asarray(v) for k, v in dsp.paper_params().items()}
E0 = float(s2.energy(dsp.lagrangian, Q0, OMEGA0, PARAMS))
HORIZONS = (100.0, 10_000.0)
SAVE_SPACING = 0.1  # s of simulated time between the states the errors are taken over
TIMED_SAVE_SPACING_DIFFRAX = 1.0
TARGETS = (1e-4, 1e-5, 1e-6, 1e-7, 1e-8)
ERROR_CAP = 10.0  # in the figure only

VI = s2.VariationalIntegrator()
# name: (integrator, structure-preserving, {T: steps h}); every h divides SAVE_SPACING.
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
            10_000.0: [1e-6, 1e-8, 1e-10, 1e-12],
        },
    ),
    "Dopri8": (
        diffrax.Dopri8(),
        {
            100.0: [10.0**-k for k in np.arange(3.0, 12.01, 0.5)],
            10_000.0: [1e-6, 1e-8, 1e-10, 1e-12],
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


def fixed_step_job(name, integrator, horizon, h):
    num_steps = int(round(horizon / h))
    save_every = int(round(SAVE_SPACING / h))

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
    compiled = jax.jit(run).lower(*args).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    q, omega, ok = jax.block_until_ready(compiled(*args))
    first = time.perf_counter() - start
    energy_error, unit_error = errors(q, omega)
    point = {
        "method": name,
        "T": horizon,
        "h": h,
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


def diffrax_solve(solver, horizon, spacing):
    system = s2.LagrangianSystem(dsp.lagrangian)
    ts = jnp.linspace(0.0, horizon, int(round(horizon / spacing)) + 1)

    def run(q0, omega0, params, tol):
        inertia = system.inertia(q0, params)
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, y, args: system.vector_field(*y, params, inertia)),
            solver,
            t0=0.0,
            t1=horizon,
            dt0=0.01,
            y0=(q0, omega0),
            saveat=diffrax.SaveAt(ts=ts),
            stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
            max_steps=10_000_000,
            throw=False,
        )
        return sol.ys, sol.stats["num_steps"], sol.result == diffrax.RESULTS.successful

    args = (Q0, OMEGA0, PARAMS, jnp.asarray(1e-8))
    return jax.jit(run).lower(*args).compile()


def adaptive_jobs(name, solver, horizon, tols):
    start = time.perf_counter()
    accurate = diffrax_solve(solver, horizon, SAVE_SPACING)
    fast = diffrax_solve(solver, horizon, TIMED_SAVE_SPACING_DIFFRAX)
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


def reaching(points, method, horizon, eps):
    ok = [
        p
        for p in points
        if p["method"] == method
        and p["T"] == horizon
        and p["successful"]
        and p["energy_error"] <= eps
    ]
    if not ok:
        return None
    if "tol" in ok[0]:  # the loosest tolerance that reaches eps
        return max(ok, key=lambda p: p["tol"])
    return min(ok, key=lambda p: p["wall_s"])


def extrapolated_time(points, method, horizon, eps):
    """log–log extrapolation through a method's two most accurate points (labelled as such)."""
    ps = sorted(
        (p for p in points if p["method"] == method and p["T"] == horizon and p["successful"]),
        key=lambda p: p["energy_error"],
    )
    if len(ps) < 2 or ps[0]["energy_error"] >= ps[1]["energy_error"]:
        return None
    (e1, t1), (e2, t2) = ((p["energy_error"], p["wall_s"]) for p in ps[:2])
    slope = np.log(t1 / t2) / np.log(e1 / e2)
    return float(t1 * (eps / e1) ** slope)


def label(p):
    return f"{p['method']} h={p['h']:g}" if "h" in p else f"{p['method']} tol={p['tol']:.0e}"


def summarise(points):
    lines = []
    verdicts = {}
    horizon = HORIZONS[-1]
    lines.append(f"Target 1 (T = {horizon:g} s, measured points only, no interpolation):")
    for eps in TARGETS:
        sp = [p for p in (reaching(points, m, horizon, eps) for m in STRUCTURE_PRESERVING) if p]
        best = min(sp, key=lambda p: p["wall_s"]) if sp else None
        rivals = {m: reaching(points, m, horizon, eps) for m in ADAPTIVE}
        rival_text = ", ".join(
            f"{label(r)} {r['wall_s']:.3g} s" if r else f"{m} not reached"
            for m, r in rivals.items()
        )
        if best is None:
            guesses = {m: extrapolated_time(points, m, horizon, eps) for m in STRUCTURE_PRESERVING}
            guesses = {m: t for m, t in guesses.items() if t is not None}
            m = min(guesses, key=guesses.get) if guesses else None
            sp_text = "no structure-preserving point reaches it" + (
                f" (extrapolated: {m} ≈ {guesses[m]:.3g} s)" if m else ""
            )
            met = False
        else:
            sp_text = f"fastest structure-preserving: {label(best)} {best['wall_s']:.3g} s"
            met = all(r is None or best["wall_s"] < r["wall_s"] for r in rivals.values())
        reached = [r["wall_s"] for r in rivals.values() if r]
        ratio = (
            f"; time ratio SP / fastest diffrax = {best['wall_s'] / min(reached):.1f}"
            if best and reached
            else ""
        )
        verdicts[f"{eps:.0e}"] = {
            "met": met,
            "structure_preserving": best and label(best),
            "structure_preserving_s": best and best["wall_s"],
            **{
                m: r and {"tol": r["tol"], "wall_s": r["wall_s"], "energy_error": r["energy_error"]}
                for m, r in rivals.items()
            },
        }
        lines.append(
            f"  ε = {eps:.0e}: {sp_text}; {rival_text}{ratio} → {'MET' if met else 'NOT MET'}"
        )

    lines.append(
        "Target 2: growth ratio E-error(T = 1e4 s) / E-error(T = 100 s) at matched step or tol:"
    )
    growth = {}
    for method in list(FIXED_STEP) + list(ADAPTIVE):
        key = "tol" if method in ADAPTIVE else "h"
        pairs = []
        failed = []
        for p in points:
            if p["method"] != method or p["T"] != horizon:
                continue
            if not p["successful"]:
                failed.append(f"{key}={p[key]:g}: failed (non-finite) at T = {horizon:g} s")
                continue
            short = [
                s
                for s in points
                if s["method"] == method
                and s["T"] == HORIZONS[0]
                and np.isclose(s[key], p[key], rtol=1e-9, atol=0.0)
            ]
            if short:
                pairs.append((p[key], short[0]["energy_error"], p["energy_error"]))
        growth[method] = [{key: k, "T100": a, "T1e4": b, "ratio": b / a} for k, a, b in pairs]
        text = ", ".join(
            [f"{key}={k:g}: {a:.1e} → {b:.1e} (×{b / a:.3g})" for k, a, b in pairs] + failed
        )
        lines.append(f"  {method:13s} {text}")
    vi_max = max(
        (g["ratio"] for m in ("VI", "VI-4", "VI-6") for g in growth.get(m, [])), default=np.nan
    )
    lines.append(
        f"  VIs: max ratio {vi_max:.2f} → {'MET' if vi_max <= 2 else 'NOT MET'} (target ≤ 2)"
    )
    return lines, {
        "target_1": verdicts,
        "growth": growth,
        "target_2_met": bool(vi_max <= 2),
        "vi_max_growth": float(vi_max),
    }


COLOURS = {
    "VI": "tab:blue",
    "VI-4": "tab:orange",
    "VI-6": "tab:green",
    "LieEuler": "tab:olive",
    "LieEulerHeun": "tab:cyan",
    "RKMK3": "tab:pink",
    "RKMK4": "tab:purple",
    "CFRK4": "tab:brown",
    "RK4": "tab:gray",
    "Tsit5": "tab:red",
    "Dopri8": "black",
}


def plot(points, path):
    fig, axes = plt.subplots(2, 2, figsize=(12, 9.5), sharey="row")
    for row, horizon in enumerate(HORIZONS):
        for col, (key, title) in enumerate(
            (("energy_error", "max |E − E₀| / |E₀|"), ("unit_length_error", "max ||q_i| − 1|"))
        ):
            ax = axes[row, col]
            for method in COLOURS:
                ps = sorted(
                    (
                        p
                        for p in points
                        if p["method"] == method and p["T"] == horizon and p["successful"]
                    ),
                    key=lambda p: -p.get("h", p.get("tol")),
                )
                if not ps:
                    continue
                sp = method in STRUCTURE_PRESERVING
                # Errors above ERROR_CAP (Lie–Euler's energy blows up) are drawn at the cap.
                ax.plot(
                    [min(max(p[key], 1e-17), ERROR_CAP) for p in ps],
                    [p["wall_s"] for p in ps],
                    color=COLOURS[method],
                    ls="-" if sp else "--",
                    marker="o" if sp else ("s" if method == "RK4" else "^"),
                    ms=5,
                    label=method,
                )
            if key == "energy_error" and horizon == HORIZONS[-1]:
                ax.axvspan(min(TARGETS), max(TARGETS), color="0.9", zorder=0)
                ax.text(
                    min(TARGETS) * 1.3,
                    0.97,
                    "targets 1e-8 … 1e-4",
                    transform=ax.get_xaxis_transform(),
                    fontsize=8,
                    va="top",
                    color="0.4",
                )
            if key == "energy_error":
                ax.axvline(ERROR_CAP, color="0.6", lw=0.8, ls=":")
                failed = [label(p) for p in points if p["T"] == horizon and not p["successful"]]
                if failed:
                    ax.text(
                        0.98,
                        0.98,
                        "not shown (non-finite): " + ", ".join(failed),
                        fontsize=8,
                        ha="right",
                        va="top",
                        transform=ax.transAxes,
                        color="0.3",
                    )
            ax.set(xscale="log", yscale="log", xlabel=title, title=f"T = {horizon:g} s")
            ax.grid(True, which="major", alpha=0.3)
            if col == 0:
                ax.set_ylabel("wall time [s]")
    axes[0, 0].legend(fontsize=8, ncol=2)
    fig.suptitle(
        "Double spherical pendulum: work–precision (float64, CPU; "
        "solid = structure-preserving s2jax, dashed = RK4 / diffrax; "
        f"energy errors > {ERROR_CAP:g} drawn at {ERROR_CAP:g}, dotted line)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    start_all = time.perf_counter()
    print(f"E0 = {E0:.6f}")
    points = []
    load = {"before": os.getloadavg()}
    for horizon in HORIZONS:
        jobs = [
            fixed_step_job(name, integrator, horizon, h)
            for name, (integrator, _, steps) in FIXED_STEP.items()
            for h in steps[horizon]
        ]
        for name, (solver, tols) in ADAPTIVE.items():
            jobs += adaptive_jobs(name, solver, horizon, tols[horizon])
        print(f"timing {len(jobs)} points at T = {horizon:g} s (repeats interleaved)", flush=True)
        time_interleaved(jobs)
        for point, _, _ in jobs:
            report(point)
            points.append(point)
        load[f"after_T{horizon:g}"] = os.getloadavg()
    lines, summary = summarise(points)
    print("\n".join(lines))
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(points, RESULTS / "work_precision.png")
    total = time.perf_counter() - start_all
    path = write(
        "work_precision",
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
            "summary": summary,
            "summary_text": lines,
            "points": points,
        },
    )
    print(f"wrote {path} and {RESULTS / 'work_precision.png'} in {total:.0f} s")


if __name__ == "__main__":
    if "--reanalyse" in sys.argv:  # redo the summary and the figure from the JSON's measured points
        path = RESULTS / "work_precision.json"
        payload = json.loads(path.read_text())
        lines, payload["summary"] = summarise(payload["points"])
        payload["summary_text"] = lines
        print("\n".join(lines))
        plot(payload["points"], RESULTS / "work_precision.png")
        path.write_text(json.dumps(payload, indent=2))
    else:
        main()
