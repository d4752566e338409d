"""Trajectory optimisation: iterations and wall time to converge, after compiling.

A case is `problem/solver/dynamics`:

- problems: the three examples of `s2jax.control.examples` (`swing_up`, `pendubot`, `chain`)
  and a short smooth problem (`reach`, as in `tests/test_control.py`);
- solvers: `ILQR`, `SingleShooting` (L-BFGS), `MultipleShooting` (6 segments; 4 for `reach`,
  5 for `chain`);
- dynamics: `vi` (the variational integrator) or `tsit5` (single shooting only: one diffrax
  Tsit5 step of the continuous equations per step, the same optimiser);
- `batch`: 64 swing-ups (`--batch-size`) from random states near hanging at rest in one
  `jax.vmap`ped call, against single solves of the same states.

Each case compiles, then times up to 5 solves (the median is reported), stopping early once
`--budget` seconds are spent (the row says how many runs its median is of).

The Tsit5 baseline is an s2jax integrator whose step is one `diffrax.Tsit5` step of the
continuous equations (002 (2.9)–(2.11) with the forces) from the same `AbstractSystem`; the
controls jump at every step (zero-order hold), so each step starts afresh (no FSAL reuse),
which is Tsit5's correct use across a jump.

Run: `python benchmarks/control.py [CASE ...] [--budget S] [--part NAME]` (no case: all of
them, one after another, into results/control.json; with `--part`, into
results/control_parts/NAME.json), `python benchmarks/control.py --merge` (the parts into
results/control.json), `python benchmarks/control.py --quick` (a check that it works).
`benchmarks/control_parallel.sh` runs the parts side by side, two pinned cores each.
"""

import argparse
import dataclasses
import json
import statistics
import time
from typing import ClassVar

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from _common import RESULTS, jit, machine, write  # noqa: E402

import s2jax as s2  # noqa: E402
from s2jax.control import examples  # noqa: E402
from s2jax.models import spherical_pendulum  # noqa: E402


class Tsit5Step(s2.AbstractIntegrator):
    """One diffrax Tsit5 step of the continuous (q, ω) equations per step (q drifts off S²)."""

    order: ClassVar[int] = 5
    is_symmetric: ClassVar[bool] = False
    requires_diagonal_inertia: ClassVar[bool] = False
    velocity_dependent_forces: ClassVar[bool] = True

    def init(self, system, t0, y0, args):
        return None

    def step(self, system, t0, dt, y, args, state):
        term = diffrax.ODETerm(lambda t, y, args: system.vector_field(t, *y, args))
        solver = diffrax.Tsit5()
        solver_state = solver.init(term, t0, t0 + dt, y, args)
        y1, *_ = solver.step(term, t0, t0 + dt, y, args, solver_state, made_jump=True)
        finite = jnp.all(jnp.isfinite(y1[0])) & jnp.all(jnp.isfinite(y1[1]))
        return y1, None, s2.RESULTS.where(finite, s2.RESULTS.successful, s2.RESULTS.nonfinite_state)


def reach_problem():
    target = jnp.array([[0.6, 0.0, 0.8]])
    problem = s2.control.Problem(
        spherical_pendulum.lagrangian, {"m": 1.0, "r": 1.0, "g": 9.81}, s2.forces.PivotTorque(0), 0.02, 20,
        running_cost=lambda t, q, omega, u: jnp.sum(u**2),
        terminal_cost=lambda q, omega: 100.0 * jnp.sum((q - target) ** 2) + jnp.sum(omega**2),
    )
    return problem, np.array([[0.0, 0.6, 0.8]]), np.zeros((1, 3)), None


PROBLEMS = {
    "swing_up": examples.spherical_pendulum_swing_up,
    "pendubot": examples.double_pendulum_swing_up,
    "chain": examples.chain_with_disturbance,
    "reach": reach_problem,
}
SOLVERS = ("ILQR", "SingleShooting", "MultipleShooting")
CASES = [f"{p}/{s}/vi" for p in PROBLEMS for s in SOLVERS] + [f"{p}/SingleShooting/tsit5" for p in PROBLEMS]


