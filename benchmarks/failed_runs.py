"""What a failed run costs, against a successful run of the same length (issue 29 item 5).

    python benchmarks/failed_runs.py [--quick] [--num-steps 100000]

The double spherical pendulum of 002 Example 1 (paper params and state), `VariationalIntegrator`,
`num_steps` steps, a save every `num_steps // 100` (and, for the first two cases, every step:
after a failure each save still solves for ω, a discarded select), `throw=False`. Every case runs the same
compiled function, `jax.jit` of `s2.simulate` with (q0, ω0, h) traced, so they differ only in
the values:

- `successful`: h = 0.01;
- `fails_at_step_0`: h = 0.5, too large: step 0 fails (`step_too_large`);
- `invalid_initial_state`: h = 0.01 from |q_1| = 2 (found in the graph:
  `invalid_initial_state` before the first step).

And a batch of two, `jax.vmap` of the same `simulate` over (q0, ω0, h), one compiled function:
`[successful, successful]` against `[successful, fails_at_step_0]` and
`[successful, invalid_initial_state]`: under `vmap` a failed member's steps cannot be skipped
(a `lax.cond` becomes a select), so it should cost at most what a successful member's do.

Wall time: median of `--repeats` runs per case, the cases interleaved round-robin (the load of
other processes falls on all alike), after a compiling run. Results go to
benchmarks/results/failed_runs.json with the machine, `os.getloadavg()` before and after, and
every run's time; `--quick` runs 1000 steps and writes to a temporary folder.
"""

import argparse
import os

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
from _common import interleaved_medians, write  # noqa: E402

import s2jax as s2  # noqa: E402

model = s2.models.double_spherical_pendulum
SUCCESSFUL_DT = 0.01
FAILING_DT = 0.5


def cases(num_steps: int) -> tuple[dict, dict, dict]:
    """name → a function running the case: the single runs, those saving every step, and the
    batches of two."""
    params = model.paper_params()

    def run(q0, omega0, dt, save_every=max(num_steps // 100, 1)):
        sol = s2.simulate(
            model.lagrangian,
            q0,
            omega0,
            params,
            dt=dt,
            num_steps=num_steps,
            save_every=save_every,
            integrator=s2.VariationalIntegrator(),
            throw=False,
        )
        return sol.q[-1], sol.omega[-1], sol.result._value

    single = jax.jit(run)
    every_step = jax.jit(lambda q0, omega0, dt: run(q0, omega0, dt, save_every=1))
    batch = jax.jit(jax.vmap(run))
    q0, omega0 = (jnp.asarray(x) for x in model.paper_state())
    good = (q0, omega0, jnp.asarray(SUCCESSFUL_DT))
    failing = (q0, omega0, jnp.asarray(FAILING_DT))
    invalid = (q0.at[0].multiply(2.0), omega0, jnp.asarray(SUCCESSFUL_DT))

    def pair(a, b):
        return tuple(jnp.stack([x, y]) for x, y in zip(a, b, strict=True))

    singles = {
        "successful": lambda: single(*good),
        "fails_at_step_0": lambda: single(*failing),
        "invalid_initial_state": lambda: single(*invalid),
    }
    saving_every_step = {
        "successful, saving every step": lambda: every_step(*good),
        "fails_at_step_0, saving every step": lambda: every_step(*failing),
    }
    batches = {
        "[successful, successful]": lambda: batch(*pair(good, good)),
        "[successful, fails_at_step_0]": lambda: batch(*pair(good, failing)),
        "[successful, invalid_initial_state]": lambda: batch(*pair(good, invalid)),
    }
    expected = {
        "successful": ["successful"],
        "fails_at_step_0": ["step_too_large"],
        "invalid_initial_state": ["invalid_initial_state"],
        "successful, saving every step": ["successful"],
        "fails_at_step_0, saving every step": ["step_too_large"],
        "[successful, successful]": ["successful", "successful"],
        "[successful, fails_at_step_0]": ["successful", "step_too_large"],
        "[successful, invalid_initial_state]": ["successful", "invalid_initial_state"],
    }
    for name, fn in {**singles, **saving_every_step, **batches}.items():
        codes = jnp.atleast_1d(fn()[2])
        wanted = [getattr(s2.RESULTS, code)._value for code in expected[name]]
        if [int(c) for c in codes] != [int(w) for w in wanted]:
            raise RuntimeError(f"{name}: result codes {codes}, expected {expected[name]}")
    return singles, saving_every_step, batches


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1000 steps, to check that it runs")
    parser.add_argument("--num-steps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=7)
    options = parser.parse_args()
    num_steps = 1000 if options.quick else options.num_steps
    repeats = 3 if options.quick else options.repeats
    singles, saving_every_step, batches = cases(num_steps)
    load_before = os.getloadavg()
    timed = interleaved_medians({**singles, **saving_every_step, **batches}, repeats=repeats)
    load_after = os.getloadavg()

    def ratios(group, baseline):
        return {name: timed[name][0] / timed[baseline][0] for name in group}

    payload = {
        "model": "double_spherical_pendulum (002 Example 1), VariationalIntegrator",
        "num_steps": num_steps,
        "save_every": {"default": max(num_steps // 100, 1), "saving every step": 1},
        "dt": {"successful": SUCCESSFUL_DT, "failing": FAILING_DT},
        "repeats": repeats,
        "statistic": "median, cases interleaved",
        "load_average_before": load_before,
        "load_average_after": load_after,
        "seconds": {name: median for name, (median, _) in timed.items()},
        "ratio_to_successful": ratios(singles, "successful"),
        "ratio_to_successful_saving_every_step": ratios(saving_every_step, "successful, saving every step"),
        "ratio_to_successful_batch": ratios(batches, "[successful, successful]"),
        "runs_seconds": {name: runs for name, (_, runs) in timed.items()},
    }
    for name, (median, _) in timed.items():
        print(f"{name:40s} {median * 1e3:9.2f} ms")
    for key in ("ratio_to_successful", "ratio_to_successful_saving_every_step", "ratio_to_successful_batch"):
        print(key, {name: round(ratio, 3) for name, ratio in payload[key].items()})
    print("written to", write("failed_runs", payload, quick=options.quick))


if __name__ == "__main__":
    main()
