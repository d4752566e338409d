"""`python -m s2jax control`: the trajectory-optimisation examples, solved, printed and plotted.

1. spherical pendulum swing-up (|u_i| ≤ 0.3 m g r);
2. double spherical pendulum swing-up with a torque on the first link only;
3. 001 §V chain (n = 3) to a given configuration against a known tip force.

Each is solved by iLQR (`s2jax.control.ILQR`), the pendubot from six guesses (`control.multi_start`,
the best kept: its default guess finds a worse local optimum); the figure shows the controls, the
energy and the path of every body on its sphere.
"""

import pathlib
import time

import jax
import numpy as np

from .. import control, energy, io
from ..control import examples


def _pendubot_starts(problem):
    """Six guesses for `multi_start` (`examples.torque_sweep`): the pendubot has several local
    optima, and its default guess finds J = 5.9206, four of these 5.3532."""
    bound, natural = float(problem.upper[0]), 1.0  # √(g/l) with l = g
    return examples.torque_sweep(problem, [0.1 * bound, 0.6 * bound], [0.7 * natural, natural, 1.4 * natural])


EXAMPLES = {
    1: ("swing-up of a spherical pendulum", examples.spherical_pendulum_swing_up, None),
    2: (
        "swing-up of a double spherical pendulum, torque on link 1", examples.double_pendulum_swing_up,
        _pendubot_starts,
    ),
    3: ("001 §V chain (n = 3) against a tip force", examples.chain_with_disturbance, None),
}


def plot(problem, solution, title, path):
    """Controls and energy against time, and each body's path on the unit sphere (3-D)."""
    try:
        import matplotlib
    except ImportError as error:
        raise ModuleNotFoundError(
            "the control examples' figures need matplotlib: pip install 's2jax[plot]'", name=error.name
        ) from error
    matplotlib.use("Agg")  # written to files, never shown
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(13, 4))
    t = np.asarray(solution.t)
    ax = fig.add_subplot(1, 3, 1)
    for i, label in enumerate("xyz"):
        ax.step(t[:-1], np.asarray(solution.controls)[:, i], where="post", label=f"u_{label}")
    ax.set(xlabel="t [s]", ylabel="pivot torque [N m]", title="controls (held over each step)")
    ax.legend()
    ax = fig.add_subplot(1, 3, 2)
    ax.plot(t, np.asarray(energy(problem.lagrangian, solution.q, solution.omega, problem.params)))
    ax.set(xlabel="t [s]", ylabel="E [J]", title="energy")
    ax = fig.add_subplot(1, 3, 3, projection="3d")
    u, v = np.mgrid[0 : 2 * np.pi : 40j, 0 : np.pi : 20j]
    ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="0.85", linewidth=0.4)
    q = np.asarray(solution.q)
    for body in range(q.shape[1]):
        ax.plot(*q[:, body].T, label=f"q_{body + 1}")
        ax.scatter(*q[-1, body], marker="o")
    ax.set(title="paths on S² (e₃ down: upright is −e₃)", xlabel="x", ylabel="y", zlabel="z")
    ax.invert_zaxis()
    ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    try:
        with io.atomic_write(path) as file:
            fig.savefig(file, format="png", dpi=110)
    finally:
        plt.close(fig)


def run(numbers, out: pathlib.Path):
    """Solve, print a line per example, and write `control_<k>.png` to `out`."""
    out.mkdir(parents=True, exist_ok=True)
    for number in numbers:
        title, build, starts = EXAMPLES[number]
        problem, q0, omega0, init = build()
        start = time.perf_counter()
        if starts is None:
            solution = jax.block_until_ready(control.solve(problem, q0, omega0, solver=control.ILQR(), init=init))
            how = f"{int(solution.num_iterations)} iLQR iterations"
        else:
            solution, every = control.multi_start(problem, q0, omega0, starts(problem), solver=control.ILQR())
            costs = ", ".join(f"{c:.5g}" for c in np.asarray(every.cost))
            how = f"best of {every.cost.shape[0]} starts (J = {costs}; the not converged included)"
        seconds = time.perf_counter() - start
        print(
            f"control {number} ({title}): {how}, {int(solution.num_outer_iterations)} multiplier updates, "
            f"{seconds:.1f} s (its programs compiled, or loaded from the cache, and run); cost "
            f"{float(solution.cost):.6g}, terminal constraint "
            f"|c| = {float(solution.constraint_violation):.2e}; continuous-time miss "
            f"{float(solution.continuous_miss):.1e} at {solution.substeps} sub-steps per control step"
        )
        path = out / f"control_{number}.png"
        plot(problem, solution, f"control example {number}: {title}", path)
        print(f"wrote {path}")