def _solver(name, problem_name):
    if name == "MultipleShooting":  # segments of equal length: the count divides num_steps
        return s2.control.MultipleShooting(num_segments={"reach": 4, "chain": 5}.get(problem_name, 6))
    return getattr(s2.control, name)()


def _timed(fn, repeats, budget):
    """Wall times of up to `repeats` calls of `fn` (after one untimed call), within `budget` s."""
    start = time.perf_counter()
    first = jax.block_until_ready(fn())
    # each call printed as it ends: a run stopped at a time limit still shows what it measured
    print(f"  first call {time.perf_counter() - start:.3g} s", flush=True)
    times, spent = [], 0.0
    while len(times) < repeats and (not times or spent < budget):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
        spent += times[-1]
        print(f"  timed call {times[-1]:.3g} s", flush=True)
    return first, times


def measure(case, repeats, budget):
    problem_name, solver_name, dynamics = case.split("/")
    problem, q0, omega0, init = PROBLEMS[problem_name]()
    # the solvers' speed on the discrete model at one sub-step (control_fidelity.py measures refinement)
    problem = dataclasses.replace(problem, fidelity=None)
    if dynamics == "tsit5":
        problem = s2.control.Problem(
            **{**{f: getattr(problem, f) for f in problem.__dataclass_fields__}, "integrator": Tsit5Step()}
        )
    solver = _solver(solver_name, problem_name)
    start = time.perf_counter()
    solution, times = _timed(
        lambda: s2.control.solve(problem, q0, omega0, solver=solver, init=init, throw=False), repeats, budget
    )
    row = {
        "problem": problem_name, "solver": type(solver).__name__, "dynamics": dynamics,
        "first_call_s": time.perf_counter() - start - sum(times), "runs": len(times),
        "median_s": statistics.median(times), "times_s": times, "iterations": int(solution.num_iterations),
        "outer_iterations": int(solution.num_outer_iterations), "cost": float(solution.cost),
        "constraint_violation": float(solution.constraint_violation),
        "result": str(solution.result._value.item()), "successful": bool(solution.result == s2.RESULTS.successful),
    }
    print(row, flush=True)
    return row


def batch_of_swing_ups(repeats, budget, size=64):
    """`size` swing-ups from random states near hanging at rest, one vmapped call, against single solves."""
    problem, q0, omega0, init = examples.spherical_pendulum_swing_up()
    problem = dataclasses.replace(problem, fidelity=None)  # in lockstep under vmap: no refinement
    rng = np.random.default_rng(0)
    keys = jax.random.split(jax.random.PRNGKey(0), size)
    _, omega = jax.vmap(lambda k: s2.random_state(k, 1))(keys)
    # 0.05 rad tilts of hanging (cay of a small rotation applied to e₃), up to ~0.1 rad/s
    tilt = 0.05 * rng.normal(size=(size, 3))
    qs = np.stack([np.asarray(s2.cayley_rotate(jnp.asarray(t[None]), jnp.asarray(q0)))[0] for t in tilt])[:, None]
    omegas = np.asarray(s2.project_tangent(jnp.asarray(qs), 0.1 * jnp.asarray(omega)))
    solver = s2.control.ILQR()

    @jit
    def batch(qs, omegas):
        return jax.vmap(lambda q, w: s2.control.solve(problem, q, w, solver=solver, init=init, throw=False))(qs, omegas)

    # One solve is that of a member: the median over the first `repeats` members, each timed once
    # (fewer once `budget` seconds are spent).
    start = time.perf_counter()
    single = jax.block_until_ready(s2.control.solve(problem, qs[0], omegas[0], solver=solver, init=init, throw=False))
    single_first = time.perf_counter() - start
    single_times, single_iterations = [], []
    for i in range(min(repeats, size)):
        if single_times and sum(single_times) >= budget:
            break
        start = time.perf_counter()
        single = jax.block_until_ready(
            s2.control.solve(problem, qs[i], omegas[i], solver=solver, init=init, throw=False)
        )
        single_times.append(time.perf_counter() - start)
        single_iterations.append(int(single.num_iterations))
        print(f"  single solve {i}: {single_times[-1]:.3g} s, {single_iterations[-1]} iterations", flush=True)
    print(f"single solves: first call {single_first:.3g} s, then {single_times} s", flush=True)
    start = time.perf_counter()
    solutions, batch_times = _timed(lambda: batch(qs, omegas), repeats, budget)
    batch_first = time.perf_counter() - start - sum(batch_times)
    print(f"batch of {size}: first call {batch_first:.3g} s, then {batch_times} s", flush=True)
    row = {
        "problem": "swing_up", "batch": size, "runs": len(batch_times), "device": jax.devices()[0].device_kind,
        "batch_first_call_s": batch_first, "single_first_call_s": single_first,
        "batch_median_s": statistics.median(batch_times), "batch_times_s": batch_times,
        "single_median_s": statistics.median(single_times), "single_times_s": single_times,
        "single_iterations": single_iterations,
        "ratio": statistics.median(batch_times) / statistics.median(single_times),
        "successful": int(np.sum(np.asarray(solutions.result._value) == s2.RESULTS.successful._value)),
        "iterations_max": int(np.max(np.asarray(solutions.num_iterations))),
        "iterations_median": float(np.median(np.asarray(solutions.num_iterations))),
        # lockstep: the batch iterates as long as its slowest member, so the tail sets its time
        "iterations_quantiles": {
            str(p): float(np.percentile(np.asarray(solutions.num_iterations), p)) for p in (50, 90, 99, 100)
        },
    }
    print(row, flush=True)
    return row


