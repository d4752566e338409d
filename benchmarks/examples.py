"""Wall time of the VI and the baselines on the six examples of 002 §3.5, and the cost per step
of Example 6 as the number of molecules grows.

    python benchmarks/examples.py [--skip-scaling] [--only-scaling] [--quick]

Part 1 runs every integrator of `python -m s2jax reproduce` with its settings (step, horizon,
saved states; `EXAMPLES` below restates them from the public API, as the benchmarks use no
other) through `simulate` compiled ahead of time as the app compiles it (`compile_simulation`),
and reports the compile time and the median wall time of the runs after it: 7 runs for those
under 2 s, 5 under 20 s, 3 above.

Part 2 times the explicit VI on the Lennard-Jones molecules of Example 6 for n = 162, 642 and
2562 (`icosphere(2|3|4)`, the same σ rule and vortices) over 1000 steps, saving only the final
state; the time per step is (T(1000) − T(10))/990, which removes the fixed cost (the first
force, the inertia matrix). Beside it, one force evaluation (the O(n²) gradient of the pair
potential) timed alone in a compiled loop: the explicit VI evaluates one force per step, so
the two agree when the force dominates. float64, CPU. Results go to
benchmarks/results/examples.json; `--quick` runs 1 % of each horizon and n = 162 over 100 steps,
and writes to a temporary folder.
"""

import argparse
import json
import math
import os
import time
from types import ModuleType
from typing import NamedTuple

import equinox as eqx
import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _common import RESULTS, jit, median_time, write  # noqa: E402

import s2jax as s2  # noqa: E402
from s2jax import models  # noqa: E402
from s2jax.models import lennard_jones_on_sphere as lj  # noqa: E402


class Example(NamedTuple):
    """An example of 002 §3.5 as `python -m s2jax reproduce` runs it: `runs` are (label,
    integrator, h), h None for `AdaptiveRungeKutta45` (it is given the sampling grid); the states
    are saved every `sample` s over `horizon` s."""

    title: str
    model: ModuleType
    horizon: float
    sample: float
    runs: tuple


_EXPLICIT = s2.ExplicitVariationalIntegrator()
# The examples and runs of `python -m s2jax reproduce` (s2jax/apps/reproduce.py, whose `EXAMPLES`
# also hold the paper's figures and plot styles): keep the two in step.
EXAMPLES = {
    1: Example("double spherical pendulum", models.double_spherical_pendulum, 100.0, 0.01, (
        ("VI", s2.VariationalIntegrator(), 0.01),
        ("RK45", s2.AdaptiveRungeKutta45(rtol=3e-5, atol=3e-8), None),
    )),
    2: Example("3-body problem on the sphere", models.n_body_on_sphere, 10.0, 1e-3, (
        ("VI, h = 1e-3", _EXPLICIT, 1e-3),
        ("RK2, h = 1e-3", s2.RungeKutta2(), 1e-3),
        ("VI, h = 1e-4", _EXPLICIT, 1e-4),
        ("RK2, h = 1e-4", s2.RungeKutta2(), 1e-4),
    )),
    3: Example("four spherical pendula joined by springs", models.coupled_spherical_pendula, 10.0, 5e-3, (
        ("VI", _EXPLICIT, 5e-3),
        ("RK2", s2.RungeKutta2(), 5e-3),
        ("RK2 + projection", s2.RungeKutta2WithReprojection(), 5e-3),
    )),
    4: Example("elastic rod of 10 rigid elements", models.elastic_rod, 3.0, 1e-3, (
        ("VI", s2.VariationalIntegrator(), 1e-4),
        ("RK45", s2.AdaptiveRungeKutta45(rtol=5e-4, atol=5e-7), None),
    )),
    5: Example("4 × 4 array of magnetic dipoles", models.magnetic_dipoles, 10.0, 1e-3, (
        ("VI", _EXPLICIT, 2.5e-4),
        ("RK45", s2.AdaptiveRungeKutta45(rtol=3e-4, atol=3e-7), None),
    )),
    6: Example("642 Lennard-Jones molecules on the sphere", lj, 5.0, 5e-3, (
        ("VI", _EXPLICIT, 5e-3),
    )),
}


def step_grid(example, dt, horizon_scale):
    """`(dt, save_every, num_steps)` of a run of step `dt` (None: the sampling step) over
    `horizon_scale` × the example's horizon, saving every `example.sample` s."""
    num_saves = max(1, round(example.horizon * horizon_scale / example.sample))
    dt = example.sample if dt is None else dt
    save_every = max(1, round(example.sample / dt))
    return dt, save_every, num_saves * save_every


def compile_simulation(lagrangian, q0, omega0, params, *, dt, num_steps, integrator, save_every):
    """`simulate` compiled ahead of time (so that compiling and running are timed apart), with
    the float params traced and the others (ints, strings) static; the initial state is checked
    here, since `simulate` skips its eager checks for traced input.

    **Returns:** `(run, compile_seconds)`; `run()` returns a `Solution`.
    """
    s2.check_initial_state(q0, omega0)
    q0, omega0 = jnp.asarray(q0), jnp.asarray(omega0)
    params = jax.tree_util.tree_map(
        lambda leaf: jnp.asarray(leaf) if isinstance(leaf, (float, np.floating, np.ndarray)) else leaf, params
    )
    dynamic, static = eqx.partition(params, eqx.is_array)

    def solve(q0, omega0, dynamic):
        return s2.simulate(
            lagrangian, q0, omega0, eqx.combine(dynamic, static), dt=dt, num_steps=num_steps,
            integrator=integrator, save_every=save_every,
        )

    start = time.perf_counter()
    compiled = jit(solve).lower(q0, omega0, dynamic).compile()
    compile_seconds = time.perf_counter() - start
    return (lambda: compiled(q0, omega0, dynamic)), compile_seconds


