"""What one step costs when called from Python (issue 32, item 2).

    python benchmarks/stepper_calls.py [--quick] [--repeats 7]

The double spherical pendulum of 002 Example 1 (paper params and state, h = 0.01), stepped one
state at a time in a Python loop, the state fed back:

- `Stepper`: `s2.Stepper(...)`, one compiled step per call (`s2jax/_stepper.py`);
- `simulate, jitted by the user`: `jax.jit` of `s2.simulate(..., num_steps=1)` over (q, ω);
- `simulate, jitted by the user, params and h as values`: the same with the params and h as
  arguments of the jitted function, as the eager call's program takes them (its compiled work:
  new values do not recompile; the user's jit above folds them in as constants);
- `simulate, eager`: `s2.simulate(..., num_steps=1)` as a plain call: the first call checks and
  plans, the repeats run the program it compiled (`s2jax/_eager.py`); its overhead is reported as
  its time per call less that of the user's jitted `simulate`, and less that of the jitted one
  with params and h as values (the same compiled work); all again with 10 steps a call;
- `compiled step inside one program`: a 1000-step `simulate` in one call, per step: the work a
  call cannot avoid;
- `mujoco.mj_step`: MuJoCo's own step from Python on a double pendulum of two ball joints with
  the same masses and lengths (Euler, its default, the cheapest it has), `MjData` reused.

Each run times a loop of 1000 calls, each reading its state back
to the host (`np.asarray(q)`, as a loop that acts on the state must), per call; medians of
`--repeats` runs, the contenders interleaved round-robin. Results: benchmarks/results/
stepper_calls.json with the machine and the load before and after.

`--sync-dispatch` runs the same with JAX's CPU client dispatching synchronously
(`jax.config.update("jax_cpu_enable_async_dispatch", False)` before JAX runs anything): each
program then runs on the calling thread, without the hand-off to JAX's execution thread that an
asynchronous call pays. Results: benchmarks/results/stepper_calls_sync_dispatch.json.

`--sequential-thunks` adds `--xla_cpu_enable_concurrency_optimized_scheduler=false` to `XLA_FLAGS`
before JAX starts its backends: XLA's CPU runtime then runs a program's operations in order, without
handing independent ones to other threads. A program that saves 10 or more states of the double
pendulum pays ~75 µs a call for those hand-offs (9 states do not), the eager `simulate` of 10 steps
among them; a compiler option of s2jax's programs does not reach it, only the flag does. Results:
benchmarks/results/stepper_calls[_sync_dispatch]_sequential_thunks.json.
"""

import argparse
import os
import statistics
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _common import jit, use_sequential_thunks, write  # noqa: E402

import s2jax as s2  # noqa: E402

model = s2.models.double_spherical_pendulum
DT = 0.01

