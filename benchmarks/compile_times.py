"""Compile time of each public entry point: its first call in a fresh process, against a second call.

    python benchmarks/compile_times.py [--repeats 5] [--only NAME ...] [--quick]

Each entry point (`ENTRY_POINTS`, each function's docstring says what it calls) runs in a fresh
Python subprocess of its own, so nothing compiled is in memory, with JAX's persistent compilation
cache off (`JAX_COMPILATION_CACHE_DIR` and `S2JAX_CACHE_DIR` removed from its environment, and
`s2.enable_compilation_cache` never called), in float64 and at XLA's default optimisation level
(any `--xla_backend_optimization_level` removed from `XLA_FLAGS`). The subprocess builds the
inputs, then measures:

- `first_call_s`: the wall time of the first call (tracing, lowering, compiling and running),
  blocking on its outputs (`jax.block_until_ready`);
- `trace_s`, `lower_s`, `compile_s`, `backend_compiles`: the first call broken down by JAX's
  `jax.monitoring` duration events, the sums of those ending in `jaxpr_trace_duration`,
  `jaxpr_to_mlir_module_duration` and `backend_compile_duration`, and the number of the last.
  A function traced inside another's trace is counted in both, so `trace_s` can exceed the wall
  time;
- `second_call_s`: the wall time of an immediate second call on new values of the same shapes
  (what changes: the entry point's docstring, each row's `what`), and `recompiled_on_second_call`,
  the number of backend compiles during it (0 when nothing is compiled again).

The subprocesses run `--repeats` times, interleaved (every entry point once, then again), and
the medians are reported with every run's values, the load average before and after, and the
total wall time. The observations that `fit` fits are simulated by this process, not by the
fit's subprocess (whose simulate would compile some of what the fit compiles). Results:
benchmarks/results/compile_times.json (`--quick`: one repeat of `simulate` and `grad`, into a
temporary folder).
"""

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _common import write  # noqa: E402

import s2jax as s2  # noqa: E402
from s2jax.control import examples  # noqa: E402
from s2jax.models import double_spherical_pendulum as dsp, elastic_rod, rotating_spherical_pendulum  # noqa: E402

DT = 0.01
STEPS = 1000
DELTA = 1e-6  # how far the second call's inputs move
FIT_STEPS = 300  # 3 s, as in tests/test_fit.py
FIT_OBSERVED = np.arange(5, FIT_STEPS + 1, 5)
EVENTS = {"trace_s": "jaxpr_trace_duration", "lower_s": "jaxpr_to_mlir_module_duration",
          "compile_s": "backend_compile_duration"}
TIMES = ("first_call_s", "second_call_s", *EVENTS)


def _turned(angle, axis, *vectors):
    """Arrays of 3-vectors rotated by `angle` about e_axis (numpy only: no JAX program runs)."""
    c, s = np.cos(angle), np.sin(angle)
    i, j = (k for k in range(3) if k != axis)
    rotation = np.eye(3)
    rotation[[i, i, j, j], [i, j, i, j]] = c, -s, s, c
    return tuple(np.asarray(v) @ rotation.T for v in vectors)


def _tilted(q, omega, angle):
    """(q, ω) rotated by `angle` about e₁: a state of T(S²)ⁿ again."""
    return _turned(angle, 0, q, omega)


def _final_height(l1, q0, omega0, params):
    sol = s2.simulate(dsp.lagrangian, q0, omega0, {**params, "l1": l1}, dt=DT, num_steps=STEPS)
    return sol.q[-1, 1, 2]


_height_gradient = jax.jit(jax.grad(_final_height))
# One system for both calls: a second `legendre_transform` would be another (static) function.
_hamiltonian_system = s2.HamiltonianSystem(s2.legendre_transform(dsp.lagrangian))


def simulate(delta):
    """`s2.simulate` of the double spherical pendulum (paper params and state), dt = 0.01, 1000 steps,
    default integrator; second call: the state tilted by `DELTA` rad."""
    q0, omega0 = _tilted(*dsp.paper_state(), delta)
    return lambda: s2.simulate(dsp.lagrangian, q0, omega0, dsp.paper_params(), dt=DT, num_steps=STEPS)


def grad(delta):
    """`jax.jit(jax.grad)` of the final q₂₃ of `simulate`'s run with respect to params["l1"]; second
    call: l1 + `DELTA` and the state tilted by `DELTA` rad."""
    params = dsp.paper_params()
    q0, omega0 = _tilted(*dsp.paper_state(), delta)
    return lambda: _height_gradient(params["l1"] + delta, q0, omega0, params)