def _repeats(seconds):
    return 7 if seconds < 2 else 5 if seconds < 20 else 3


def example_times(horizon_scale):
    results = {}
    for number, example in EXAMPLES.items():
        q0, omega0 = example.model.paper_state()
        params = example.model.paper_params()
        runs = {}
        for label, integrator, run_dt in example.runs:
            dt, save_every, num_steps = step_grid(example, run_dt, horizon_scale)
            go, compile_seconds = compile_simulation(
                example.model.lagrangian,
                q0,
                omega0,
                params,
                dt=dt,
                num_steps=num_steps,
                integrator=integrator,
                save_every=save_every,
            )
            start = time.perf_counter()
            jax.block_until_ready(go())
            first = time.perf_counter() - start
            repeats = _repeats(first)
            median, times = median_time(go, repeats=repeats)
            runs[label] = {
                "integrator": repr(integrator),
                "dt": dt,
                "num_steps": num_steps,
                "compile_s": compile_seconds,
                "median_s": median,
                "times_s": times,
                "repeats": repeats,
            }
            print(
                f"Example {number} {label:22s} compile {compile_seconds:7.2f} s   "
                f"run {median:8.3f} s (median of {repeats})",
                flush=True,
            )
        results[f"example_{number}"] = {
            "title": example.title,
            "horizon": example.horizon * horizon_scale,
            "runs": runs,
        }
    return results


def _simulation_seconds(q0, omega0, params, num_steps, repeats):
    go, compile_seconds = compile_simulation(
        lj.lagrangian,
        q0,
        omega0,
        params,
        dt=0.005,
        num_steps=num_steps,
        integrator=s2.ExplicitVariationalIntegrator(),
        save_every=num_steps,
    )
    median, _ = median_time(go, repeats=repeats)
    return median, compile_seconds


def _force_seconds(q0, params, count, repeats):
    """One force evaluation −∂V/∂q, timed as `count` of them in one compiled loop (a dispatch
    per evaluation would swamp the small n). Each takes the previous one's output, so XLA
    cannot hoist it out of the loop."""
    force = jax.grad(lj.potential)

    @jit
    def loop(q, params):
        return jax.lax.fori_loop(0, count, lambda i, q: q + 1e-300 * force(q, params), q)

    q = jnp.asarray(q0)
    traced = {k: jnp.asarray(v) for k, v in params.items()}
    median, _ = median_time(lambda: loop(q, traced), repeats=repeats)
    return median / count


def lennard_jones_scaling(sizes, long):
    """`sizes`: (icosphere subdivisions, repeats) per n; `long`: the steps of the long run."""
    results = {}
    short = 10
    for subdivisions, repeats in sizes:
        q0, omega0 = lj.paper_state(subdivisions)
        params = lj.paper_params(subdivisions)
        n = q0.shape[0]
        t_short, _ = _simulation_seconds(q0, omega0, params, short, repeats)
        t_long, compile_seconds = _simulation_seconds(q0, omega0, params, long, repeats)
        per_step = (t_long - t_short) / (long - short)
        force_seconds = _force_seconds(q0, params, long, repeats)
        results[str(n)] = {
            "n": n,
            "steps": [short, long],
            "run_s": [t_short, t_long],
            "compile_s": compile_seconds,
            "ms_per_step": 1e3 * per_step,
            "fixed_cost_s": t_short - short * per_step,
            "ms_per_force_evaluation": 1e3 * force_seconds,
        }
        print(
            f"n = {n:5d}: {long} steps {t_long:7.3f} s, {1e3 * per_step:8.3f} ms/step, one force "
            f"{1e3 * force_seconds:8.3f} ms ({force_seconds / per_step:4.0%} of a step), fixed "
            f"{t_short - short * per_step:6.3f} s, compile {compile_seconds:5.2f} s",
            flush=True,
        )
    sizes = sorted(results.values(), key=lambda r: r["n"])
    for small, large in zip(sizes, sizes[1:]):
        ratio = large["ms_per_step"] / small["ms_per_step"]
        exponent = math.log(ratio) / math.log(large["n"] / small["n"])
        large[f"exponent_from_{small['n']}"] = exponent
        print(
            f"n {small['n']} → {large['n']}: time per step × {ratio:.1f} = (n ratio)^{exponent:.2f}"
        )
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--only-scaling", action="store_true")
    parser.add_argument("--quick", action="store_true", help="1 % of each horizon, n = 162 only, to check it runs")
    args = parser.parse_args()
    # A partial run keeps the other part's results from the last full one.
    previous = RESULTS / "examples.json"
    payload = json.loads(previous.read_text()) if previous.exists() else {}
    payload.pop("machine", None)
    if not args.only_scaling:
        payload["examples"] = example_times(0.01 if args.quick else 1.0)
    if not args.skip_scaling:
        sizes = ((2, 7),) if args.quick else ((2, 7), (3, 5), (4, 3))
        payload["lennard_jones_scaling"] = lennard_jones_scaling(sizes, 100 if args.quick else 1000)
    # The machine may be shared: the load says how many cores the runs really had.
    payload["load_average_1_5_15_min_at_end"] = os.getloadavg()
    path = write("examples", payload, quick=args.quick)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
