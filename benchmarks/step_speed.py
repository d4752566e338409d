"""µs per step of the variational integrator against RK4, in one process (issue 12).

    python benchmarks/step_speed.py [--quick] [--chains 1,2,4,...]

1. Double spherical pendulum (002 Example 1, h = 0.01): a hand-written RK4 whose 2-body
   solve of (2.11) is written in closed form (a Schur complement on body 2 solved by Cramer's
   rule as cross products, the 3 × 3 products elementwise) in a `lax.scan` — the fastest
   fair form of the baseline, compiled with the same XLA options — against s2jax's
   `RungeKutta4` and `VariationalIntegrator`, both through `simulate`; and the order-4
   composition `Composition(VariationalIntegrator(), order=4)` at the same h, in VI steps, and
   `Rattle`, the same map as the VI computed by n multipliers instead of 2n rotation coordinates.
   Per step both per whole call (`simulate` called as a user calls it, eager checks included)
   and marginally, as (t(2N) − t(N))/N of `simulate` inside a `jax.jit` of its own (the compiled
   loop alone, as the hand-written RK4 is).
2. Chain pendulum (`s2jax.models.chain_pendulum`), n links: `VariationalIntegrator` against
   `RungeKutta4` and `Rattle` (from 2 links), all through `simulate` inside a `jax.jit`, per
   step as (t(2N) − t(N)) / N, so that neither simulate's eager checks (milliseconds at
   n = 256) nor a call's fixed cost counts.
3. 642 Lennard-Jones molecules (002 Example 6, h = 0.005) with simulate's default integrator, 1000 steps,
   and the cost of simulate's eager checks for that n.

Every time is the median of 11 runs after a warm-up, the runs of the methods compared
interleaved round-robin (5 for Lennard-Jones); the load average is recorded, because the machine
is shared: ratios within this process matter more than absolute µs.
Results go to benchmarks/results/step_speed.json (`--quick`: few steps, a temporary folder).
"""

import argparse
import os
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _common import interleaved_medians, jit, median_time, write  # noqa: E402

import s2jax as s2  # noqa: E402
from s2jax.models import chain_pendulum, double_spherical_pendulum, lennard_jones_on_sphere  # noqa: E402

REPEATS = 11  # interleaved runs per timing (medians)


# The baseline's 3 × 3 algebra, written out elementwise: XLA fuses these into the step, where `@`
# or `jnp.linalg` on such tiny matrices would each be a kernel of its own (1.3× slower per step on
# CPU, measured with `@`).


def _product_3x3(a, b):
    """a b for 3 × 3 matrices: entry (i, k) = Σ_j a_ij b_jk, as a broadcast product and a sum."""
    return (a[:, :, None] * b[None, :, :]).sum(axis=1)


def _apply_3x3(a, x):
    """a x for a 3 × 3 matrix a and a 3-vector x."""
    return (a * x[None, :]).sum(axis=1)


def _solve_3x3(a, b):
    """x with a x = b by Cramer's rule: with rows r0, r1, r2 of a, a⁻¹ = [r1 × r2, r2 × r0,
    r0 × r1] / det a by columns, so x = (b0 r1 × r2 + b1 r2 × r0 + b2 r0 × r1) / (r0 · r1 × r2)."""
    r0, r1, r2 = a[0], a[1], a[2]
    c0 = jnp.cross(r1, r2)
    return (b[0] * c0 + b[1] * jnp.cross(r2, r0) + b[2] * jnp.cross(r0, r1)) / jnp.dot(r0, c0)


