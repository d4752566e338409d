"""Batch throughput, million system-steps per second, for double pendula (002 Example 1).

    python benchmarks/batch_throughput.py [--quick]

B random initial states of the double spherical pendulum (`s2.random_state`, paper params),
`num_steps` steps of h = 0.01 each, only the first and last states saved. Three methods, each
over the batch split across all devices (one `shard_map` slice per device):

- `VariationalIntegrator` through `s2.simulate_batch` (the default integrator), `vmap`ped over
  each device's whole slice (`members_last=False`);
- `Rattle` and `RungeKutta4` the same way;
- on a GPU, also the VI with its Newton iterations fixed at three (`unrolled=3`,
  `NewtonSettings(max_steps=3)`: no convergence loop inside the step, an experiment to measure
  what that loop costs there; its final states are compared with the default VI's, and a member
  not converged in three iterations would fail the run);
- on CPU, each again in the chunks of 64 members that a vmapped `simulate_batch` takes for a run of
  ≥ 10⁸ body-steps (`members_last=False`; this one, 2·10⁶, would run each device's whole slice at once);
- each with the members along the last axis (`members_last=True`: `simulate_batch`'s default on
  CPU, in chunks of 64 there; on a GPU over the whole slice);
- each as a user's `jax.vmap(simulate)` over each device's slice (`_common.sharded_batch`: a
  `shard_map` of the `vmap`, compiled with s2jax's XLA options): on CPU the members run along the
  last axis by `simulate`'s own batching rule (`s2jax/_member_program.py`, chunks of 64); before
  it, this was the vmapped row above (`members_last=False` over the whole slice);
- a hand-written RK4 on (2.9)–(2.10) in `lax.scan` whose 2-body solve for ω̇ is written in
  closed form (below), the fastest fair form of the baseline; its field is checked against
  `LagrangianSystem.angular_acceleration` before it is timed. It runs vmapped over each device's
  whole slice and, as `simulate_batch` does on CPU, in chunks of 16 and 64 members
  (`_common.sharded_batch`), and written with the members along the last axis (`_common.batch_last`:
  arrays of (2, 3, members), so that XLA vectorises every operation across the members, where a
  `vmap` leaves it working on 3-vectors), on CPU in chunks of 32 and 64 members, on a GPU over the
  whole slice. The fastest row is the baseline of the `over_baseline` ratios.

Throughput is B · num_steps / (median wall time of 5 runs after a compiling run, whose time,
compilation included, is `first_call_s`; the contenders' runs interleaved). float64.
On CPU: B = 1024, 1000 steps, with 1 and 2 host devices (each count in a subprocess with
XLA_FLAGS=--xla_force_host_platform_device_count, since it is fixed when jax starts); results
in benchmarks/results/batch_throughput_cpu.json. On a GPU: B = 10³ … 10⁶ (as memory allows),
200 steps; results in benchmarks/results/batch_throughput_<gpu>.json. `--quick` runs a small
batch and few steps and writes to a temporary folder.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
from _common import batch_last, classical_rk4, interleaved_medians, sharded_batch, write  # noqa: E402

import s2jax as s2  # noqa: E402

dsp = s2.models.double_spherical_pendulum
DT = 0.01
REPEATS = 5
HAND = "hand-written RK4 (closed-form solve)"
USER_VMAP = "jax.vmap(simulate)"
HAND_CHUNKS = (16, 64)  # chunked as `simulate_batch` chunks on CPU (`_common.sharded_batch`)
# The hand RK4 with the members along the last axis (`_common.batch_last`), in chunks that stay in
# cache on CPU (a sweep of 8…256 on one host device, 1024 × 1000: 8.2 / 17.8 / 21.2 / 22.6 / 20.2 /
# 13.0 M steps/s at 8 / 16 / 32 / 64 / 128 / 256; the whole slice at once 6.1); a GPU takes the whole slice.
BATCH_LAST_CHUNKS = (32, 64)
# `simulate_batch`'s chunk on CPU for a run of ≥ 10⁸ body-steps (its `chunk_size` docs): 256 bodies, at most
# 64 members; this benchmark's 1024 × 1000 steps of 2 bodies is shorter, so its default rows are unchunked.
CHUNK = 64


def closed_form_acceleration(q, omega, params):
    """ω̇ of (2.9) for the double pendulum, the 2 × 2 block system solved in closed form.

    Projecting Σ_j M_ij q̈_j = −∂V/∂q_i onto T_{q_i}S² with q̈_j = ω̇_j × q_j − |ω_j|² q_j gives
    M₁₁ a + M₁₂ B₁₂ b = r₁, M₂₂ b + M₁₂ B₂₁ a = r₂ for a = ω̇₁, b = ω̇₂, with B_ij x = q_i × (x × q_j)
    = c x − q_j (q_i·x), c = q₁·q₂, and r_i = −q_i × ∂V/∂q_i + M_ij |ω_j|² q_i × q_j. Eliminating b,
    (M₁₁ − k B₁₂B₂₁) a = r₁ − (M₁₂/M₂₂) B₁₂ r₂ with k = M₁₂²/M₂₂, and on T_{q₁}S²
    B₁₂B₂₁ = c² I + w wᵀ with w = q₂ − c q₁, so Sherman–Morrison inverts it with d = M₁₁ − k c²:
    a = (s + k w (w·s) / (M₁₁ − k)) / d.

    q and ω are (2, 3) for one member, or (2, 3, *batch) with the members along trailing axes
    (`BATCH_LAST`): the components are always axis 1, so the same code serves both forms.
    """
    m1, m2, l1, l2, g = (params[k] for k in ("m1", "m2", "l1", "l2", "g"))
    m11, m12, m22 = (m1 + m2) * l1**2, m2 * l1 * l2, m2 * l2**2
    q1, q2 = q[0], q[1]

    def dot(a, b):
        return jnp.sum(a * b, axis=0)

    def cross(a, b):
        return jnp.cross(a, b, axis=0)

    e3 = jnp.array([0.0, 0.0, 1.0]).reshape(3, *[1] * (q1.ndim - 1))
    grad1, grad2 = -(m1 + m2) * g * l1 * e3, -m2 * g * l2 * e3
    c = dot(q1, q2)
    q1xq2 = cross(q1, q2)
    r1 = -cross(q1, jnp.broadcast_to(grad1, q1.shape)) + m12 * dot(omega[1], omega[1]) * q1xq2
    r2 = -cross(q2, jnp.broadcast_to(grad2, q2.shape)) - m12 * dot(omega[0], omega[0]) * q1xq2
    k = m12**2 / m22
    s = r1 - (m12 / m22) * (c * r2 - q2 * dot(q1, r2))
    w = q2 - c * q1
    a = (s + k * w * dot(w, s) / (m11 - k)) / (m11 - k * c**2)
    b = (r2 - m12 * (c * a - q1 * dot(q2, a))) / m22
    return jnp.stack([a, b])


def hand_rk4(q0, omega0, params, num_steps):
    """num_steps of classical RK4 on (q̇, ω̇) = (ω × q, closed_form_acceleration) from (q0, ω0) of
    shape (2, 3) (one member) or (2, 3, *batch) (members along trailing axes)."""

    def field(y):
        q, omega = y
        return jnp.cross(omega, q, axis=1), closed_form_acceleration(q, omega, params)

    return classical_rk4(field, (q0, omega0), DT, num_steps)


def check_closed_form(params):
    system = s2.LagrangianSystem(dsp.lagrangian)
    worst = 0.0
    for key in jax.random.split(jax.random.PRNGKey(1), 8):
        q, omega = s2.random_state(key, 2)
        args = system.prepare(q, params)
        reference = system.angular_acceleration(jnp.zeros(()), q, omega, args)
        worst = max(worst, float(jnp.max(jnp.abs(closed_form_acceleration(q, omega, params) - reference))))
    if worst > 1e-10:
        raise AssertionError(f"closed-form ω̇ differs from angular_acceleration by {worst:.3g}")
    return worst


def _methods(fixed_iterations):
    """{name: (integrator, chunk_size, members_last) of `simulate_batch`}: each method vmapped over
    each device's whole slice, on CPU also in the chunks of a long run (`CHUNK`), and with the
    members along the last axis (`simulate_batch`'s default on CPU)."""
    methods = {}
    for name, integrator in (
        ("VariationalIntegrator", s2.VariationalIntegrator()),
        ("Rattle", s2.Rattle()),
        ("RungeKutta4", s2.RungeKutta4()),
    ):
        methods[name] = (integrator, None, False)
        if jax.default_backend() == "cpu":
            methods[f"{name}, chunks of {CHUNK}"] = (integrator, CHUNK, False)
        methods[f"{name}, members along the last axis"] = (integrator, None, True)
    if fixed_iterations:
        methods["VI, 3 fixed Newton iterations"] = (
            s2.VariationalIntegrator(newton=s2.NewtonSettings(max_steps=3), unrolled=3), None, False
        )
    return methods


def measure(batch_size, num_steps, fixed_iterations=False):
    """The methods on one batch: {method: {"seconds", "times", "first_call_s", "msteps_per_s"}}."""
    params = jax.tree_util.tree_map(jnp.asarray, dsp.paper_params())
    q0, omega0 = jax.vmap(lambda k: s2.random_state(k, 2))(jax.random.split(jax.random.PRNGKey(0), batch_size))
    calls = {}
    for name, (integrator, chunk_size, members_last) in _methods(fixed_iterations).items():

        def run(integrator=integrator, chunk_size=chunk_size, members_last=members_last):
            return s2.simulate_batch(
                dsp.lagrangian, q0, omega0, params, dt=DT, num_steps=num_steps, save_every=num_steps,
                integrator=integrator, chunk_size=chunk_size, members_last=members_last,
            ).q[:, -1]

        calls[name] = run
    for name, (integrator, _, _) in _methods(False).items():
        if "," in name:
            continue
        # a user's `jax.vmap(simulate)`, each device vmapping its slice (`_member_program`'s rule)
        vmapped = sharded_batch(lambda q, w, integrator=integrator: s2.simulate(
            dsp.lagrangian, q, w, params, dt=DT, num_steps=num_steps, save_every=num_steps, integrator=integrator,
        ).q[-1])
        calls[f"{name}, {USER_VMAP}"] = lambda vmapped=vmapped: vmapped(q0, omega0)
    per_device = batch_size // jax.device_count()
    for chunk in (None, *(HAND_CHUNKS if jax.default_backend() == "cpu" else ())):
        if chunk is not None and (chunk >= per_device or per_device % chunk):
            continue
        rk4 = sharded_batch(lambda q, w: hand_rk4(q, w, params, num_steps)[0], chunk)
        calls[HAND + ("" if chunk is None else f", chunks of {chunk}")] = lambda rk4=rk4: rk4(q0, omega0)
    for chunk in BATCH_LAST_CHUNKS if jax.default_backend() == "cpu" else (per_device,):
        if per_device % chunk:
            continue
        rk4 = batch_last(lambda q, w: hand_rk4(q, w, params, num_steps)[0], chunk)
        label = "" if chunk == per_device else f", chunks of {chunk}"
        calls[f"{HAND}, members along the last axis{label}"] = lambda rk4=rk4: rk4(q0, omega0)
    first, final_q = {}, {}
    for name, call in calls.items():
        start = time.perf_counter()
        final_q[name] = jax.block_until_ready(call())
        first[name] = time.perf_counter() - start
    rows = {
        name: {"seconds": seconds, "times": times, "first_call_s": first[name]}
        for name, (seconds, times) in interleaved_medians(calls, REPEATS).items()
    }
    # the same method on the same field; RK4 leaves T(S²)ⁿ by O(h⁵) a step, and off it the two
    # forms of ω̇ (this closed form, and (2.11) solved by s2jax) differ, so the gap is not zero
    hand, vi = final_q[HAND], final_q["VariationalIntegrator"]
    gaps = {"max_q_gap_rungekutta4_vs_hand_rk4": hand - final_q["RungeKutta4"]}
    # s2jax's methods along either axis: the same arithmetic but for the order of small sums, grown by chaos
    gaps["max_q_gap_members_last_vs_vmap"] = jnp.stack(
        [final_q[f"{m}, members along the last axis"] - final_q[m] for m in ("VariationalIntegrator", "Rattle")]
    )
    gaps["max_q_gap_user_vmap_vs_simulate_batch_vmap"] = jnp.stack(
        [final_q[f"{m}, {USER_VMAP}"] - final_q[m] for m in ("VariationalIntegrator", "Rattle", "RungeKutta4")]
    )
    # the same arithmetic in another layout: equal but for rounding, grown over 1000 steps of chaos
    gaps["max_q_gap_members_along_the_last_axis_vs_vmap"] = jnp.stack(
        [final_q[name] - hand for name in final_q if name.startswith(HAND) and "last axis" in name]
    )
    if fixed_iterations:
        gaps["max_q_gap_fixed_iterations_vs_vi"] = final_q["VI, 3 fixed Newton iterations"] - vi
    for row in rows.values():
        row["msteps_per_s"] = batch_size * num_steps / row["seconds"] / 1e6
    gaps = {name: float(jnp.max(jnp.abs(gap))) for name, gap in gaps.items()}
    baseline = max((name for name in rows if name.startswith(HAND)), key=lambda name: rows[name]["msteps_per_s"])
    over_baseline = {
        name: rows[name]["msteps_per_s"] / rows[baseline]["msteps_per_s"] for name in rows if not name.startswith(HAND)
    }
    return {
        "batch_size": batch_size, "num_steps": num_steps, "methods": rows, "baseline": baseline,
        "over_baseline": over_baseline, **gaps,
    }


def child(batch_sizes, num_steps):
    print(json.dumps({"device_count": jax.device_count(), "runs": [measure(b, num_steps) for b in batch_sizes]}))


def cpu_scaling(batch_size, num_steps, device_counts):
    """Each host-device count in its own process (the count is fixed when jax starts)."""
    out = []
    for count in device_counts:
        env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={count}"}
        command = [sys.executable, __file__, "--child", str(batch_size), "--steps", str(num_steps)]
        run = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        result = json.loads(run.stdout.strip().splitlines()[-1])
        print(f"{count} host device(s): {_summary(result['runs'][0])}", flush=True)
        out.append(result)
    return out


def _summary(run):
    rates = ", ".join(f"{name} {row['msteps_per_s']:.3g}" for name, row in run["methods"].items())
    ratios = ", ".join(f"{name} {ratio:.2f}" for name, ratio in run["over_baseline"].items())
    return f"{rates} M steps/s; over the baseline: {ratios}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", type=int, nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--batch-sizes", type=int, nargs="+", help="GPU batch sizes (default 10³ … 10⁶)")
    arguments = parser.parse_args()
    if arguments.child:
        return child(arguments.child, arguments.steps)
    closed_form_error = check_closed_form(jax.tree_util.tree_map(jnp.asarray, dsp.paper_params()))
    payload = {"command": " ".join([os.path.basename(sys.executable), *sys.argv]), "dt": DT, "repeats": REPEATS,
               "closed_form_check_max_error": closed_form_error, "load_average_at_start": os.getloadavg()}
    if jax.default_backend() == "cpu":
        batch_size, num_steps = (64, 20) if arguments.quick else (1024, 1000)
        payload["host_device_scaling"] = cpu_scaling(batch_size, num_steps, (1, 2))
        payload["load_average_at_end"] = os.getloadavg()  # other work on the cores slows every method
        name = "batch_throughput_cpu"
    else:
        num_steps = 20 if arguments.quick else 200
        sizes = arguments.batch_sizes or ([1000] if arguments.quick else [10**3, 10**4, 10**5, 10**6])
        payload["device_kind"] = jax.devices()[0].device_kind
        payload["runs"] = runs = []
        name = "batch_throughput_" + re.sub(r"[^a-z0-9]+", "_", jax.devices()[0].device_kind.lower()).strip("_")
        for batch_size in sizes:
            try:
                runs.append(measure(batch_size, num_steps, fixed_iterations=True))
            except Exception as error:  # noqa: BLE001 -- out of device memory ends the sweep, recorded
                runs.append({"batch_size": batch_size, "num_steps": num_steps, "error": str(error)[:500]})
                print(f"B = {batch_size}: {str(error)[:200]}", flush=True)
                break
            print(f"B = {batch_size}: {_summary(runs[-1])}", flush=True)
            write(name, payload, quick=arguments.quick)  # what is done so far survives a time limit
    print(write(name, payload, quick=arguments.quick))


if __name__ == "__main__":
    main()
