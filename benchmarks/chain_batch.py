"""Batch throughput on a 16-link chain pendulum, against a hand-written RK4 (issue 32, item 3).

    python benchmarks/chain_batch.py [--quick] [--links 16]

B = 1024 random initial states near hanging (`swinging_states`) of the n-link chain
(`s2.models.chain_pendulum`, its paper params: m_i = 1 kg, l_i = 9.81 m), 1000 steps of h = 0.01,
only the first and last states saved, through `s2.simulate_batch` with the VI, `RungeKutta4`,
`Rattle` (the VI's map by multipliers, O(n) a step on a chain from 5 links) and the default
(`integrator=None`: `Rattle` on a chain from 5 links, the VI before f1968ba),
beside a hand-written RK4 vmapped over the batch (all over the same one-axis mesh of all
devices, `shard_map`). (Before `Rattle` took a chain's tridiagonal W, beyond 8 bodies it
factorised a dense n × n matrix by LAPACK: 0.083 M steps/s here on one device, and with two
host devices and 512 members per device that program never returned: docs/batches.md.)

The hand-written RK4 is the fastest fair form of the baseline we know for a chain: the
Euler–Lagrange equations in ambient coordinates with one multiplier per link,

    Σ_j M_ij q̈_j = F_i + λ_i q_i,  F_i = −∂V/∂q_i = g (Σ_{k≥i} m_k) l_i e₃,

where M is constant (`chain_pendulum.inertia_matrix`): with P = M⁻¹, formed once per run,
q̈_i = Σ_j P_ij (F_j + λ_j q_j), and the constraints q_i·q̈_i + |q̇_i|² = 0 give the n × n system

    G λ = −|q̇_i|² − q_i·(P F)_i,  G_ij = P_ij (q_i·q_j),

G symmetric positive definite (the Schur product of P and the Gram matrix of the q_i, whose
diagonal is 1). For a chain P is tridiagonal (M is a scaled Green's matrix, c_{max(i,j)} with c
decreasing), so G is too: per RK4 stage, O(n) products and one tridiagonal solve; P F is constant.
The state is (q, q̇) ∈ ℝ³ⁿ × ℝ³ⁿ: RK4 drifts off |q_i| = 1 by O(h⁵) a step, as s2jax's
`RungeKutta4` does. Two forms of the tridiagonal solve are timed and the faster is the baseline:
Thomas's elimination written out over n (which XLA vectorises over the batch) and
`lax.linalg.tridiagonal_solve` (LAPACK's gtsv per member on CPU), each vmapped over a device's
whole slice and, as `simulate_batch` does on CPU, in chunks of 8, 16 and 32 members (`lax.map` of
the vmap, `_common.sharded_batch`); and Thomas's form written with the members along the last axis
(`_common.batch_last`: arrays of (n, 3, members), which XLA vectorises across the members, where a
`vmap` works on 3-vectors), on CPU in chunks of 32 and 64. The fastest of these rows is the baseline.
s2jax's methods run vmapped over whole slices and in chunks of 16 (`members_last=False`; the
chunks a vmapped `simulate_batch` takes from 10⁸ body-steps), and with the members along the last
axis (`members_last=True`, `simulate_batch`'s default on CPU: chunks of 32 here),
and as a user's `jax.vmap(simulate)` over each device's slice (`_common.sharded_batch`), which on
CPU runs the members along the last axis by `simulate`'s own batching rule
(`s2jax/_member_program.py`, chunks of 32; before it, the vmapped rows).
The field is checked against s2jax's `LagrangianSystem.angular_acceleration`
(q̈_i = ω̇_i × q_i + ω_i × (ω_i × q_i)) before timing.

Each host-device count (1, 2) runs in its own process (the count is fixed when jax starts); the
contenders' runs are interleaved, median of 5, after a compiling run whose time (compilation
included) is `first_call_s`. float64. Results: benchmarks/results/chain_batch_cpu.json (on a GPU,
chain_batch_<device>.json). `--quick`: a small batch, few steps, a temporary folder.
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
import numpy as np  # noqa: E402
from _common import batch_last, classical_rk4, interleaved_medians, sharded_batch, write  # noqa: E402
from jax import lax  # noqa: E402

import s2jax as s2  # noqa: E402

chain = s2.models.chain_pendulum
DT = 0.01
REPEATS = 5


def swinging_states(n, batch_size, seed=0):
    """Chains swinging about the hanging state: q_i = (e₃ + 0.5 ξ_i)/|…|, ω_i = 0.5 η_i projected
    onto T_{q_i}S², ξ_i, η_i standard normal. (From `s2.random_state`'s uniform q_i, some of 1024
    chains fall from above the pivot and whip their tip fast enough within 10 s that the VI's
    Newton iteration fails at h = 0.01.)"""
    xi, eta = np.random.default_rng(seed).normal(size=(2, batch_size, n, 3))
    q = np.array([0.0, 0.0, 1.0]) + 0.5 * xi
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    return jnp.asarray(q), s2.project_tangent(q, 0.5 * eta)
HAND = "hand-written RK4 (ambient, multipliers)"
HAND_CHUNKS = (8, 16, 32)  # as `simulate_batch` chunks on CPU (`sharded_batch`); the fastest row is the baseline
# With the members along the last axis (`batch_last`, Thomas written out), in chunks that stay in cache on CPU
# (a sweep at 16 links, one host device, 1024 × 1000: 1.30 / 1.54 / 2.35 / 2.37 / 1.13 M steps/s at chunks of
# 8 / 16 / 32 / 64 / 128, against 1.33 for the vmap in chunks of 16); a GPU takes the whole slice.
BATCH_LAST_CHUNKS = (32, 64)


def thomas_solve(lower, diagonal, upper, r):
    """x with T x = r for tridiagonal T (sub-, main and super-diagonals; `lower[0]` and
    `upper[-1]` unused): Thomas's elimination written out over n, as straight-line code (no
    pivoting, stable for the SPD G)."""
    n = diagonal.shape[0]
    c, d = [upper[0] / diagonal[0]], [r[0] / diagonal[0]]
    for i in range(1, n):
        pivot = diagonal[i] - lower[i] * c[i - 1]
        c.append(upper[i] / pivot)
        d.append((r[i] - lower[i] * d[i - 1]) / pivot)
    x = [d[-1]]
    for i in reversed(range(n - 1)):
        x.append(d[i] - c[i] * x[-1])
    return jnp.stack(x[::-1])


def lapack_tridiagonal_solve(lower, diagonal, upper, r):
    """The same solve by `jax.lax.linalg.tridiagonal_solve` (LAPACK's gtsv on CPU)."""
    lower = jnp.concatenate([jnp.zeros(1, r.dtype), lower[1:]])
    upper = jnp.concatenate([upper[:-1], jnp.zeros(1, r.dtype)])
    return lax.linalg.tridiagonal_solve(lower, diagonal, upper, r[:, None])[:, 0]


def acceleration(q, v, bands, pf, solve):
    """q̈ of the chain with the multipliers of |q_i| = 1 (see the module docstring). `bands`:
    the sub-, main and super-diagonals of P = M⁻¹, which is tridiagonal for a chain. q and v are
    (n, 3) for one member, or (n, 3, *batch) with the members along trailing axes (`batch_last`):
    the links are axis 0 and the components axis 1 in both forms."""
    below, main, above = (band.reshape(-1, *[1] * (q.ndim - 2)) for band in bands)  # per link

    def links(x):  # x_{i−1} and x_{i+1}, zero beyond the ends
        zero = jnp.zeros((1, *x.shape[1:]), x.dtype)
        return jnp.concatenate([zero, x[:-1]]), jnp.concatenate([x[1:], zero])

    q_below, q_above = links(q)
    pf = pf.reshape(*pf.shape, *[1] * (q.ndim - 2))
    r = -jnp.sum(v * v, axis=1) - jnp.sum(q * pf, axis=1)
    lam = solve(below * jnp.sum(q * q_below, 1), main * jnp.sum(q * q, 1), above * jnp.sum(q * q_above, 1), r)
    lq = lam[:, None] * q
    lq_below, lq_above = links(lq)
    return pf + below[:, None] * lq_below + main[:, None] * lq + above[:, None] * lq_above


SOLVES = {"Thomas written out": thomas_solve, "lax.linalg.tridiagonal_solve": lapack_tridiagonal_solve}


def constants(params):
    """The three diagonals of P = M⁻¹ (tridiagonal: M_ij = c_{max(i,j)} l_i l_j with c
    decreasing is a scaled Green's matrix; `check_field` checks that the rest of P is zero) and
    P F, formed once per run."""
    carried = jnp.cumsum(params["masses"][::-1])[::-1]
    inverse_mass = jnp.linalg.inv(chain.inertia_matrix(params))
    force = params["g"] * (carried * params["lengths"])[:, None] * jnp.array([0.0, 0.0, 1.0])
    zero = jnp.zeros(1, inverse_mass.dtype)
    below = jnp.concatenate([zero, jnp.diagonal(inverse_mass, -1)])
    above = jnp.concatenate([jnp.diagonal(inverse_mass, 1), zero])
    return (below, jnp.diagonal(inverse_mass), above), inverse_mass @ force, inverse_mass


def hand_rk4(q0, omega0, params, num_steps, solve):
    """num_steps of classical RK4 on (q̇, v̇) = (v, q̈), from v₀ = ω₀ × q₀ ((n, 3) or (n, 3, *batch):
    `acceleration`); returns the final q."""
    bands, pf, _ = constants(params)

    def field(y):
        q, v = y
        return v, acceleration(q, v, bands, pf, solve)

    return classical_rk4(field, (q0, jnp.cross(omega0, q0, axis=1)), DT, num_steps)[0]


def check_field(params, n):
    """The largest difference between the hand field's q̈ and s2jax's, at random states."""
    system = s2.LagrangianSystem(chain.lagrangian)
    bands, pf, inverse_mass = constants(params)
    outside = jnp.abs(jnp.triu(inverse_mass, 2)) + jnp.abs(jnp.tril(inverse_mass, -2))
    worst = float(jnp.max(outside) / jnp.max(jnp.abs(inverse_mass)))
    for key in jax.random.split(jax.random.PRNGKey(1), 4):
        q, omega = s2.random_state(key, n)
        omega_dot = system.angular_acceleration(jnp.zeros(()), q, omega, system.prepare(q, params))
        reference = jnp.cross(omega_dot, q) + jnp.cross(omega, jnp.cross(omega, q))
        for solve in SOLVES.values():
            hand = acceleration(q, jnp.cross(omega, q), bands, pf, solve)
            worst = max(worst, float(jnp.max(jnp.abs(hand - reference)) / jnp.max(jnp.abs(reference))))
    if worst > 1e-9:
        raise AssertionError(f"the hand-written chain field differs from s2jax's by {worst:.3g} (relative)")
    return worst


SHORT_STEPS = 10
# Measured at 16 links, 1024 members, 10 steps of h = 0.01: 1.0e-8; with h halved twice (20 and 40
# steps, the same time) 6.2e-10 and 3.9e-11, 16.1× smaller each time: the two RK4s' O(h⁴) errors
# on two forms of one field, not a different system (ad hoc). The bound leaves a factor of 10.
SHORT_GAP = 1e-7


def short_run_gap(params, q0, omega0):
    """The largest difference in q between s2jax's `RungeKutta4` and the hand-written RK4 (members
    along the last axis) after `SHORT_STEPS` steps from the benchmark's states, before chaos has
    grown it: a check that the baseline integrates the same system. Raises if above `SHORT_GAP`."""
    hand = batch_last(lambda q, w: hand_rk4(q, w, params, SHORT_STEPS, thomas_solve), q0.shape[0] // jax.device_count())
    ours = s2.simulate_batch(
        chain.lagrangian, q0, omega0, params, dt=DT, num_steps=SHORT_STEPS, save_every=SHORT_STEPS,
        integrator=s2.RungeKutta4(),
    ).q[:, -1]
    gap = float(jnp.max(jnp.abs(hand(q0, omega0) - ours)))
    if not gap <= SHORT_GAP:
        raise AssertionError(f"after {SHORT_STEPS} steps the hand-written RK4 is {gap:.3g} from s2jax's RungeKutta4")
    return gap


def measure(n, batch_size, num_steps):
    params = jax.tree_util.tree_map(jnp.asarray, chain.paper_params(n))
    q0, omega0 = swinging_states(n, batch_size)
    calls = {}
    methods = {
        "VariationalIntegrator": s2.VariationalIntegrator(), "RungeKutta4": s2.RungeKutta4(), "Rattle": s2.Rattle(),
        "default": None,
    }
    on_cpu = jax.default_backend() == "cpu"
    chunk = max(1, min(64, 256 // n))  # simulate_batch's chunk on CPU for a run of ≥ 10⁸ body-steps
    for name, integrator, chunk_size, members_last in [
        *((name, integrator, None, False) for name, integrator in methods.items()),
        *((f"{name}, chunks of {chunk}", integrator, chunk, False) for name, integrator in methods.items() if on_cpu),
        *((f"{name}, members along the last axis", integrator, None, True) for name, integrator in methods.items()),
    ]:

        def run(integrator=integrator, chunk_size=chunk_size, members_last=members_last):
            return s2.simulate_batch(
                chain.lagrangian, q0, omega0, params, dt=DT, num_steps=num_steps, save_every=num_steps,
                integrator=integrator, chunk_size=chunk_size, members_last=members_last,
            ).q[:, -1]

        calls[name] = run
    for name, integrator in methods.items():
        # a user's `jax.vmap(simulate)`, each device vmapping its slice (`_member_program`'s rule)
        program = sharded_batch(lambda q, w, integrator=integrator: s2.simulate(
            chain.lagrangian, q, w, params, dt=DT, num_steps=num_steps, save_every=num_steps, integrator=integrator,
        ).q[-1])
        calls[f"{name}, jax.vmap(simulate)"] = lambda program=program: program(q0, omega0)
    per_device = batch_size // jax.device_count()
    for label, solve in SOLVES.items():
        for chunk in (None, *(HAND_CHUNKS if jax.default_backend() == "cpu" else ())):
            if chunk is not None and (chunk >= per_device or per_device % chunk):
                continue
            program = sharded_batch(lambda q, w, solve=solve: hand_rk4(q, w, params, num_steps, solve), chunk)
            name = f"{HAND}, {label}" + ("" if chunk is None else f", chunks of {chunk}")
            calls[name] = lambda program=program: program(q0, omega0)
    for chunk in BATCH_LAST_CHUNKS if jax.default_backend() == "cpu" else (per_device,):
        if per_device % chunk:
            continue
        program = batch_last(lambda q, w: hand_rk4(q, w, params, num_steps, thomas_solve), chunk)
        name = f"{HAND}, Thomas written out, members along the last axis" + (
            "" if chunk == per_device else f", chunks of {chunk}"
        )
        calls[name] = lambda program=program: program(q0, omega0)
    first, final_q = {}, {}
    for name, call in calls.items():
        start = time.perf_counter()
        final_q[name] = jax.block_until_ready(call())
        first[name] = time.perf_counter() - start
    medians = interleaved_medians(calls, REPEATS)
    rows = {
        name: {
            "seconds": seconds, "times": times, "first_call_s": first[name],
            "msteps_per_s": batch_size * num_steps / seconds / 1e6,
        }
        for name, (seconds, times) in medians.items()
    }
    hands = [name for name in rows if name.startswith(HAND)]
    fastest = max(hands, key=lambda name: rows[name]["msteps_per_s"])
    # RK4 on two forms of the same field (s2jax's in (q, ω), this one in (q, q̇)): both leave
    # |q_i| = 1 by O(h⁵) a step, so their final states differ by the integrators' error, not zero,
    # and after 1000 steps of these chaotic chains by O(1): a check only over `SHORT_STEPS` steps.
    gap = float(jnp.max(jnp.abs(final_q[fastest] - final_q["RungeKutta4"])))
    short = short_run_gap(params, q0, omega0)
    # the same arithmetic in another layout: equal but for rounding, grown over 1000 steps of a chaotic chain
    vmapped = final_q[f"{HAND}, Thomas written out"]
    layouts = max(float(jnp.max(jnp.abs(final_q[name] - vmapped))) for name in final_q if name.startswith(HAND)
                  and "last axis" in name)
    ours = max(float(jnp.max(jnp.abs(final_q[f"{name}, members along the last axis"] - final_q[name])))
               for name in methods)
    user = max(float(jnp.max(jnp.abs(final_q[f"{name}, jax.vmap(simulate)"] - final_q[name]))) for name in methods)
    return {
        "links": n, "batch_size": batch_size, "num_steps": num_steps, "methods": rows, "baseline": fastest,
        "over_baseline": {
            name: rows[name]["msteps_per_s"] / rows[fastest]["msteps_per_s"] for name in rows if name not in hands
        },
        "max_q_gap_rungekutta4_vs_baseline": gap,
        f"max_q_gap_rungekutta4_vs_baseline_after_{SHORT_STEPS}_steps": short,
        "max_q_gap_members_along_the_last_axis_vs_vmap": layouts,
        "max_q_gap_members_last_vs_vmap_s2jax": ours,
        "max_q_gap_user_vmap_vs_vmap_s2jax": user,
    }


def _summary(run):
    rates = ", ".join(f"{name} {row['msteps_per_s']:.3g}" for name, row in run["methods"].items())
    ratios = ", ".join(f"{name} {ratio:.2f}" for name, ratio in run["over_baseline"].items())
    return f"{rates} M steps/s; over the baseline: {ratios}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--links", type=int, default=16)
    parser.add_argument("--child", type=int, nargs=2, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        print(json.dumps({"device_count": jax.device_count(), "run": measure(arguments.links, *arguments.child)}))
        return
    n = arguments.links
    batch_size, num_steps = (64, 20) if arguments.quick else (1024, 1000)
    payload = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]), "dt": DT, "repeats": REPEATS,
        "field_check_max_relative_error": check_field(jax.tree_util.tree_map(jnp.asarray, chain.paper_params(n)), n),
        "load_average_at_start": os.getloadavg(),
    }
    if jax.default_backend() == "cpu":
        payload["host_device_scaling"] = []
        for count in (1, 2):
            env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={count}"}
            command = [sys.executable, __file__, "--links", str(n), "--child", str(batch_size), str(num_steps)]
            run = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            result = json.loads(run.stdout.strip().splitlines()[-1])
            print(f"{count} host device(s): {_summary(result['run'])}", flush=True)
            payload["host_device_scaling"].append(result)
        name = "chain_batch_cpu"
    else:
        payload["device_kind"] = jax.devices()[0].device_kind
        payload["run"] = measure(n, batch_size, num_steps)
        print(_summary(payload["run"]), flush=True)
        name = "chain_batch_" + re.sub(r"[^a-z0-9]+", "_", jax.devices()[0].device_kind.lower()).strip("_")
    payload["load_average_at_end"] = os.getloadavg()
    print(write(name, payload, quick=arguments.quick))


if __name__ == "__main__":
    main()