def hand_written_rk4(num_steps, dt=0.01):
    """RK4 on (2.9)–(2.11) for Example 1 with the 2-body solve in closed form, in `lax.scan`."""
    params = double_spherical_pendulum.paper_params()
    m1, m2, l1, l2, g = (params[k] for k in ("m1", "m2", "l1", "l2", "g"))
    m11, m12, m22 = (m1 + m2) * l1**2, m2 * l1 * l2, m2 * l2**2
    e3 = jnp.array([0.0, 0.0, 1.0])
    gravity = jnp.stack([(m1 + m2) * g * l1 * e3, m2 * g * l2 * e3])  # −∂V/∂q

    def cross_matrix(a):
        # â b̂ as a matrix: â b̂ = b aᵀ − (a·b) I.
        return b_outer_a(a) - jnp.dot(a[0], a[1]) * jnp.eye(3)

    def b_outer_a(a):
        return a[1][:, None] * a[0][None, :]

    def field(q, w):
        q1, q2 = q[0], q[1]
        speed2 = jnp.sum(w * w, axis=-1)
        rhs1 = jnp.cross(q1, m12 * speed2[1] * q2 + gravity[0])
        rhs2 = jnp.cross(q2, m12 * speed2[0] * q1 + gravity[1])
        # A = [[m11 I, −m12 q̂1 q̂2], [−m12 q̂2 q̂1, m22 I]]: eliminate ω1, solve for ω2.
        c12 = cross_matrix((q1, q2))
        c21 = cross_matrix((q2, q1))
        # 3 × 3 algebra as elementwise operations, which XLA fuses (`_product_3x3`).
        schur = m22 * jnp.eye(3) - (m12 * m12 / m11) * _product_3x3(c21, c12)
        w2 = _solve_3x3(schur, rhs2 + (m12 / m11) * _apply_3x3(c21, rhs1))
        w1 = (rhs1 + m12 * _apply_3x3(c12, w2)) / m11
        return jnp.cross(w, q), jnp.stack([w1, w2])

    def step(y, _):
        q, w = y
        k1 = field(q, w)
        k2 = field(q + 0.5 * dt * k1[0], w + 0.5 * dt * k1[1])
        k3 = field(q + 0.5 * dt * k2[0], w + 0.5 * dt * k2[1])
        k4 = field(q + dt * k3[0], w + dt * k3[1])
        q = q + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        w = w + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
        return (q, w), None

    q0, w0 = (jnp.asarray(x) for x in double_spherical_pendulum.paper_state())
    run = jit(lambda q, w: jax.lax.scan(step, (q, w), length=num_steps)[0])
    return run, (q0, w0)


def through_simulate(model, params, q0, w0, integrator, dt, num_steps, *, compiled=True):
    """A call of `simulate` for `num_steps` steps. `compiled`: inside a `jax.jit` of its own (the
    params closed over, concrete), so that a call is the compiled loop and no eager checks: the
    difference of two such calls is the cost of the steps alone. Otherwise a plain call, eager
    checks included (about 1 ms), which vary enough from call to call to swamp the difference of
    10⁴ steps of tenths of a µs (one run gave `Rattle` 0.038 µs per step that way, against
    0.115 µs compiled)."""

    def run(q, w):
        return s2.simulate(
            model.lagrangian, q, w, params, dt=dt, num_steps=num_steps, save_every=num_steps,
            integrator=integrator,
        ).q

    if not compiled:
        return lambda: run(q0, w0)
    compiled_run = jit(run)
    return lambda: compiled_run(q0, w0)


