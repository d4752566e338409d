"""Trajectory optimisation: iterations and wall time to converge (after compiling), medians of 5.

Example 1 of the control issue (spherical pendulum swing-up, |u_i| ≤ 0.3 m g r, T = 6 s,
h = 0.02) by iLQR, and a short smooth problem (`tests/test_control.py`'s reach problem) by all
three solvers. Run: `python benchmarks/control.py [--quick]`.
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import s2jax as s2  # noqa: E402
from _common import machine, median_time, write  # noqa: E402
from s2jax.control.examples import spherical_pendulum_swing_up  # noqa: E402
from s2jax.models import spherical_pendulum  # noqa: E402


def reach_problem():
    target = jnp.array([[0.6, 0.0, 0.8]])
    return s2.control.Problem(
        spherical_pendulum.lagrangian, {"m": 1.0, "r": 1.0, "g": 9.81}, s2.forces.PivotTorque(0), 0.02, 20,
        running_cost=lambda t, q, omega, u: jnp.sum(u**2),
        terminal_cost=lambda q, omega: 100.0 * jnp.sum((q - target) ** 2) + jnp.sum(omega**2),
    ), np.array([[0.0, 0.6, 0.8]]), np.zeros((1, 3)), None


def measure(name, problem, q0, omega0, init, solver, repeats):
    def run():
        return jax.block_until_ready(s2.control.solve(problem, q0, omega0, solver=solver, init=init, throw=False))

    solution = run()  # compile
    median, times = median_time(run, repeats)
    row = {
        "problem": name, "solver": type(solver).__name__, "median_s": median, "times_s": times,
        "iterations": int(solution.num_iterations), "outer_iterations": int(solution.num_outer_iterations),
        "cost": float(solution.cost), "constraint_violation": float(solution.constraint_violation),
        "successful": bool(solution.result == s2.RESULTS.successful),
    }
    print(row)
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    quick = parser.parse_args().quick
    repeats = 3 if quick else 5
    rows = [measure("swing_up", *spherical_pendulum_swing_up(), s2.control.ILQR(), repeats)]
    for solver in (s2.control.ILQR(), s2.control.SingleShooting(), s2.control.MultipleShooting(num_segments=4)):
        rows.append(measure("reach", *reach_problem(), solver, repeats))
    write("control", {"machine": machine(), "rows": rows}, quick=quick)


if __name__ == "__main__":
    main()
