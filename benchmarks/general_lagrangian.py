"""The general variational integrator: µs per step, and energy error growth against RK4 and Tsit5.

    python benchmarks/general_lagrangian.py [--quick] [--horizons 100 1000 10000]

1. µs per step (median of 7 runs of `NUM_STEPS` steps in one jitted call, same process) of
   `GeneralVariationalIntegrator` against `VariationalIntegrator` on the double spherical
   pendulum of 002 Example 1 (a (2.2) system both can run), and against `RungeKutta4` on the
   three non-(2.2) models (`RungeKutta4` integrates the equations of motion of the
   `GeneralLagrangianSystem`, 001 (11) by autodiff).
2. Energy (Jacobi integral) error max_{t ≤ T} |E(t) − E(0)| / |E(0)| for T in `--horizons`,
   for the general VI and RK4 at the same step h, and diffrax Tsit5 at rtol = atol = 1e-8 on
   the same vector field. One run to the longest horizon, read at each T.

Results go to benchmarks/results/general_lagrangian.json (with the load average); `--quick`
runs a few steps and writes to a temporary folder.
"""

import argparse
import os

import diffrax
import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _common import diffrax_solve, median_time, write  # noqa: E402

import s2jax as s2  # noqa: E402

NUM_STEPS = 2000
MODELS = {
    "rotating_spherical_pendulum": (s2.models.rotating_spherical_pendulum, 0.02),
    "monopole_particle": (s2.models.monopole_particle, 0.02),
    "ellipsoid_pendulum": (s2.models.ellipsoid_pendulum, 0.01),
}


def step_cost(system, model, integrator, dt, num_steps):
    q0, omega0 = model.paper_state()
    params = model.paper_params()

    def run():
        return s2.simulate(
            system, q0, omega0, params, dt=dt, num_steps=num_steps, save_every=num_steps, integrator=integrator
        ).q

    seconds, times = median_time(run)
    return 1e6 * seconds / num_steps, [1e6 * t / num_steps for t in times]


def relative_energy_error(system, params, q, omega, save_times, horizons):
    args = system.prepare(q[0], params)
    energy = np.asarray(jax.vmap(lambda a, b: system.energy(a, b, args))(q, omega))
    error = np.abs(energy - energy[0]) / abs(energy[0])
    return {str(T): float(np.max(error[save_times <= T + 1e-9])) for T in horizons}


def energy_growth(model, dt, horizons, save_spacing):
    system = s2.GeneralLagrangianSystem(model.lagrangian)
    q0, omega0 = model.paper_state()
    params = jax.tree_util.tree_map(jnp.asarray, model.paper_params())
    horizon = max(horizons)
    save_every = round(save_spacing / dt)
    num_steps = save_every * round(horizon / save_spacing)
    out = {}
    for name, integrator in [("GeneralVariationalIntegrator", s2.GeneralVariationalIntegrator()),
                             ("RungeKutta4", s2.RungeKutta4())]:
        sol = s2.simulate(system, q0, omega0, params, dt=dt, num_steps=num_steps, save_every=save_every,
                          integrator=integrator)
        out[name] = relative_energy_error(system, params, sol.q, sol.omega, np.asarray(sol.t), horizons)
    ts = jnp.linspace(0.0, num_steps * dt, num_steps // save_every + 1)
    tsit5 = diffrax_solve(
        system, system.prepare(jnp.asarray(q0), params), (jnp.asarray(q0), jnp.asarray(omega0)), ts[-1],
        diffrax.Tsit5(), rtol=1e-8, atol=1e-8, dt0=dt, max_steps=50 * num_steps, saveat=diffrax.SaveAt(ts=ts),
    )
    q, omega = tsit5.ys
    out["Tsit5(rtol=atol=1e-8)"] = relative_energy_error(system, params, q, omega, np.asarray(ts), horizons)
    out["Tsit5_steps"] = int(tsit5.stats["num_steps"])
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--horizons", type=float, nargs="+", default=[100.0, 1000.0])
    options = parser.parse_args()
    num_steps = 20 if options.quick else NUM_STEPS
    horizons = [1.0, 2.0] if options.quick else options.horizons
    load_before = os.getloadavg()

    costs = {}
    dsp = s2.models.double_spherical_pendulum
    special, special_runs = step_cost(dsp.lagrangian, dsp, s2.VariationalIntegrator(), 0.01, num_steps)
    general, general_runs = step_cost(
        s2.GeneralLagrangianSystem(dsp.lagrangian), dsp, s2.GeneralVariationalIntegrator(), 0.01, num_steps
    )
    costs["double_spherical_pendulum"] = {
        "VariationalIntegrator_us": special, "GeneralVariationalIntegrator_us": general,
        "ratio_general_over_2_2": general / special, "runs_us": {"VI": special_runs, "general": general_runs},
    }
    print(f"double pendulum: VI {special:.2f} µs/step, general VI {general:.2f} µs/step ({general / special:.2f}×)")
    for name, (model, dt) in MODELS.items():
        system = s2.GeneralLagrangianSystem(model.lagrangian)
        vi, vi_runs = step_cost(system, model, s2.GeneralVariationalIntegrator(), dt, num_steps)
        rk4, rk4_runs = step_cost(system, model, s2.RungeKutta4(), dt, num_steps)
        costs[name] = {
            "GeneralVariationalIntegrator_us": vi, "RungeKutta4_us": rk4, "ratio_general_over_rk4": vi / rk4,
            "runs_us": {"general": vi_runs, "RK4": rk4_runs},
        }
        print(f"{name}: general VI {vi:.2f} µs/step, RK4 {rk4:.2f} µs/step ({vi / rk4:.2f}×)")

    growth = {}
    for name, (model, dt) in MODELS.items():
        growth[name] = {"dt": dt, **energy_growth(model, dt, horizons, save_spacing=0.5 if options.quick else 1.0)}
        print(name, growth[name])

    path = write(
        "general_lagrangian",
        {
            "num_steps": num_steps, "repeats": 7, "statistic": "median",
            "load_average_before": load_before, "load_average_after": os.getloadavg(),
            "step_cost_us": costs, "energy_error": growth, "horizons": horizons,
        },
        quick=options.quick,
    )
    print(path)


if __name__ == "__main__":
    main()
