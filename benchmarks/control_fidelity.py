"""Continuous-time miss of the ready control examples against cost and solve time (issue 31, item 1).

    python benchmarks/control_fidelity.py [--quick] [--repeats 5] [--examples swing_up,pendubot,chain]

For each ready example (`s2.control.examples`: the spherical pendulum's and the pendubot's swing-ups,
001 §V's chain against a tip force), solved by iLQR from the example's own guess, for each
discretisation of the dynamics:

- `simulate`'s integrator (the VI of 002) at 1, 2, 4 and 8 sub-steps per control step
  (`Problem(substeps=…)`, `fidelity=None`),
- its 4th-order triple-jump composition (`s2.Composition(…, order=4)`), and `s2.Rattle()` (the same
  map as the VI, cheaper to compile and step),
- the default: `fidelity=1e-2`, which `solve` meets by refining the sub-steps itself, of the
  control plan's integrator (`Rattle` for the pendubot and the chain, the explicit VI for the
  spherical pendulum),

the cost J, the result, the sub-steps used, the continuous-time miss (`ControlSolution.continuous_miss`:
the distance, over the control instants and bodies, between the model's trajectory and the continuous
system driven by the same held controls, in q and in ω), the first call's time (tracing, compiling
and solving; the default's includes its refinement) and the median of `--repeats` solves after it,
the discretisations' runs interleaved round-robin. The default's first call is also measured in
a fresh process (`first_call_fresh_process_s`): in this one it reuses the programs of the variants
before it. Results: benchmarks/results/control_fidelity.json
with the machine and the load before and after.
"""

import argparse
import dataclasses
import os
import subprocess
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

from _common import interleaved_medians, write  # noqa: E402

import s2jax as s2  # noqa: E402
from s2jax.control import examples  # noqa: E402

EXAMPLES = {
    "swing_up": examples.spherical_pendulum_swing_up,
    "pendubot": examples.double_pendulum_swing_up,
    "chain": examples.chain_with_disturbance,
}


def discretisations(problem, q0, omega0) -> dict:
    """name → the problem with that discretisation."""
    # simulate's integrator (002's VI), which the default plan of a control problem replaces by
    # `Rattle`, the same map, where M is coupled (`AutoIntegrator(linearised=True)`).
    unchecked = dataclasses.replace(problem, fidelity=None, integrator=s2.AutoIntegrator())
    base = unchecked.plan(q0, omega0).integrator
    variants = {f"{type(base).__name__}, {s} sub-step(s)": unchecked.with_substeps(s) for s in (1, 2, 4, 8)}
    variants[f"Composition({type(base).__name__}, 4)"] = dataclasses.replace(
        unchecked, integrator=s2.Composition(base, order=4)
    )
    variants["Rattle"] = dataclasses.replace(unchecked, integrator=s2.Rattle())
    variants["default: fidelity 1e-2, refined by solve"] = problem
    return variants


def fresh_first_call(name) -> float:
    """The default solve's first call in a fresh Python process (nothing compiled in memory, JAX's
    persistent cache off): what a user waits for. In this process the default shares programs
    with the variants solved before it (the same integrator and sub-steps), so its first call
    here is not that."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_COMPILATION_CACHE_DIR", "S2JAX_CACHE_DIR")}
    out = subprocess.run(
        [sys.executable, __file__, "--first-call", name], env=env, capture_output=True, text=True, check=True
    ).stdout
    return float(out.strip().splitlines()[-1])


def _first_call(name):
    problem, q0, omega0, init = EXAMPLES[name]()
    start = time.perf_counter()
    jax.block_until_ready(s2.control.solve(problem, q0, omega0, solver=s2.control.ILQR(), init=init, throw=False))
    print(time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="one example, one repeat: a check, not a result")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--examples", default=",".join(EXAMPLES))
    parser.add_argument("--first-call", choices=list(EXAMPLES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.first_call:
        return _first_call(args.first_call)
    names = ["swing_up"] if args.quick else args.examples.split(",")
    repeats = 1 if args.quick else args.repeats
    load_before = os.getloadavg()
    results = {}
    for name in names:
        problem, q0, omega0, init = EXAMPLES[name]()
        fresh = fresh_first_call(name)
        print(f"{name:9s} default's first call in a fresh process: {fresh:.1f} s", flush=True)
        rows = {}
        solves = {}
        for label, variant in discretisations(problem, q0, omega0).items():

            def solve(variant=variant):
                return s2.control.solve(variant, q0, omega0, solver=s2.control.ILQR(), init=init, throw=False)

            start = time.perf_counter()
            solution = jax.block_until_ready(solve())
            first = time.perf_counter() - start
            rows[label] = {
                "cost": float(solution.cost),
                "result": s2.RESULTS[solution.result] or "successful",
                "successful": bool(solution.result == s2.RESULTS.successful),
                "substeps": solution.substeps,
                "continuous_miss": float(solution.continuous_miss),
                "iterations": int(solution.num_iterations),
                "first_call_s": first,
            }
            if variant is problem:
                rows[label]["first_call_fresh_process_s"] = fresh
            solves[label] = solve
            print(f"{name:9s} {label:45s} J = {rows[label]['cost']:.6f}  miss {rows[label]['continuous_miss']:.2e}  "
                  f"substeps {solution.substeps}  first {first:.1f} s", flush=True)
        for label, (median, times) in interleaved_medians(solves, repeats=repeats).items():
            rows[label]["solve_median_s"] = median
            rows[label]["solve_times_s"] = times
            print(f"{name:9s} {label:45s} solve {median:.3f} s", flush=True)
        results[name] = rows
    load_after = os.getloadavg()
    path = write(
        "control_fidelity",
        {
            "command": "python benchmarks/control_fidelity.py" + (" --quick" if args.quick else ""),
            "repeats": repeats,
            "load_before": load_before,
            "load_after": load_after,
            "results": results,
        },
        quick=args.quick,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
