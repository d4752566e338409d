"""Cost of gradients through 10⁴ steps of the double spherical pendulum, per adjoint.

    python benchmarks/gradients.py [--quick]

Same process, float64, CPU, medians of 9 runs after a warm-up, the runs of all the timed
functions interleaved round-robin (the machine is shared and its load varies):

- forward time of the variational integrator (h = 0.01, 10⁴ steps, T = 100 s) from a regular
  motion about hanging (see Q0 below for why not the chaotic paper state);
- reverse-mode gradient of a final-state loss with respect to the five params, and the XLA
  temp memory of the compiled gradient, for DirectAdjoint, CheckpointedAdjoint,
  StepwiseAdjoint and ReversibleAdjoint (memory also at 10³ steps, to show what grows);
- forward mode (`jax.jacfwd` over the same five params: one forward pass carrying five
  tangents) against the forward time;
- diffrax Tsit5 (rtol = atol = 1e-9) on the same equations (2.9)–(2.11) and the same loss, in
  reverse mode with `RecursiveCheckpointAdjoint` and in forward mode (`jax.jacfwd` with
  `diffrax.ForwardMode`, its fastest form for a few parameters), and through the VI's 10⁴ steps
  of h = 0.01 (`ConstantStepSize`), the per-step comparison; the error of each loss against
  Dopri8 at 1e-13, the gradients' errors against Dopri8's, and the number of steps Tsit5 took;
- the same loss and gradient through VI-6KL (h = 0.1), VI-8KL and RATTLE-8KL (the same map by
  multipliers, `Rattle`) at h = 0.25 and 0.2, in reverse
  mode with `CheckpointedAdjoint` and in forward mode (`jax.jacfwd`), their loss errors and
  times against both Tsit5 gradients again (a comparison at equal accuracy);
- the implicit-function-theorem derivative of one Newton solve of (3.16): a small Newton
  written here in the form of s2jax's default path (`jax.jacfwd` Jacobian, derivative by
  `jax.lax.custom_root`; `newton_root` itself is internal, and the benchmarks use the public
  API only) against optimistix's Newton with `ImplicitAdjoint`. The JSON keeps the key
  `s2jax_newton_root` for it;
- chain pendula of n = 4, 16, 64 links (`inertia_structure="chain"`, traced params; at n = 16
  also the bare Lagrangian, whose structure `simulate` recognises under traced params):
  `jax.jit(jax.grad(loss))` of a final-state loss against the forward pass, µs per step as
  (t(2N) − t(N))/N with N = 1000 steps, which the O(n) implicit-function solve keeps O(n);
  the same at n = 3 and 16 with M taken as dense (the default `inertia_structure`): chord
  iterations, and the implicit-function derivative with the closed-form Jacobian of (3.16).

Results go to benchmarks/results/gradients.json; `--quick` runs 100 steps instead of 10⁴ and
writes to a temporary folder.
"""

import argparse
import functools

import diffrax
import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import optimistix as optx  # noqa: E402
from _common import diffrax_solve, interleaved_medians, jit, median_time, write  # noqa: E402

import s2jax as s2  # noqa: E402

dsp = s2.models.double_spherical_pendulum
NUM_STEPS = 10_000
DT = 0.01
WEIGHTS = jnp.arange(1.0, 7.0).reshape(2, 3)
# A regular (quasi-periodic) motion about the hanging equilibrium, about 20° from it. From the
# paper state the motion is chaotic: over 100 s its final state's sensitivity grows like e^{λT},
# and ReversibleAdjoint rightly refuses to rebuild it (relative reconstruction error 4e-7 to
# 2.5e-6 against its 1e-8 tolerance, measured on two machines); costs are what is compared here.
Q0 = s2.cayley_rotate(jnp.array([[0.15, 0.0, 0.0], [0.2, 0.05, 0.0]]), jnp.array([[0.0, 0.0, 1.0]] * 2))
OMEGA0 = s2.project_tangent(Q0, jnp.array([[0.0, 0.2, 0.0], [0.1, 0.0, 0.0]]))
PARAMS = {k: jnp.asarray(v) for k, v in dsp.paper_params().items()}
REPEATS = 9  # interleaved runs per timing (medians)


