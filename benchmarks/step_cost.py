"""µs per step of the variational integrators against RK4 and diffrax Tsit5, same process.

    python benchmarks/step_cost.py [--quick]

Systems: the double spherical pendulum of 002 Example 1 (implicit VI, non-diagonal M) and
the 3-body problem on the sphere of 002 Example 2 (explicit VI, diagonal M). Every method
runs 10⁴ steps from the paper's initial state inside one jitted call (`lax.scan` for the
fixed-step methods, diffrax's loop for Tsit5 at rtol = atol = 1e-9); the time per step is
the median wall time over 7 runs divided by the number of steps taken. float64, CPU.
Results go to benchmarks/results/step_cost.json; `--quick` runs 100 steps and writes to a
temporary folder.
"""

import argparse

import diffrax
import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
from _common import diffrax_solve, jit, median_time, write  # noqa: E402

import s2jax as s2  # noqa: E402

NUM_STEPS = 10_000


def fixed_step_cost(model, integrator, dt, num_steps):
    q0, omega0 = model.paper_state()
    params = model.paper_params()

    def run():
        return s2.simulate(
            model.lagrangian, q0, omega0, params, dt=dt, num_steps=num_steps,
            save_every=num_steps, integrator=integrator,
        ).q

    seconds, _ = median_time(run)
    return 1e6 * seconds / num_steps


def rk4_diagonal_cost(model, dt, num_steps):
    """RK4 on (3.22), M_ii ω̇_i = −q_i × ∂V/∂q_i: the baseline's best form for diagonal M.

    `RungeKutta4` solves the general (2.11) by block elimination at every stage, which a
    diagonal M does not need; this is the fair comparison for the explicit VI.
    """
    q0, omega0 = (jnp.asarray(x) for x in model.paper_state())
    params = jax.tree_util.tree_map(jnp.asarray, model.paper_params())
    system = s2.LagrangianSystem(model.lagrangian)
    args = system.prepare(q0, params)
    mass = jnp.diag(system.inertia(q0, args))[:, None]

    def field(y):
        q, omega = y
        return jnp.cross(omega, q), -jnp.cross(q, system.potential_gradient(q, args)) / mass

    def step(y, _):
        k1 = field(y)
        k2 = field(jax.tree_util.tree_map(lambda a, k: a + 0.5 * dt * k, y, k1))
        k3 = field(jax.tree_util.tree_map(lambda a, k: a + 0.5 * dt * k, y, k2))
        k4 = field(jax.tree_util.tree_map(lambda a, k: a + dt * k, y, k3))
        return jax.tree_util.tree_map(
            lambda a, *k: a + dt / 6 * (k[0] + 2 * k[1] + 2 * k[2] + k[3]), y, k1, k2, k3, k4
        ), None

    run = jit(lambda y: jax.lax.scan(step, y, length=num_steps)[0])
    seconds, _ = median_time(lambda: run((q0, omega0)))
    return 1e6 * seconds / num_steps


def tsit5_cost(model, dt, num_steps):
    q0, omega0 = (jnp.asarray(x) for x in model.paper_state())
    params = jax.tree_util.tree_map(jnp.asarray, model.paper_params())
    system = s2.LagrangianSystem(model.lagrangian)

    @jit
    def run(q0, omega0, args):
        solution = diffrax_solve(
            system, args, (q0, omega0), dt * num_steps, diffrax.Tsit5(),
            rtol=1e-9, atol=1e-9, dt0=dt, max_steps=100 * num_steps,
        )
        return solution.ys, solution.stats["num_steps"]

    args = system.prepare(q0, params)
    seconds, _ = median_time(lambda: run(q0, omega0, args))
    steps = int(run(q0, omega0, args)[1])
    return 1e6 * seconds / steps, steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 steps, to check that it runs")
    quick = parser.parse_args().quick
    num_steps = 100 if quick else NUM_STEPS
    systems = {
        "double_spherical_pendulum": (s2.models.double_spherical_pendulum, 0.01, s2.VariationalIntegrator()),
        "three_body_on_sphere": (s2.models.n_body_on_sphere, 1e-3, s2.ExplicitVariationalIntegrator()),
    }
    results = {}
    for name, (model, dt, vi) in systems.items():
        vi_us = fixed_step_cost(model, vi, dt, num_steps)
        rk4_us = fixed_step_cost(model, s2.RungeKutta4(), dt, num_steps)
        if vi.requires_diagonal_inertia:
            rk4_general_us, rk4_us = rk4_us, rk4_diagonal_cost(model, dt, num_steps)
        tsit5_us, tsit5_steps = tsit5_cost(model, dt, num_steps)
        results[name] = {
            "dt": dt,
            "num_steps": num_steps,
            "integrator": type(vi).__name__,
            "vi_us_per_step": vi_us,
            "rk4_us_per_step": rk4_us,
            "rk4_form": "(3.22), diagonal M" if vi.requires_diagonal_inertia else "(2.11), block elimination",
            **({"rk4_general_2_11_us_per_step": rk4_general_us} if vi.requires_diagonal_inertia else {}),
            "tsit5_us_per_step": tsit5_us,
            "tsit5_steps_over_same_horizon": tsit5_steps,
            "vi_over_rk4": vi_us / rk4_us,
            "vi_over_tsit5": vi_us / tsit5_us,
        }
        print(
            f"{name:28s} {type(vi).__name__:30s} VI {vi_us:7.2f} µs/step | RK4 {rk4_us:7.2f} | "
            f"Tsit5(1e-9) {tsit5_us:7.2f} ({tsit5_steps} steps) | VI/RK4 = {vi_us / rk4_us:.2f}"
        )
    method = f"median of 7 runs of {num_steps} steps, after a warm-up"
    path = write("step_cost", {"method": method, "results": results}, quick=quick)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
