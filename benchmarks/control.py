"""Trajectory optimisation: iterations and wall time to converge, after compiling.

- The three examples of `s2jax.control.examples` by iLQR: medians of 5.
- A short smooth problem (`tests/test_control.py`'s "reach") by all three solvers, and by single
  shooting on diffrax Tsit5 dynamics with the same optimiser: medians of 5.
- Example 1 by single and multiple shooting on the VI and by single shooting on Tsit5 dynamics:
  one timed run each (each takes minutes; the ratio to iLQR is two orders of magnitude).
- A batch of 64 swing-ups from random initial states in one `jax.vmap`ped call against one.

The Tsit5 baseline is an s2jax integrator whose step is one `diffrax.Tsit5` step of the
continuous equations (002 (2.9)–(2.11) with the forces) from the same `AbstractSystem`; the
controls jump at every step (zero-order hold), so each step starts afresh (no FSAL reuse),
which is Tsit5's correct use across a jump.

Run: `python benchmarks/control.py [--quick]`.
"""

import argparse
from typing import ClassVar

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from _common import median_time, write  # noqa: E402

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


def reach_problem(integrator=s2.VariationalIntegrator()):
    target = jnp.array([[0.6, 0.0, 0.8]])
    problem = s2.control.Problem(
        spherical_pendulum.lagrangian, {"m": 1.0, "r": 1.0, "g": 9.81}, s2.forces.PivotTorque(0), 0.02, 20,
        running_cost=lambda t, q, omega, u: jnp.sum(u**2),
        terminal_cost=lambda q, omega: 100.0 * jnp.sum((q - target) ** 2) + jnp.sum(omega**2),
        integrator=integrator,
    )
    return problem, np.array([[0.0, 0.6, 0.8]]), np.zeros((1, 3)), None


def measure(name, problem, q0, omega0, init, solver, repeats, dynamics="VI"):
    def run():
        return jax.block_until_ready(s2.control.solve(problem, q0, omega0, solver=solver, init=init, throw=False))

    solution = run()  # compile (median_time runs once more before timing)
    median, times = median_time(run, repeats) if repeats > 1 else (None, [])
    if repeats == 1:
        import time

        start = time.perf_counter()
        run()
        median = time.perf_counter() - start
        times = [median]
    row = {
        "problem": name, "solver": type(solver).__name__, "dynamics": dynamics, "repeats": repeats,
        "median_s": median, "times_s": times, "iterations": int(solution.num_iterations),
        "outer_iterations": int(solution.num_outer_iterations), "cost": float(solution.cost),
        "constraint_violation": float(solution.constraint_violation),
        "successful": bool(solution.result == s2.RESULTS.successful),
    }
    print(row, flush=True)
    return row


def batch_of_swing_ups(repeats, size=64):
    """64 swing-ups from random states near hanging at rest, one vmapped call, against one."""
    problem, q0, omega0, init = examples.spherical_pendulum_swing_up()
    rng = np.random.default_rng(0)
    keys = jax.random.split(jax.random.PRNGKey(0), size)
    q, omega = jax.vmap(lambda k: s2.random_state(k, 1))(keys)
    # 0.1 rad from hanging, at up to 0.1 rad/s: (q, ω) = (cay of a small tilt) e₃, small tangent ω
    tilt = 0.05 * rng.normal(size=(size, 3))
    qs = np.stack([np.asarray(s2.cayley_rotate(jnp.asarray(t[None]), jnp.asarray(q0)))[0] for t in tilt])[:, None]
    omegas = np.asarray(s2.project_tangent(jnp.asarray(qs), 0.1 * jnp.asarray(omega)))
    solver = s2.control.ILQR()

    @jax.jit
    def batch(qs, omegas):
        return jax.vmap(lambda q, w: s2.control.solve(problem, q, w, solver=solver, init=init, throw=False))(qs, omegas)

    batch_median, batch_times = median_time(lambda: batch(qs, omegas), repeats)
    solutions = batch(qs, omegas)
    single_median, single_times = median_time(
        lambda: s2.control.solve(problem, qs[0], omegas[0], solver=solver, init=init, throw=False), repeats
    )
    row = {
        "problem": "swing_up", "batch": size, "batch_median_s": batch_median, "batch_times_s": batch_times,
        "single_median_s": single_median, "single_times_s": single_times, "ratio": batch_median / single_median,
        "successful": int(np.sum(np.asarray(solutions.result._value) == s2.RESULTS.successful._value)),
        "max_iterations": int(np.max(np.asarray(solutions.num_iterations))),
    }
    print(row, flush=True)
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    quick = parser.parse_args().quick
    repeats = 3 if quick else 5
    ilqr = s2.control.ILQR()
    rows = []
    builds = {"swing_up": examples.spherical_pendulum_swing_up, "pendubot": examples.double_pendulum_swing_up,
              "chain": examples.chain_with_disturbance}
    for name, build in builds.items():
        if quick and name != "swing_up":
            continue
        rows.append(measure(name, *build(), ilqr, repeats))
    for solver in (ilqr, s2.control.SingleShooting(), s2.control.MultipleShooting(num_segments=4)):
        rows.append(measure("reach", *reach_problem(), solver, repeats))
    rows.append(measure("reach", *reach_problem(Tsit5Step()), s2.control.SingleShooting(), repeats, "diffrax Tsit5"))
    batch = batch_of_swing_ups(repeats)
    if not quick:
        swing = examples.spherical_pendulum_swing_up()
        rows.append(measure("swing_up", *swing, s2.control.SingleShooting(), 1))
        rows.append(measure("swing_up", *swing, s2.control.MultipleShooting(num_segments=6), 1))
        problem, *rest = swing
        tsit5 = s2.control.Problem(**{**{f: getattr(problem, f) for f in problem.__dataclass_fields__},
                                      "integrator": Tsit5Step()})
        rows.append(measure("swing_up", tsit5, *rest, s2.control.SingleShooting(), 1, "diffrax Tsit5"))
    write("control", {"rows": rows, "batch": batch}, quick=quick)


if __name__ == "__main__":
    main()