def vi_loss(params, adjoint, num_steps):
    sol = s2.simulate(
        dsp.lagrangian, Q0, OMEGA0, params, dt=DT, num_steps=num_steps, save_every=num_steps,
        adjoint=adjoint,
    )
    return jnp.sum(WEIGHTS * sol.q[-1])


def diffrax_solution(params, num_steps, adjoint=diffrax.RecursiveCheckpointAdjoint(), solver=diffrax.Tsit5(),
                     tol=1e-9, constant=False):
    """diffrax on (2.9)–(2.11) over the VI's horizon: adaptive at rtol = atol = `tol`, or
    `constant`: `num_steps` steps of h = DT, as many as the VI's."""
    system = s2.LagrangianSystem(dsp.lagrangian)
    return diffrax_solve(
        system, system.prepare(Q0, params), (Q0, OMEGA0), DT * num_steps, solver,
        rtol=tol, atol=tol, dt0=DT, max_steps=100_000, adjoint=adjoint,
        stepsize_controller=diffrax.ConstantStepSize() if constant else None,
    )


def tsit5_loss(params, num_steps, adjoint=diffrax.RecursiveCheckpointAdjoint(), constant=False):
    return jnp.sum(WEIGHTS * diffrax_solution(params, num_steps, adjoint, constant=constant).ys[0][-1])


def temp_bytes(fn, *args):
    return jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes


def newton_root(residual, guess, *, rtol, atol, max_steps):
    """x of shape (n, 3) with residual(x) = 0, by Newton's method, in the form of s2jax's default
    path (which is internal): each iteration takes the Jacobian by `jax.jacfwd` and solves with
    it; it stops once max|δ| ≤ atol + rtol·max|x| or after `max_steps` iterations. Derivatives
    by the implicit function theorem (`jax.lax.custom_root`), never through the iterations."""

    def jacobian_solve(fn, x, y):
        """J⁻¹ y with J = ∂fn/∂x at x, the (n, 3) arrays flattened to 3n."""
        jacobian = jax.jacfwd(fn)(x).reshape(x.size, x.size)
        return jnp.linalg.solve(jacobian, y.reshape(-1)).reshape(y.shape)

    def iterate(fn, x0):
        def cond(carry):
            x, k, size = carry
            return (k < max_steps) & (size > atol + rtol * jnp.max(jnp.abs(x)))

        def body(carry):
            x, k, _ = carry
            delta = -jacobian_solve(fn, x, fn(x))
            return x + delta, k + 1, jnp.max(jnp.abs(delta))

        return jax.lax.while_loop(cond, body, (x0, jnp.array(0), jnp.array(jnp.inf, x0.dtype)))[0]

    # The tangent system g(x) = y, with g the residual linearised at the root.
    return jax.lax.custom_root(residual, guess, iterate, lambda g, y: jacobian_solve(g, y, y))