def simulate_batch(delta):
    """`s2.simulate_batch` of the double pendulum from 64 `s2.random_state`s, 1000 steps,
    save_every = 1000; second call: other random states."""
    keys = jax.random.split(jax.random.PRNGKey(1 if delta else 0), 64)
    q0, omega0 = jax.block_until_ready(jax.vmap(lambda key: s2.random_state(key, 2))(keys))
    return lambda: s2.simulate_batch(
        dsp.lagrangian, q0, omega0, dsp.paper_params(), dt=DT, num_steps=STEPS, save_every=STEPS
    )


def hamiltonian(delta):
    """`s2.simulate` of `s2.HamiltonianSystem(s2.legendre_transform(dsp.lagrangian))` (HamiltonianRattle),
    the double pendulum's paper params and state, 1000 steps; second call: the state tilted by `DELTA`."""
    q0, omega0 = _tilted(*dsp.paper_state(), delta)
    return lambda: s2.simulate(_hamiltonian_system, q0, omega0, dsp.paper_params(), dt=DT, num_steps=STEPS)


def general_lagrangian(delta):
    """`s2.simulate` of `models.rotating_spherical_pendulum` (GeneralVariationalIntegrator), paper
    params and state, dt = 0.01, 1000 steps; second call: the state tilted by `DELTA` rad."""
    q0, omega0 = _tilted(*rotating_spherical_pendulum.paper_state(), delta)
    params = rotating_spherical_pendulum.paper_params()
    return lambda: s2.simulate(rotating_spherical_pendulum.lagrangian, q0, omega0, params, dt=DT, num_steps=STEPS)


def dense_8(delta):
    """`s2.simulate` of `models.elastic_rod` with 8 free elements (M dense, not a chain: the implicit
    VI's dense path), paper params and state, dt = 0.001, 1000 steps; second call: the state
    tilted by `DELTA` rad."""
    q0, omega0 = _tilted(*elastic_rod.paper_state(8), delta)
    params = elastic_rod.paper_params(8)
    return lambda: s2.simulate(elastic_rod.lagrangian, q0, omega0, params, dt=1e-3, num_steps=STEPS)


def fit(delta, observations):
    """`s2.fit.fit` of ("l1", "l2", "m2") of the double pendulum to 3 s of noise-free directions of
    body 1 every 5 steps, segments = 2, the guess 8 % off (as in tests/test_fit.py); second
    call: the state and the observations turned by `DELTA` rad about the vertical (a symmetry:
    the same fit on new values)."""
    truth = dsp.paper_params()
    guess = dict(truth, l1=1.08 * truth["l1"], l2=0.93 * truth["l2"], m2=1.1 * truth["m2"])
    q0, omega0, observations = _turned(delta, 2, *dsp.paper_state(), observations)
    return lambda: s2.fit.fit(
        dsp.lagrangian, guess, observations, times=FIT_OBSERVED * DT, bodies=[1], dt=DT,
        q0=q0, omega0=omega0, free=("l1", "l2", "m2"), segments=2,
    )


def control(delta):
    """`s2.control.solve` of `s2.control.examples.spherical_pendulum_swing_up()` with `ILQR()` and its
    initial guess; second call: the same problem from q0 tilted by `DELTA` rad."""
    problem, q0, omega0, init = examples.spherical_pendulum_swing_up()
    q0, omega0 = _tilted(q0, omega0, delta)
    return lambda: s2.control.solve(problem, q0, omega0, solver=s2.control.ILQR(), init=init)


def control_gradient(delta):
    """`jax.grad` of the summed optimal costs of `s2.control.solve_many` (`ILQR(rtol=1e-15)`, two
    members) with respect to g: a spherical pendulum moved in 0.4 s (20 steps) towards (0.6, 0,
    0.8) from (0, 0, 1) turned by 0.5 and 0.7 rad about e₁, cost ∫ |u|² + 100 |q_N − target|² +
    |ω_N|², the explicit VI; second call: both starts turned `DELTA` rad more."""
    pendulum = s2.models.spherical_pendulum
    target = np.array([[0.6, 0.0, 0.8]])
    down = np.array([[0.0, 0.0, 1.0]])
    starts = [_turned(angle + delta, 0, down, np.zeros((1, 3))) for angle in (0.5, 0.7)]
    q0, omega0 = (np.stack(parts) for parts in zip(*starts))

    def total(g):
        problem = s2.control.Problem(
            pendulum.lagrangian, {"m": 1.0, "r": 1.0, "g": g}, s2.forces.PivotTorque(0), 0.02, 20,
            running_cost=lambda t, q, omega, u: jnp.sum(u**2),
            terminal_cost=lambda q, omega: 100.0 * jnp.sum((q - target) ** 2) + jnp.sum(omega**2),
            integrator=s2.ExplicitVariationalIntegrator(),
        )
        return jnp.sum(s2.control.solve_many(problem, q0, omega0, solver=s2.control.ILQR(rtol=1e-15)).cost)

    return lambda: jax.grad(total)(9.81)