def double_pendulum(num_steps):
    """µs per step two ways: per whole call of `num_steps` steps (simulate's eager checks, about
    1 ms per call, included for s2jax and absent for the hand-written RK4), and marginal, as
    (t(2N) − t(N))/N, the cost of a step itself, which the targets are about."""
    model = double_spherical_pendulum
    params = model.paper_params()
    q0, w0 = model.paper_state()
    # The hand-written RK4 and RungeKutta4 integrate the same equations: check it, over 100
    # steps. Off the sphere, at RK4's stages (|q| = 1 + O(h²)), their solves of (2.11) extend
    # the equations differently (a Schur complement on the exact operator here, a closed form
    # assuming |q_i| = 1 in `two_body_solve`), which changes a step by O(h⁵) (measured 2.5e-12
    # per step); over 10⁴ steps the chaotic motion amplifies that to 3e-5.
    run, y0 = hand_written_rk4(100)
    q_hand = np.asarray(run(*y0)[0])
    q_rk4 = np.asarray(through_simulate(model, params, q0, w0, s2.RungeKutta4(), 0.01, 100)()[-1])
    assert np.max(np.abs(q_hand - q_rk4)) < 1e-9, np.max(np.abs(q_hand - q_rk4))

    def hand_run(k):
        fn, y = hand_written_rk4(k)
        return lambda: fn(*y)

    integrators = {
        "runge_kutta4": s2.RungeKutta4(),
        "vi": s2.VariationalIntegrator(),
        # Yoshida's order-4 composition at the same h: three VI sub-steps, two longer (|γ| > 1).
        "vi4": s2.Composition(s2.VariationalIntegrator(), order=4),
        # The same map as the VI, computed by multipliers (`Rattle`).
        "rattle": s2.Rattle(),
    }
    makers = {"hand_written_rk4": hand_run} | {
        name: (lambda k, i=integrator: through_simulate(model, params, q0, w0, i, 0.01, k))
        for name, integrator in integrators.items()
    }
    runs = {(name, k): make(k) for name, make in makers.items() for k in (num_steps, 2 * num_steps)}
    # The whole calls: `simulate` as a user calls it, eager checks included.
    runs |= {
        (name, "eager"): through_simulate(model, params, q0, w0, integrator, 0.01, num_steps, compiled=False)
        for name, integrator in integrators.items()
    }
    timed = interleaved_medians(runs, repeats=REPEATS)
    whole = {name: timed[name, "eager" if name in integrators else num_steps][0] * 1e6 / num_steps for name in makers}
    marginal = {name: (timed[name, 2 * num_steps][0] - timed[name, num_steps][0]) * 1e6 / num_steps for name in makers}
    for label, table in (("whole calls", whole), ("marginal", marginal)):
        hand, rk4, vi, vi4, rattle = (table[k] for k in ("hand_written_rk4", "runge_kutta4", "vi", "vi4", "rattle"))
        print(
            f"double pendulum ({label}): hand RK4 {hand:.3f} µs/step | RungeKutta4 {rk4:.3f} ({rk4 / hand:.2f}×) | "
            f"VI {vi:.3f} ({vi / hand:.2f}×) | VI-4 {vi4:.3f} ({vi4 / vi:.2f} VI steps) | "
            f"Rattle {rattle:.3f} ({rattle / hand:.2f}×)"
        )
    return {
        "dt": 0.01, "num_steps": num_steps,
        "marginal_us": marginal,
        "marginal_runge_kutta4_over_hand": marginal["runge_kutta4"] / marginal["hand_written_rk4"],
        "marginal_vi_over_hand": marginal["vi"] / marginal["hand_written_rk4"],
        "marginal_vi4_over_vi": marginal["vi4"] / marginal["vi"],
        "marginal_rattle_over_hand": marginal["rattle"] / marginal["hand_written_rk4"],
        "whole_call_us": whole,
        "runs_s": {
            f"{name}_eager_{num_steps}_steps" if k == "eager" else f"{name}_{k}_steps": ts
            for (name, k), (_, ts) in timed.items()
        },
    }


def _marginal_per_step(make_run, steps):
    """µs per step as (t(2N steps) − t(N steps)) / N: simulate's per-call checks cancel."""
    short, _ = median_time(make_run(steps))
    long, _ = median_time(make_run(2 * steps))
    return 1e6 * (long - short) / steps


def _marginal_pair(makers: dict, steps):
    """`_marginal_per_step` for each maker, all their runs interleaved (`interleaved_medians`)."""
    timed = interleaved_medians(
        {(name, k): make(k) for name, make in makers.items() for k in (steps, 2 * steps)}, repeats=REPEATS
    )
    return {name: 1e6 * (timed[name, 2 * steps][0] - timed[name, steps][0]) / steps for name in makers}