def newton_comparison():
    """grad of one solve of (3.16) by `newton_root` above (`jax.jacfwd` Jacobian, as s2jax's
    default path) and by optimistix's Newton with ImplicitAdjoint."""
    system = s2.LagrangianSystem(dsp.lagrangian)

    def residual_and_guess(params):
        args = system.prepare(Q0, params)
        inertia = system.inertia(Q0, args)
        mass = jnp.diag(inertia)[:, None]
        coupled = lambda x: inertia @ x - mass * x  # noqa: E731
        force = -system.potential_gradient(Q0, args)
        d = DT * (mass * OMEGA0 - jnp.cross(Q0, coupled(jnp.cross(Q0, OMEGA0))))
        d = d + 0.5 * DT**2 * jnp.cross(Q0, force)

        def residual(f):
            displacement = s2.cayley_rotate(f, Q0) - Q0  # (F − I) q
            return 2.0 * mass * f / (1.0 + jnp.sum(f * f, -1, keepdims=True)) + jnp.cross(Q0, coupled(displacement)) - d

        return residual, d / (2.0 * mass)

    def ours(params):
        residual, guess = residual_and_guess(params)
        return jnp.sum(newton_root(residual, guess, rtol=1e-12, atol=1e-12, max_steps=20))

    def theirs(params):
        residual, guess = residual_and_guess(params)
        solver = optx.Newton(rtol=1e-12, atol=1e-12)
        solution = optx.root_find(lambda f, _: residual(f), solver, guess, adjoint=optx.ImplicitAdjoint(), max_steps=20)
        return jnp.sum(solution.value)

    out = {}
    for name, fn in (("s2jax_newton_root", ours), ("optimistix_ImplicitAdjoint", theirs)):
        grad = jit(jax.grad(fn))
        seconds, _ = median_time(lambda: grad(PARAMS), repeats=9)
        out[name] = {"grad_us": 1e6 * seconds, "value": float(jit(fn)(PARAMS))}
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 steps, to check that it runs")
    quick = parser.parse_args().quick
    num_steps = 100 if quick else NUM_STEPS
    results = {"num_steps": num_steps, "dt": DT}
    adjoints = {
        "DirectAdjoint": s2.DirectAdjoint(), "CheckpointedAdjoint": s2.CheckpointedAdjoint(),
        # The checkpointed adjoint as it was before it kept the Newton roots: what keeping them saves.
        "CheckpointedAdjoint_save_roots_False": s2.CheckpointedAdjoint(save_roots=False),
        "StepwiseAdjoint": s2.StepwiseAdjoint(), "ReversibleAdjoint": s2.ReversibleAdjoint(),
    }
    forward = jit(lambda p: vi_loss(p, s2.DirectAdjoint(), num_steps))
    grads = {name: jit(jax.grad(lambda p, a=a: vi_loss(p, a, num_steps))) for name, a in adjoints.items()}
    # jax.jacfwd pushes the five tangents through one forward pass (batched JVPs).
    jacobian = jit(jax.jacfwd(lambda p: vi_loss(p, s2.DirectAdjoint(), num_steps)))
    tsit5_grad = jax.grad(functools.partial(tsit5_loss, num_steps=num_steps))
    tsit5 = jit(tsit5_grad)
    tsit5_forward = jit(jax.jacfwd(functools.partial(tsit5_loss, num_steps=num_steps, adjoint=diffrax.ForwardMode())))
    # Tsit5 through as many steps as the VI (h = DT): the per-step cost of the two gradients.
    tsit5_constant = jit(jax.grad(functools.partial(tsit5_loss, num_steps=num_steps, constant=True)))
    # The five derivatives agree between the modes (a check that the timed functions compute
    # the same thing; the accuracy of gradients is tested in tests/test_gradients.py).
    for name, value in (("forward mode", jacobian(PARAMS)), ("ReversibleAdjoint", grads["ReversibleAdjoint"](PARAMS))):
        error = max(float(jnp.abs(value[k] - grads["DirectAdjoint"](PARAMS)[k])) for k in PARAMS)
        assert error < 1e-6, f"{name} differs from DirectAdjoint by {error:.1e}"
    # All timings interleaved round-robin: the shared machine's load falls on all alike.
    timed = interleaved_medians(
        {
            "forward": lambda: forward(PARAMS), "forward_mode": lambda: jacobian(PARAMS),
            "tsit5": lambda: tsit5(PARAMS), "tsit5_forward_mode": lambda: tsit5_forward(PARAMS),
            "tsit5_constant": lambda: tsit5_constant(PARAMS),
        }
        | {name: (lambda g=g: g(PARAMS)) for name, g in grads.items()},
        repeats=REPEATS,
    )
    results["forward_s"] = timed["forward"][0]
    print(f"VI forward, {num_steps} steps: {results['forward_s']:.3f} s")
    for name, adjoint in adjoints.items():
        seconds = timed[name][0]
        memory = temp_bytes(jax.grad(lambda p, a=adjoint: vi_loss(p, a, num_steps)), PARAMS)
        memory_small = temp_bytes(jax.grad(lambda p, a=adjoint: vi_loss(p, a, num_steps // 10)), PARAMS)
        results[name] = {
            "grad_s": seconds, "grad_over_forward": seconds / results["forward_s"],
            "temp_bytes": memory, f"temp_bytes_{num_steps // 10}_steps": memory_small, "times_s": timed[name][1],
        }
        print(f"{name:20s} grad {seconds:.3f} s = {seconds / results['forward_s']:.2f}× forward, "
              f"XLA temp {memory / 1e6:.3f} MB ({memory_small / 1e6:.3f} MB at {num_steps // 10} steps)")

    seconds = timed["forward_mode"][0]
    results["forward_mode_s"] = seconds
    results["forward_mode_over_forward"] = seconds / results["forward_s"]
    print(f"forward mode (jax.jacfwd, 5 params): {seconds:.3f} s = {seconds / results['forward_s']:.2f}× forward")

    seconds = timed["tsit5"][0]
    results["diffrax_tsit5_grad_s"] = seconds
    results["diffrax_tsit5_temp_bytes"] = temp_bytes(tsit5_grad, PARAMS)
    print(f"diffrax Tsit5 (1e-9) + RecursiveCheckpointAdjoint grad: {seconds:.3f} s, "
          f"XLA temp {results['diffrax_tsit5_temp_bytes'] / 1e6:.1f} MB")
    seconds = timed["tsit5_forward_mode"][0]
    results["diffrax_tsit5_forward_mode_s"] = seconds
    print(f"diffrax Tsit5 (1e-9) + ForwardMode, jax.jacfwd: {seconds:.3f} s")
    seconds = timed["tsit5_constant"][0]
    results["diffrax_tsit5_constant_grad_s"] = seconds
    print(f"diffrax Tsit5, {num_steps} steps of h = {DT} + RecursiveCheckpointAdjoint grad: {seconds:.3f} s")

    # What the two losses are worth: their errors against Dopri8 at rtol = atol = 1e-13, and how
    # many steps the adaptive Tsit5 took.
    tight = diffrax_solution(PARAMS, num_steps, solver=diffrax.Dopri8(), tol=1e-13)
    reference = float(jnp.sum(WEIGHTS * tight.ys[0][-1]))
    adaptive = diffrax_solution(PARAMS, num_steps)
    results["loss_error"] = {
        "vi_h": abs(float(forward(PARAMS)) - reference),
        "tsit5_1e-9": abs(float(jnp.sum(WEIGHTS * adaptive.ys[0][-1])) - reference),
        "tsit5_constant_h": abs(float(tsit5_loss(PARAMS, num_steps, constant=True)) - reference),
    }
    results["diffrax_tsit5_num_steps"] = int(adaptive.stats["num_steps"])
    # And what the gradients are worth: against Dopri8's at 1e-13 (forward mode, five tangents),
    # max over the five params of |error| relative to max |gradient|.
    exact = jit(jax.jacfwd(lambda p: jnp.sum(
        WEIGHTS * diffrax_solution(p, num_steps, diffrax.ForwardMode(), diffrax.Dopri8(), 1e-13).ys[0][-1]
    )))(PARAMS)
    gradient_error = functools.partial(relative_gradient_error, exact)
    results["gradient_error"] = {
        "vi_h": gradient_error(grads["DirectAdjoint"](PARAMS)), "tsit5_1e-9": gradient_error(tsit5(PARAMS)),
    }
    print(f"gradient errors (relative) against Dopri8 (1e-13): {results['gradient_error']}")
    print(f"loss errors against Dopri8 (1e-13): {results['loss_error']}; "
          f"Tsit5 (1e-9) took {results['diffrax_tsit5_num_steps']} steps")

    results["high_order"] = high_order_gradients(reference, gradient_error, tsit5, tsit5_forward, num_steps)
    results["chains"] = chain_gradients(100 if quick else 1000)
    results["dense"] = chain_gradients(100 if quick else 1000, sizes=(3, 16), inertia_structure="dense")
    # The bare Lagrangian, params traced: the chain recognised at random values of them.
    results["recognised"] = chain_gradients(100 if quick else 1000, sizes=(16,), inertia_structure=None)
    results["newton_ift"] = newton_comparison()
    print("one (3.16) solve, grad:", {k: f"{v['grad_us']:.0f} µs" for k, v in results["newton_ift"].items()})
    method = f"medians of {REPEATS} interleaved runs after a warm-up"
    path = write("gradients", {"method": method, "results": results}, quick=quick)
    print(f"wrote {path}")


VI = s2.VariationalIntegrator()
# (name, base method, order, h): RATTLE-8KL is the map of VI-8KL, computed by multipliers (`Rattle`).
HIGH_ORDER = (
    ("VI-6KL", VI, 6, 0.1), ("VI-8KL", VI, 8, 0.25), ("VI-8KL", VI, 8, 0.2),
    ("RATTLE-8KL", s2.Rattle(), 8, 0.25), ("RATTLE-8KL", s2.Rattle(), 8, 0.2),
)


def relative_gradient_error(exact, gradient):
    """max_k |gradient_k − exact_k| / max_k |exact_k| over the params k."""
    return max(float(jnp.abs(gradient[k] - exact[k])) for k in PARAMS) / max(float(jnp.abs(exact[k])) for k in PARAMS)


def high_order_gradients(reference, gradient_error, tsit5, tsit5_forward, num_steps):
    """The same loss through the Kahan–Li compositions at larger steps: a gradient at equal
    accuracy, where the fixed 10⁴ VI steps are not.

    For each (method, h): the loss error against Dopri8 at 1e-13, the forward time, the reverse
    gradient with `CheckpointedAdjoint` and the forward-mode one (`jax.jacfwd` over the five
    params), timed interleaved with adaptive Tsit5's reverse (`RecursiveCheckpointAdjoint`) and
    forward-mode (`ForwardMode`) gradients again; the largest difference between the two VI
    gradients (they differentiate the same discrete map), and the gradient's error
    (`gradient_error`, against Dopri8 at 1e-13)."""
    horizon = DT * num_steps
    runs = {"tsit5": lambda: tsit5(PARAMS), "tsit5_forward_mode": lambda: tsit5_forward(PARAMS)}
    out = {}
    for name, base, order, h in HIGH_ORDER:
        integrator = s2.Composition(base, order=order, method="kahan_li")
        steps = int(round(horizon / h))

        def loss(params, adjoint, integrator=integrator, h=h, steps=steps):
            sol = s2.simulate(
                dsp.lagrangian, Q0, OMEGA0, params, dt=h, num_steps=steps, save_every=steps,
                integrator=integrator, adjoint=adjoint,
            )
            return jnp.sum(WEIGHTS * sol.q[-1])

        key = f"{name} h={h}"
        forward = jit(functools.partial(loss, adjoint=s2.DirectAdjoint()))
        reverse = jit(jax.grad(functools.partial(loss, adjoint=s2.CheckpointedAdjoint())))
        forward_mode = jit(jax.jacfwd(functools.partial(loss, adjoint=s2.DirectAdjoint())))
        runs |= {
            f"{key} forward": lambda f=forward: f(PARAMS),
            f"{key} reverse": lambda f=reverse: f(PARAMS),
            f"{key} forward_mode": lambda f=forward_mode: f(PARAMS),
        }
        reverse_gradient, forward_gradient = reverse(PARAMS), forward_mode(PARAMS)
        modes_differ = max(float(jnp.abs(reverse_gradient[k] - forward_gradient[k])) for k in PARAMS)
        assert modes_differ < 1e-8, f"{key}: reverse and forward mode differ by {modes_differ:.1e}"
        out[key] = {
            "h": h, "num_steps": steps, "sub_steps": steps * len(integrator.weights),
            "loss_error": abs(float(forward(PARAMS)) - reference),
            "reverse_minus_forward_mode": modes_differ,
            "gradient_error": gradient_error(reverse_gradient),
        }
    timed = interleaved_medians(runs, repeats=REPEATS)
    for key, entry in out.items():
        entry |= {mode: timed[f"{key} {mode}"][0] for mode in ("forward", "reverse", "forward_mode")}
        entry["reverse_over_tsit5"] = entry["reverse"] / timed["tsit5"][0]
        entry["forward_mode_over_tsit5"] = entry["forward_mode"] / timed["tsit5"][0]
        print(f"{key} ({entry['sub_steps']} sub-steps): loss error {entry['loss_error']:.1e}; forward "
              f"{entry['forward']:.4f} s; grad, CheckpointedAdjoint {entry['reverse']:.4f} s = "
              f"{entry['reverse_over_tsit5']:.2f}× Tsit5 (1e-9), jax.jacfwd {entry['forward_mode']:.4f} s = "
              f"{entry['forward_mode_over_tsit5']:.2f}×; gradient error {entry['gradient_error']:.1e}")
    out["tsit5_grad_s"] = timed["tsit5"][0]
    out["tsit5_forward_mode_s"] = timed["tsit5_forward_mode"][0]
    print(f"  Tsit5 (1e-9) grad {out['tsit5_grad_s']:.4f} s, "
          f"ForwardMode jax.jacfwd {out['tsit5_forward_mode_s']:.4f} s")
    return out


def chain_gradients(num_steps, sizes=(4, 16, 64), inertia_structure="chain"):
    """µs per step of the forward pass and of `jax.grad` of a final-state loss, chain pendulum,
    with the O(n) chain solves, or (`inertia_structure="dense"`) with M taken as dense: the
    chord iterations and the implicit-function derivative with the closed-form Jacobian; or
    (None) the bare Lagrangian, whose structure `simulate` recognises with the params traced."""
    cp = s2.models.chain_pendulum
    system = cp.lagrangian if inertia_structure is None else s2.LagrangianSystem(
        cp.lagrangian, inertia_structure=inertia_structure)
    results = {}
    for n in sizes:
        params = jax.tree_util.tree_map(jnp.asarray, cp.paper_params(n))
        q0, omega0 = (jnp.asarray(x) for x in cp.paper_state(n))

        def make(steps, grad, params=params, q0=q0, omega0=omega0):
            def loss(scale, p):
                sol = s2.simulate(system, q0, scale * omega0, p, dt=0.01, num_steps=steps, save_every=steps,
                                  throw=False)
                return jnp.sum(sol.q[-1] * jnp.arange(3.0)[None]) + jnp.sum(sol.omega[-1])

            compiled = jit(jax.grad(loss) if grad else loss).lower(1.0, params).compile()
            return lambda: compiled(1.0, params)

        runs = {(grad, k): make(k, grad) for grad in (False, True) for k in (num_steps, 2 * num_steps)}
        timed = interleaved_medians(runs, repeats=REPEATS)
        forward_us, grad_us = (
            1e6 * (timed[grad, 2 * num_steps][0] - timed[grad, num_steps][0]) / num_steps for grad in (False, True)
        )
        results[str(n)] = {"forward_us": forward_us, "grad_us": grad_us, "grad_over_forward": grad_us / forward_us}
        print(f"chain pendulum, {inertia_structure or 'recognised'} M, n = {n}: forward {forward_us:.2f} µs/step, "
              f"grad {grad_us:.2f} µs/step ({grad_us / forward_us:.1f}×)")
    return results


if __name__ == "__main__":
    main()
