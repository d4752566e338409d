"""µs per step of this checkout's s2jax against another revision's, in one process.

    python benchmarks/compare_revisions.py --before REV

A refactoring that claims "no slowdown" is checked here: the package at REV is exported
(`git archive`) into a temporary folder and imported under the name `s2jax_before`, beside
this checkout's `s2jax`, so both run in the same process on the same machine state. The two
are timed in alternation (before, after, before, after, …) to spread the machine's noise
evenly, on the step_cost systems: 002 Example 1 (implicit VI, RK4) and Example 2 (explicit VI), and with
`--chains 4,8,…` chain pendula of those link counts (`chain_pendulum.paper_state(n)`, VI, RK4,
and Rattle), with `--dense 16,64,…` `dense_inertia.py`'s constant dense M of those sizes (VI, RK4 and
Rattle, saving every step and only the last); `--name` names the results file (default compare_revisions).
Each time is the median of 15 runs of 10⁴ steps through `simulate` (the call, checks included).
A refactoring that claims "no numerics change" is checked too: each row says whether the final
states of the two revisions are equal bit for bit. Writes benchmarks/results/compare_revisions.json.
"""

import argparse
import importlib
import pathlib
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import dense_inertia  # noqa: E402
from _common import write  # noqa: E402

import s2jax  # noqa: E402

NUM_STEPS = 10_000
REPEATS = 15


def _import_revision(revision: str, folder: pathlib.Path):
    """The s2jax package at `revision`, imported as `s2jax_before`."""
    root = pathlib.Path(__file__).resolve().parents[1]
    archive = folder / "before.tar"
    subprocess.run(["git", "-C", str(root), "archive", "-o", str(archive), revision, "s2jax"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    (folder / "s2jax").rename(folder / "s2jax_before")
    sys.path.insert(0, str(folder))
    return importlib.import_module("s2jax_before")


def _problem(package, model_name, *links):
    """(L, q0, ω0, params) of a paper model, or of `dense_inertia.model(n)` for "dense"."""
    if model_name == "dense":
        lagrangian, params, q0, omega0 = dense_inertia.model(*links)
        return lagrangian, q0, omega0, params
    model = getattr(package.models, model_name)
    return (model.lagrangian, *model.paper_state(*links), model.paper_params(*links))


def _runner(package, model_name, integrator_name, dt, *links, save_every=NUM_STEPS):
    lagrangian, q0, omega0, params = _problem(package, model_name, *links)
    integrator = getattr(package, integrator_name)()

    def run():
        return package.simulate(
            lagrangian, q0, omega0, params, dt=dt, num_steps=NUM_STEPS, save_every=save_every, integrator=integrator,
        ).q

    jax.block_until_ready(run())  # compile
    return run


def _once(run) -> float:
    start = time.perf_counter()
    jax.block_until_ready(run())
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the git revision to compare against")
    parser.add_argument(
        "--chains", default="", help="also chain pendula of these link counts, e.g. 4,8,16 (VI, RK4, Rattle)"
    )
    parser.add_argument(
        "--dense", default="", help="also a constant dense M of these sizes, e.g. 16,64 (VI, RK4, Rattle)"
    )
    parser.add_argument("--name", default="compare_revisions", help="the results file's name")
    args = parser.parse_args()
    cases = {
        "double_spherical_pendulum VariationalIntegrator": ("double_spherical_pendulum", "VariationalIntegrator", 0.01),
        "double_spherical_pendulum RungeKutta4": ("double_spherical_pendulum", "RungeKutta4", 0.01),
        "n_body_on_sphere ExplicitVariationalIntegrator": ("n_body_on_sphere", "ExplicitVariationalIntegrator", 1e-3),
    }
    for links in (int(n) for n in args.chains.split(",") if n):
        for integrator in ("VariationalIntegrator", "RungeKutta4", "Rattle"):
            cases[f"chain_pendulum n={links} {integrator}"] = ("chain_pendulum", integrator, 0.01, links)
    for n in (int(n) for n in args.dense.split(",") if n):
        for integrator in ("VariationalIntegrator", "RungeKutta4", "Rattle"):
            for saves, every in (("every step", 1), ("the last step", NUM_STEPS)):
                cases[f"dense n={n} {integrator} saving {saves}"] = (
                    "dense", integrator, dense_inertia.DT, n, {"save_every": every}
                )
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        before = _import_revision(args.before, pathlib.Path(folder))
        for label, case in cases.items():
            *case, options = case if isinstance(case[-1], dict) else (*case, {})
            runs = {"before": _runner(before, *case, **options), "after": _runner(s2jax, *case, **options)}
            bitwise = bool(np.array_equal(np.asarray(runs["before"]()), np.asarray(runs["after"]())))
            times = {"before": [], "after": []}
            for _ in range(REPEATS):
                for name, run in runs.items():
                    times[name].append(_once(run))
            us = {name: 1e6 * statistics.median(t) / NUM_STEPS for name, t in times.items()}
            results[label] = {
                "before_us_per_step": us["before"],
                "after_us_per_step": us["after"],
                "after_over_before": us["after"] / us["before"],
                "bitwise_equal": bitwise,
                "before_runs_s": times["before"],
                "after_runs_s": times["after"],
            }
            print(f"{label:50s} before {us['before']:6.3f} µs/step  after {us['after']:6.3f}  "
                  f"ratio {us['after'] / us['before']:.3f}  bitwise equal: {bitwise}")
    root = pathlib.Path(__file__).resolve().parents[1]
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", args.before], capture_output=True, text=True)
    path = write(
        args.name,
        {
            "before": args.before, "before_commit": commit.stdout.strip(),
            "method": f"medians of {REPEATS} alternating runs of 1e4 steps", "results": results,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