_MJCF = """
<mujoco>
  <option timestep="{dt}" gravity="0 0 -9.81"/>
  <worldbody>
    <body pos="0 0 0">
      <joint type="ball"/>
      <geom type="capsule" fromto="0 0 0 0 0 -{l}" size="0.01" mass="0"/>
      <geom type="sphere" pos="0 0 -{l}" size="0.05" mass="1"/>
      <body pos="0 0 -{l}">
        <joint type="ball"/>
        <geom type="capsule" fromto="0 0 0 0 0 -{l}" size="0.01" mass="0"/>
        <geom type="sphere" pos="0 0 -{l}" size="0.05" mass="1"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def contenders(calls: int) -> dict:
    """name → (a function running one loop of calls, the number of calls)."""
    params = model.paper_params()
    q0, omega0 = (jnp.asarray(x) for x in model.paper_state())
    stepper = s2.Stepper(model.lagrangian, q0, omega0, params, dt=DT)
    jitted = jit(lambda q, w: _last(s2.simulate(model.lagrangian, q, w, params, dt=DT, num_steps=1)))
    whole = jit(lambda q, w: _last(s2.simulate(model.lagrangian, q, w, params, dt=DT, num_steps=calls)))

    def eager(q, w, num_steps=1):  # the state read back as numpy arrays, which simulate takes as they are
        solution = s2.simulate(model.lagrangian, q, w, params, dt=DT, num_steps=num_steps)
        return np.asarray(solution.q)[-1], np.asarray(solution.omega)[-1]

    jitted_10 = jit(lambda q, w: _last(s2.simulate(model.lagrangian, q, w, params, dt=DT, num_steps=10)))
    # The eager call's own compiled work: its program takes the params and h as values (new values
    # do not recompile), where a user's jit above folds them in as constants.
    valued = {
        steps: jit(lambda q, w, p, h, steps=steps: _last(s2.simulate(model.lagrangian, q, w, p, dt=h, num_steps=steps)))
        for steps in (1, 10)
    }
    arrays = {name: jnp.asarray(value) for name, value in params.items()}
    dt = jnp.asarray(DT)

    def loop(step, count):
        def run():
            q, w = q0, omega0
            for _ in range(count):
                q, w = step(q, w)
                observed = np.asarray(q)  # read each state back, as a loop that acts on it does
            return observed

        return run, count

    found = {
        "Stepper": loop(stepper, calls),
        "simulate, jitted by the user": loop(jitted, calls),
        "simulate, eager": loop(eager, calls),
        "simulate of 10 steps, jitted by the user": loop(jitted_10, calls),
        "simulate, jitted by the user, params and h as values": loop(lambda q, w: valued[1](q, w, arrays, dt), calls),
        "simulate of 10 steps, jitted by the user, params and h as values": loop(
            lambda q, w: valued[10](q, w, arrays, dt), calls
        ),
        "simulate of 10 steps, eager": loop(lambda q, w: eager(q, w, 10), calls),
        "compiled step inside one program": (lambda: jax.block_until_ready(whole(q0, omega0)), calls),
    }
    try:
        import mujoco
    except ImportError:
        return found
    mj_model = mujoco.MjModel.from_xml_string(_MJCF.format(dt=DT, l=params["l1"]))
    mj_data = mujoco.MjData(mj_model)
    mj_data.qvel[:] = np.random.default_rng(0).normal(size=mj_model.nv)

    def mujoco_loop():
        for _ in range(calls):
            mujoco.mj_step(mj_model, mj_data)
        return mj_data.qpos.copy()

    found[f"mujoco.mj_step (MuJoCo {mujoco.__version__})"] = (mujoco_loop, calls)
    return found


def _last(solution):
    return solution.q[-1], solution.omega[-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 calls, 2 repeats: check that it runs")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sync-dispatch", action="store_true", help="JAX's CPU client dispatching synchronously")
    parser.add_argument("--sequential-thunks", action="store_true", help="XLA CPU without its concurrency scheduler")
    options = parser.parse_args()
    # both before JAX starts its backends, at its first computation
    if options.sync_dispatch:
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    if options.sequential_thunks:
        use_sequential_thunks()
    calls, repeats = (100, 2) if options.quick else (1000, options.repeats)
    found = contenders(calls)
    for run, _ in found.values():
        run()  # compile
    load_before = os.getloadavg()
    times = {name: [] for name in found}
    for _ in range(repeats):
        for name, (run, count) in found.items():
            start = time.perf_counter()
            run()
            times[name].append((time.perf_counter() - start) / count)
    load_after = os.getloadavg()
    per_call = {name: statistics.median(ts) for name, ts in times.items()}
    for name, seconds in per_call.items():
        print(f"{name:45s} {seconds * 1e6:10.1f} µs per call")
    overhead = {
        steps: per_call[f"simulate{label}, eager"] - per_call[f"simulate{label}, jitted by the user"]
        for steps, label in ((1, ""), (10, " of 10 steps"))
    }
    # Over the same compiled work: a jitted simulate that takes the params and h as values, as the
    # eager call's program does (the "≤ 50 µs over its compiled work").
    over_own = {
        steps: per_call[f"simulate{label}, eager"]
        - per_call[f"simulate{label}, jitted by the user, params and h as values"]
        for steps, label in ((1, ""), (10, " of 10 steps"))
    }
    for steps, seconds in overhead.items():
        print(f"{f'eager simulate of {steps} steps over the jitted one':45s} {seconds * 1e6:10.1f} µs per call")
        print(f"{'  ... over the jitted one with params as values':45s} {over_own[steps] * 1e6:10.1f} µs per call")
    variant = "_sync_dispatch" * options.sync_dispatch + "_sequential_thunks" * options.sequential_thunks
    path = write(
        f"stepper_calls{variant}",
        {
            "command": "python benchmarks/stepper_calls.py" + (" --quick" if options.quick else "")
            + (" --sync-dispatch" if options.sync_dispatch else "")
            + (" --sequential-thunks" if options.sequential_thunks else ""),
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "model": "double_spherical_pendulum, paper params and state, h = 0.01",
            "calls_per_run": calls,
            "repeats": repeats,
            "load_before": load_before,
            "load_after": load_after,
            "median_seconds_per_call": per_call,
            "eager_overhead_seconds_per_call": {f"{steps} steps": seconds for steps, seconds in overhead.items()},
            "eager_overhead_over_the_same_compiled_work_seconds_per_call": {
                f"{steps} steps": seconds for steps, seconds in over_own.items()
            },
            "seconds_per_call": times,
        },
        quick=options.quick,
    )
    print(f"written: {path}")


if __name__ == "__main__":
    main()