ENTRY_POINTS = {f.__name__: f for f in (
    simulate, grad, simulate_batch, hamiltonian, general_lagrangian, dense_8, fit, control, control_gradient
)}


def fit_observations() -> np.ndarray:
    """The directions of body 1 every 5 steps of 3 s of the double pendulum, shape (60, 1, 3)."""
    sol = s2.simulate(dsp.lagrangian, *dsp.paper_state(), dsp.paper_params(), dt=DT, num_steps=FIT_STEPS)
    return np.asarray(sol.q[FIT_OBSERVED][:, [1]])


def measure(name: str, observations: str | None) -> dict:
    """The first and second call of one entry point, in this (fresh) process."""
    assert jax.config.jax_compilation_cache_dir is None, "the persistent compilation cache must be off"
    durations = collections.defaultdict(list)
    jax.monitoring.register_event_duration_secs_listener(lambda event, seconds, **_: durations[event].append(seconds))

    def timed(call):
        durations.clear()
        start = time.perf_counter()
        jax.block_until_ready(call())
        return time.perf_counter() - start, {
            key: [s for event, ss in durations.items() if event.endswith(suffix) for s in ss]
            for key, suffix in EVENTS.items()
        }

    setup = ENTRY_POINTS[name]
    extra = (np.load(observations),) if observations else ()
    first_s, first = timed(setup(0.0, *extra))
    second_s, second = timed(setup(DELTA, *extra))
    return {
        "first_call_s": first_s, "second_call_s": second_s,
        **{key: sum(seconds) for key, seconds in first.items()},
        "backend_compiles": len(first["compile_s"]), "recompiled_on_second_call": len(second["compile_s"]),
    }


def child_environment() -> dict:
    """This environment without a compilation cache folder or an XLA optimisation level."""
    environment = {k: v for k, v in os.environ.items() if k not in ("JAX_COMPILATION_CACHE_DIR", "S2JAX_CACHE_DIR")}
    flags = environment.get("XLA_FLAGS", "").split()
    environment["XLA_FLAGS"] = " ".join(f for f in flags if not f.startswith("--xla_backend_optimization_level"))
    return environment


def run_child(name: str, observations: str) -> dict:
    command = [sys.executable, __file__, "--child", name] + (["--observations", observations] if name == "fit" else [])
    done = subprocess.run(command, env=child_environment(), capture_output=True, text=True)
    if done.returncode:
        return {"error": done.stderr[-2000:]}
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", nargs="+", choices=list(ENTRY_POINTS), metavar="NAME",
                        help=f"these entry points only, of {', '.join(ENTRY_POINTS)}")
    parser.add_argument("--quick", action="store_true", help="one repeat of simulate and grad: checks the script works")
    parser.add_argument("--child", choices=list(ENTRY_POINTS), help=argparse.SUPPRESS)
    parser.add_argument("--observations", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.observations)))
        return
    names = args.only or (["simulate", "grad"] if args.quick else list(ENTRY_POINTS))
    repeats = 1 if args.quick else args.repeats
    load_before, start = os.getloadavg(), time.perf_counter()
    runs = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as folder:
        observations = os.path.join(folder, "observations.npy")
        if "fit" in names:
            np.save(observations, fit_observations())
        for repeat in range(repeats):
            for name in names:
                runs[name].append(run_child(name, observations))
                print(f"{repeat + 1}/{repeats} {name}: {runs[name][-1]}", flush=True)
    rows = {}
    for name, found in runs.items():
        done = [run for run in found if "error" not in run]
        rows[name] = {
            "what": " ".join(ENTRY_POINTS[name].__doc__.split()),
            "medians": {key: statistics.median(run[key] for run in done) for key in (done[0] if done else ())},
            "most_recompiled_on_second_call": max((run["recompiled_on_second_call"] for run in done), default=None),
            "failed_runs": len(found) - len(done),
            "runs": found,
        }
    total_s = time.perf_counter() - start
    path = write(
        "compile_times",
        {
            "command": " ".join(["python benchmarks/compile_times.py", *sys.argv[1:]]),
            "repeats": repeats, "delta": DELTA, "load_before": load_before, "load_after": os.getloadavg(),
            "total_s": total_s, "rows": rows,
        },
        quick=args.quick,
    )
    print(f"{'median (s)':18s} {'first':>7s} {'second':>7s} {'trace':>7s} {'lower':>7s} {'compile':>7s} #compiles")
    for name, row in rows.items():
        m = row["medians"]
        times = " ".join(f"{m[key]:7.3f}" for key in TIMES) if m else "failed in every run"
        print(f"{name:18s} {times} {m.get('backend_compiles', 0):9.0f}, recompiled at most "
              f"{row['most_recompiled_on_second_call']}, {row['failed_runs']} failed")
    print(f"total {total_s:.0f} s; wrote {path}")


if __name__ == "__main__":
    main()