def merge():
    """results/control_parts/*.json → results/control.json (rows in the order of CASES; the cases
    a part was asked for and did not finish, e.g. stopped by a time limit, are listed)."""
    parts = [json.loads(p.read_text()) for p in sorted((RESULTS / "control_parts").glob("*.json"))]
    rows = {f"{r['problem']}/{r['solver']}/{r['dynamics']}": r for part in parts for r in part["rows"]}
    batch = next((part["batch"] for part in parts if part.get("batch")), None)
    requested = [c for part in parts for c in part["cases"]]
    payload = {
        "parts": {p["part"]: p["machine"] for p in parts},
        "rows": [rows[c] for c in CASES if c in rows],
        "batch": batch,
        "not_finished": [c for c in requested if c not in rows and not (c == "batch" and batch)],
    }
    # the machine is the parts' (the first part's, with its load average), not the merging one's
    path = RESULTS / "control.json"
    path.write_text(json.dumps({"machine": parts[0]["machine"], **payload}, indent=2))
    return path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="*", help=f"cases among {CASES} and 'batch'")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds of timed runs per case")
    parser.add_argument("--part", help="write results/control_parts/PART.json")
    parser.add_argument("--merge", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batch-size", type=int, default=64, help="members of the 'batch' case")
    options = parser.parse_args()
    if options.merge:
        print(merge())
        return
    if options.quick:
        rows = [measure(c, 2, 10.0) for c in ("reach/ILQR/vi", "reach/SingleShooting/tsit5")]
        print(write("control", {"rows": rows}, quick=True))
        return
    cases = options.cases or [*CASES, "batch"]
    unknown = set(cases) - {*CASES, "batch"}
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; choose among {CASES} and 'batch'")
    payload = {"cases": cases, "rows": [], "batch": None}

    def record():
        # a part is rewritten after each case, so a run stopped at a time limit keeps what it finished
        if options.part:
            folder = RESULTS / "control_parts"
            folder.mkdir(exist_ok=True)
            path = folder / f"{options.part}.json"
            path.write_text(json.dumps({"part": options.part, "machine": machine(), **payload}, indent=2))
            return path

    record()
    for case in cases:
        if case == "batch":
            payload["batch"] = batch_of_swing_ups(5, options.budget, options.batch_size)
        else:
            payload["rows"].append(measure(case, 5, options.budget))
        record()
    print(record() or write("control", payload))


if __name__ == "__main__":
    main()