def chains(sizes, num_steps):
    results = {}
    for n in sizes:
        params = chain_pendulum.paper_params(n)
        q0, w0 = chain_pendulum.paper_state(n)
        # At n ≤ 2 a step costs tens of ns: 2000 steps are too few for the difference of two
        # calls to rise above the noise (one Intel Xeon run gave RK4 0.03 µs at n = 1, against
        # 0.06 µs from 10⁴ and 10⁵ steps), so those take 10× more.
        steps = 10 * num_steps if n <= 2 else num_steps if n <= 16 else max(num_steps // 10, 200)
        start = time.perf_counter()
        integrators = {"vi": s2.VariationalIntegrator(), "rk4": s2.RungeKutta4()}
        if n >= 2:  # one body: a diagonal M, `Rattle` is then 004's closed form, timed elsewhere
            integrators["rattle"] = s2.Rattle()
        marginal = _marginal_pair(
            {
                name: (lambda k, i=integrator: through_simulate(chain_pendulum, params, q0, w0, i, 0.01, k))
                for name, integrator in integrators.items()
            },
            steps,
        )
        vi, rk4 = marginal["vi"], marginal["rk4"]
        seconds = time.perf_counter() - start
        rattle = marginal.get("rattle")
        rattle_text = f" | Rattle {rattle:7.2f} ({rattle / vi:.2f} VI)" if rattle is not None else ""
        print(
            f"chain n = {n:3d}: VI {vi:9.2f} µs/step | RK4 {rk4:9.2f} | VI/RK4 {vi / rk4:.2f}{rattle_text} "
            f"({seconds:.0f} s)"
        )
        results[str(n)] = {"num_steps": [steps, 2 * steps], "vi_us": vi, "rk4_us": rk4, "vi_over_rk4": vi / rk4}
        if rattle is not None:
            results[str(n)] |= {"rattle_us": rattle, "rattle_over_vi": rattle / vi}
    return results


def lennard_jones(num_steps):
    model = lennard_jones_on_sphere
    params = model.paper_params()
    q0, w0 = model.paper_state()
    start = time.perf_counter()
    s2.check_lagrangian_form(model.lagrangian, jnp.asarray(q0), jnp.asarray(w0), params)
    check_seconds = time.perf_counter() - start

    def run():
        return s2.simulate(model.lagrangian, q0, w0, params, dt=0.005, num_steps=num_steps, save_every=num_steps).q

    start = time.perf_counter()
    jax.block_until_ready(run())
    first = time.perf_counter() - start
    seconds, _ = median_time(run, repeats=5)

    def make_run(k):
        return lambda: s2.simulate(model.lagrangian, q0, w0, params, dt=0.005, num_steps=k, save_every=k).q

    stepping = num_steps * _marginal_per_step(make_run, num_steps) / 1e6
    print(f"Lennard-Jones n = 642: {num_steps} steps alone (without simulate's eager checks) {stepping:.3f} s")
    print(
        f"Lennard-Jones n = 642, default integrator, {num_steps} steps: {seconds:.3f} s "
        f"(first call with compilation {first:.1f} s; eager form check {check_seconds:.2f} s)"
    )
    return {"num_steps": num_steps, "dt": 0.005, "seconds": seconds, "stepping_seconds": stepping,
            "first_call_seconds": first,
            "form_check_seconds": check_seconds}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few steps, to check that it runs")
    parser.add_argument("--chains", default="1,2,4,8,16,32,64,128,256")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: pendulum,chains,lj")
    options = parser.parse_args()
    skip = set(options.skip.split(","))
    num_steps = 100 if options.quick else 10_000
    load_before = os.getloadavg()
    method = f"median of {REPEATS} interleaved runs (5 for Lennard-Jones) after a warm-up, µs per step, float64"
    payload = {"method": method}
    if "pendulum" not in skip:
        payload["double_pendulum"] = double_pendulum(num_steps)
    if "chains" not in skip:
        payload["chains"] = chains([int(n) for n in options.chains.split(",")], num_steps // 5)
    if "lj" not in skip:
        payload["lennard_jones_642"] = lennard_jones(100 if options.quick else 1000)
    payload["load_average_before_after"] = [load_before, os.getloadavg()]
    path = write("step_speed", payload, quick=options.quick)
    print(f"wrote {path}; load average before {load_before}, after {os.getloadavg()}")


if __name__ == "__main__":
    main()
