"""Summary and figure of the work–precision measurements of `work_precision.py`, read from its JSON.

    python benchmarks/plot_work_precision.py [JSON]   # default: benchmarks/results/work_precision.json

Nothing is measured here, so a recorded JSON can be summarised and drawn again. The summary is
printed and stored in the JSON (`summary`, `summary_text`); the figure, wall time against max
energy error and against max unit-length error at each horizon, goes beside the JSON (same
name, .png).

The summary evaluates the targets of issue 5 from measured points only (no interpolation): for
each target relative energy error ε (the JSON's `targets`, 1e-4 … 1e-8) at the longest horizon,
T = 10⁴ s, the fastest structure-preserving s2jax point (the JSON's `structure_preserving`: the
VIs and Lie group methods) with error ≤ ε against Tsit5 and Dopri8 at the loosest measured
tolerance with error ≤ ε; where no structure-preserving point reaches ε, a log–log extrapolation
of each method's two most accurate points is printed and labelled as such. Then the growth ratio
E-error(T = 10⁴ s) / E-error(T = 100 s) of every method at each step (or tolerance) measured at
both horizons.
"""

import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from _common import RESULTS  # noqa: E402

VARIATIONAL = ("VI", "VI-4", "VI-6")  # target 2 bounds their growth ratio
ERROR_CAP = 10.0  # in the figure only
COLOURS = {
    "VI": "tab:blue",
    "VI-4": "tab:orange",
    "VI-6": "tab:green",
    "VI-6KL": "darkgreen",
    "VI-8KL": "navy",
    "RATTLE-6KL": "limegreen",  # the maps of VI-6KL and VI-8KL, computed by `Rattle`
    "RATTLE-8KL": "dodgerblue",
    "LieEuler": "tab:olive",
    "LieEulerHeun": "tab:cyan",
    "RKMK3": "tab:pink",
    "RKMK4": "tab:purple",
    "CFRK4": "tab:brown",
    "RK4": "tab:gray",
    "Tsit5": "tab:red",
    "Dopri8": "black",
}


def horizons(points):
    return sorted({p["T"] for p in points})


def methods(points):
    """`(fixed_step, adaptive)` method names, in the order they were measured."""
    names = list(dict.fromkeys(p["method"] for p in points))
    adaptive = {p["method"] for p in points if "tol" in p}
    return [m for m in names if m not in adaptive], [m for m in names if m in adaptive]


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


def summarise(points, targets, structure_preserving):
    lines = []
    verdicts = {}
    fixed_step, adaptive = methods(points)
    horizon = horizons(points)[-1]
    lines.append(f"Target 1 (T = {horizon:g} s, measured points only, no interpolation):")
    for eps in targets:
        sp = [p for p in (reaching(points, m, horizon, eps) for m in structure_preserving) if p]
        best = min(sp, key=lambda p: p["wall_s"]) if sp else None
        rivals = {m: reaching(points, m, horizon, eps) for m in adaptive}
        rival_text = ", ".join(
            f"{label(r)} {r['wall_s']:.3g} s" if r else f"{m} not reached"
            for m, r in rivals.items()
        )
        if best is None:
            guesses = {m: extrapolated_time(points, m, horizon, eps) for m in structure_preserving}
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
    for method in fixed_step + adaptive:
        key = "tol" if method in adaptive else "h"
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
                and s["T"] == horizons(points)[0]
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
        (g["ratio"] for m in VARIATIONAL for g in growth.get(m, [])), default=np.nan
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


def plot(points, targets, structure_preserving, path):
    fig, axes = plt.subplots(2, 2, figsize=(12, 9.5), sharey="row")
    for row, horizon in enumerate(horizons(points)):
        for col, (key, title) in enumerate(
            (("energy_error", "max |E − E₀| / |E₀|"), ("unit_length_error", "max ||q_i| − 1|"))
        ):
            ax = axes[row, col]
            for method in sum(methods(points), []):  # every measured method: one without a colour fails
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
                sp = method in structure_preserving
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
            if key == "energy_error" and horizon == horizons(points)[-1]:
                ax.axvspan(min(targets), max(targets), color="0.9", zorder=0)
                ax.text(
                    min(targets) * 1.3,
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


def main(path: pathlib.Path) -> None:
    payload = json.loads(path.read_text())
    args = (payload["points"], payload["targets"], payload["structure_preserving"])
    lines, payload["summary"] = summarise(*args)
    payload["summary_text"] = lines
    print("\n".join(lines))
    path.write_text(json.dumps(payload, indent=2))
    figure = path.with_suffix(".png")
    plot(*args, figure)
    print(f"wrote the summary into {path} and the figure to {figure}")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS / "work_precision.json")
