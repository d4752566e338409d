"""A constant dense inertia M (no chain structure), n = 16 … 128 bodies: µs per step (issue 32, item 1).

    python benchmarks/dense_inertia.py [--sizes 16,32,64,128] [--repeats 7] [--sequential-thunks]

The model: L = ½ Σ_ij M_ij q̇_i·q̇_j + g Σ_i q_i·e₃, M = A Aᵀ/n + I with A standard normal (seed 0):
symmetric positive definite, dense, no chain's structure. From a random state (seed 0, ω scaled
by 0.3), h = 10⁻³, through `s2.simulate` with `VariationalIntegrator()` (002's VI), `Rattle()` (the
same map by multipliers) and `RungeKutta4()`, each saving every step (the default: the VI then solves
(3.13) for ω every step) and saving only the last step (lazy steps). µs per step are marginal,
(t(2N) − t(N))/N, medians of `--repeats` interleaved runs; the first call (compile included) is
recorded. Results: benchmarks/results/dense_inertia.json with the machine, the load and
OPENBLAS_NUM_THREADS. `--sequential-thunks`: XLA CPU without its concurrency-optimised scheduler
(`_common.SEQUENTIAL_THUNKS`), written to dense_inertia_sequential_thunks.json.
"""

import argparse
import os
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _common import interleaved_medians, use_sequential_thunks, write  # noqa: E402

import s2jax as s2  # noqa: E402

INTEGRATORS = {"vi": s2.VariationalIntegrator(), "rattle": s2.Rattle(), "rk4": s2.RungeKutta4()}
DT = 1e-3


def model(n):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(n, n))
    inertia = a @ a.T / n + np.eye(n)

    def lagrangian(q, qdot, params):
        return 0.5 * jnp.einsum("ij,ic,jc->", params["M"], qdot, qdot) + 9.81 * jnp.sum(q[:, 2])

    q0, omega0 = s2.random_state(jax.random.PRNGKey(0), n)
    return lagrangian, {"M": jnp.asarray(inertia)}, q0, 0.3 * omega0


def measure(n, repeats):
    lagrangian, params, q0, omega0 = model(n)
    # N and 2N steps of at least ~40 ms each: with 100 steps (10 ms at n = 64) the marginal time
    # swung by ±25 % on the shared machine (saving every step read faster than saving the last).
    steps = max(400, 25600 // n)

    def maker(integrator, num_steps, every):
        return lambda: s2.simulate(lagrangian, q0, omega0, params, dt=DT, num_steps=num_steps, integrator=integrator,
                                   save_every=num_steps if every is None else every).q

    first = {}
    for name, integrator in INTEGRATORS.items():
        start = time.perf_counter()
        jax.block_until_ready(maker(integrator, steps, 1)())
        first[name] = time.perf_counter() - start
    calls = {
        (name, saves, k): maker(integrator, k, 1 if saves == "every_step" else None)
        for name, integrator in INTEGRATORS.items() for saves in ("every_step", "last_step") for k in (steps, 2 * steps)
    }
    timed = interleaved_medians(calls, repeats=repeats)
    row = {"n": n, "steps": [steps, 2 * steps], "first_call_s": first}
    for saves in ("every_step", "last_step"):
        row[saves] = {
            name: 1e6 * (timed[name, saves, 2 * steps][0] - timed[name, saves, steps][0]) / steps
            for name in INTEGRATORS
        }
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,32,64,128")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="n = 16, 1 repeat: checks that it runs")
    parser.add_argument("--sequential-thunks", action="store_true", help="XLA CPU without its concurrency scheduler")
    args = parser.parse_args()
    if args.sequential_thunks:
        use_sequential_thunks()
    sizes = [16] if args.quick else [int(s) for s in args.sizes.split(",")]
    repeats = 1 if args.quick else args.repeats
    load_before = os.getloadavg()
    rows = []
    for n in sizes:
        row = measure(n, repeats)
        rows.append(row)
        every, last = row["every_step"], row["last_step"]
        print(
            f"n = {n:3d}: µs/step saving every step: VI {every['vi']:.1f}, Rattle {every['rattle']:.1f}, "
            f"RK4 {every['rk4']:.1f}; saving the last: VI {last['vi']:.1f}, Rattle {last['rattle']:.1f}, "
            f"RK4 {last['rk4']:.1f}; first calls {', '.join(f'{k} {v:.1f} s' for k, v in row['first_call_s'].items())}",
            flush=True,
        )
    path = write(
        "dense_inertia_sequential_thunks" if args.sequential_thunks else "dense_inertia",
        {
            "command": f"python benchmarks/dense_inertia.py --sizes {','.join(map(str, sizes))} --repeats {repeats}"
            + (" --sequential-thunks" if args.sequential_thunks else ""),
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "dt": DT,
            "rows": rows,
        },
        quick=args.quick,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
