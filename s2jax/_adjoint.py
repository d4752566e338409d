"""How `simulate` is differentiated: the loop over steps, with four ways to store it.

Every adjoint runs the same forward loop, `_loop.Loop`, and differs only in what reverse mode keeps:
`DirectAdjoint` every step's intermediates, `CheckpointedAdjoint` the states between blocks of steps,
`StepwiseAdjoint` the state before each step, `ReversibleAdjoint` nothing per step (a symmetric
integrator's step with −h undoes the step with h). Forward mode goes through the first two only.
Derivatives of each implicit step come from the implicit function theorem (`_newton.py`).
What each stores and when to use it: docs/api/adjoints.md; timings: docs/performance.md.
"""

import abc
import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax import lax

from ._errors import SimulationError, error_if
from ._newton import NEWTON_ROOT
from ._results import RESULTS
from ._validation import positive_int

NO_FAILURE = -1
"""`Solution.failed_step` when every step succeeded."""


def _scan_steps(body, carry, xs, length):
    """`length` steps of `body(carry, x)`, x running over the leading axis of `xs` (or None);
    keeps nothing per step: `(carry, None)`."""
    return lax.scan(lambda c, x: (body(c, x), None), carry, xs, length=length)[0], None


def _scan_steps_keeping_states(body, carry, xs, length):
    """`_scan_steps`, keeping the state (y_k, integrator state) before each step, stacked."""
    return lax.scan(lambda c, x: (body(c, x), (c.y, c.state)), carry, xs, length=length)


class AbstractAdjoint(eqx.Module):
    """How reverse-mode differentiation of `simulate` stores (or recomputes) the trajectory."""

    @abc.abstractmethod
    def loop(self, loop, inputs, result0):
        """Run `loop` (a `_simulate.Loop`) from `inputs` (its `LoopInputs`) and the initial code.

        **Returns:** `(final, ys)`: the final `LoopState` and the states after each block of
        `save_every` steps, each of shape (num_saves, n, 3).
        """


class DirectAdjoint(AbstractAdjoint):
    """Reverse mode through the `lax.scan` as it is: stores every step's intermediate values.
    The default below `CHECKPOINT_FROM_STEPS` steps (`default_adjoint`); forward mode
    (`jax.jvp`, `jax.jacfwd`) goes through it at no extra cost."""

    def loop(self, loop, inputs, result0):
        return loop.run(inputs, result0, _scan_steps)[:2]


def _block_size(save_every: int, requested: int | None) -> int:
    """The divisor of `save_every` closest to the request (default √save_every)."""
    target = math.sqrt(save_every) if requested is None else requested
    divisors = [d for d in range(1, save_every + 1) if save_every % d == 0]
    return min(divisors, key=lambda d: abs(d - target))


class CheckpointedAdjoint(AbstractAdjoint):
    """Reverse mode with `jax.checkpoint` over blocks of steps.

    Between two saved states the `save_every` steps run in blocks of `block_size` steps
    (rounded to a divisor of `save_every`; default √save_every); only the state at each block
    boundary is stored, and the backward pass recomputes one block at a time. Memory ∝
    (number of saved states) × (save_every / block_size) + block_size, against one stored
    step per step for `DirectAdjoint`, at the price of a second forward pass.

    With `save_roots` (the default) the forward pass also keeps what each Newton solve of the
    steps returns (the root, its iteration count, whether it converged:
    `jax.checkpoint_policies.save_only_these_names(newton.NEWTON_ROOT)`), so the second forward
    pass skips the iterations: it evaluates each step at its known root, which is all that the
    implicit-function derivative needs. The gradient is then taken at exactly the roots of the
    forward pass (recomputed iterations agree with them only to the Newton tolerance). It is
    faster (measured: see docs/performance.md, "Keeping the Newton roots"). The price is memory
    growing with the number of steps again, by one root per solve (for two bodies 4 floats, an
    int and a flag a step: 0.52 MB at 10⁴ steps, against 0.19 MB without, and 15.5 MB for
    `DirectAdjoint`; 3n floats for n bodies on the other paths). `save_roots=False` for runs so
    long that this matters.
    """

    block_size: int | None = None
    save_roots: bool = True

    def __check_init__(self):
        if self.block_size is not None:
            positive_int(self.block_size, "CheckpointedAdjoint(block_size)")

    def loop(self, loop, inputs, result0):
        block = _block_size(loop.save_every, self.block_size)
        policy = jax.checkpoint_policies.save_only_these_names(NEWTON_ROOT) if self.save_roots else None

        def scan_steps(body, carry, xs, length):
            inner = jax.checkpoint(lambda c, x: _scan_steps(body, c, x, block)[0], policy=policy)
            blocks = jtu.tree_map(lambda x: x.reshape(length // block, block, *x.shape[1:]), xs)
            return _scan_steps(inner, carry, blocks, length // block)

        return loop.run(inputs, result0, scan_steps)[:2]


CHECKPOINT_FROM_STEPS = 500
"""From this many steps on, `simulate`'s default adjoint is `CheckpointedAdjoint`."""


def default_adjoint(num_steps: int) -> AbstractAdjoint:
    """The adjoint `simulate` uses when none is given: `DirectAdjoint()` for fewer than
    `CHECKPOINT_FROM_STEPS` (500) steps, `CheckpointedAdjoint()` from there on.

    The two are level up to a few hundred steps and `CheckpointedAdjoint` is faster beyond, where
    `DirectAdjoint`'s stored intermediates leave the caches (measured: see docs/performance.md,
    "Keeping the Newton roots"). Forward mode is unaffected by the choice: both differentiate the
    loop directly.
    """
    return CheckpointedAdjoint() if num_steps >= CHECKPOINT_FROM_STEPS else DirectAdjoint()


class StepwiseAdjoint(AbstractAdjoint):
    """Reverse mode one step at a time, from the states stored by the forward pass.

    The forward pass keeps (q_k, ω_k) and the integrator's state before every step, and none of
    a step's intermediate values; the backward pass takes the vector–Jacobian product of each
    step in turn, recomputing that step from its stored state (with the implicit-function
    derivative of its Newton solve). Memory ∝ number of steps × the size of a state (for n
    bodies about 15n floats per step with the `VariationalIntegrator`: 2.5 MB for 10⁴ steps of
    the double pendulum, against 15.5 MB for `DirectAdjoint`; n² more for a dense M of 8 or more
    bodies (`_inertia.MIN_CHOLESKY_BODIES`), whose state carries a Cholesky factor: 4.1 MB for 10³ steps at
    n = 16, against 31 MB). Time: measured, see
    docs/performance.md (the forward pass takes lazy steps, the backward pass full ones).

    The choice for gradients where `ReversibleAdjoint` does not apply: it takes any fixed-step
    integrator, forces that depend on ω and feedback policies, and is exact on chaotic
    trajectories. Reverse mode only: a `jax.custom_vjp`, so `jax.jvp`/`jax.jacfwd` need
    `DirectAdjoint`. Gradients of a simulation that failed (`result` not successful) are NaN.
    """

    def loop(self, loop, inputs, result0):
        return _stepwise_loop(loop, inputs, result0, reversible=False, tolerance=None)


class ReversibleAdjoint(AbstractAdjoint):
    """Reverse mode that recomputes the trajectory backwards instead of storing it.

    For a symmetric integrator Φ, Φ_{−h} ∘ Φ_h = id, so from the final state the backward pass
    recovers (q_k, ω_k) = Φ_{−h}(q_{k+1}, ω_{k+1}) and applies the vector–Jacobian product of
    the step at (q_k, ω_k). Memory does not grow with the number of steps.

    When it is accurate: the recomputed states differ from the forward ones by round-off
    (and the Newton tolerance), amplified by the flow's sensitivity to initial conditions
    over the horizon. On a regular trajectory the gradients agree with `DirectAdjoint` to
    ~1e-10 relative; on a chaotic one the backward reconstruction departs from the forward
    trajectory like e^{λt}·1e-16 (λ the Lyapunov exponent), and the gradient with it — the
    gradient itself grows as e^{λt}, so such horizons call for multiple shooting anyway.

    So the backward pass checks itself: it ends at a reconstruction of the initial state, and
    compares it with the true one. If any component differs by more than
    `tolerance`·(1 + |x₀|), the gradient cannot be trusted: with `simulate(throw=True)` a
    `SimulationError` is raised, with `throw=False` the gradients are NaN. Measured on 002
    Example 1 (h = 0.01): reconstruction error 4e-12, 1e-10, 6e-7 and 1 after 10³, 3·10³, 10⁴
    and 3·10⁴ steps, with gradient errors against `DirectAdjoint` of 3e-11, 5e-9, 4e-5 and
    3.4 (relative).

    The gradient's error is not a fixed multiple of the reconstruction error: measured over 78
    runs of Example 1 (h = 0.01; the paper's state and 21 random ones; 10³ to 7·10³ steps; the
    gradient, with respect to the five params, of a fixed linear function of the final state),
    the relative gradient error was 0.3 to 530 times the reconstruction error, median 3×, 90 %
    of the runs below 25×; of the 26 whose reconstruction the default tolerance 1e-8 accepts, the
    worst gradient error was 1.6e-7 (58×), and a run reported with issue 29 reached 2.4e-6 at
    7000 steps (≥ 240×). So the default tolerance 1e-8 admits gradients good to ~1e-7 typically
    and to a few 1e-6 at worst; where the gradient must be good to 1e-6, pass `tolerance=1e-9`
    (a ratio of 500 then leaves 5e-7).

    Needs a symmetric integrator (`is_symmetric`) whose state carries nothing that depends on
    the sign of h, except what only guides its iterations (the `VariationalIntegrator`'s
    starting point), and forces that do not depend on ω. Gradients of a simulation that failed
    (`result` not successful) are NaN.

    **Arguments:**

    - `tolerance`: the largest reconstruction error accepted, relative to 1 + |x₀|.
    """

    tolerance: float = 1e-8

    def loop(self, loop, inputs, result0):
        return _stepwise_loop(loop, inputs, result0, reversible=True, tolerance=self.tolerance)


def _reconstruction_error(rebuilt, true):
    """max over the components of |rebuilt − true| / (1 + |true|)."""
    errors = jtu.tree_map(lambda a, b: jnp.max(jnp.abs(a - b) / (1.0 + jnp.abs(b))), rebuilt, true)
    return jnp.max(jnp.stack(jtu.tree_leaves(errors)))


def _raise_if_inexact(errors, tolerance):
    errors = np.asarray(errors)
    bad = np.argwhere(np.atleast_1d(~(errors <= tolerance)))
    if bad.size:
        index = tuple(int(i) for i in bad[0]) if errors.ndim else ()
        where = f" (batch index {index})" if errors.ndim else ""
        raise SimulationError(
            f"s2jax.ReversibleAdjoint{where}: the backward pass rebuilt the initial state with a "
            f"relative error of {float(errors[index]):.2e}, above the tolerance {tolerance:g}, so the "
            "gradient would be wrong. The horizon is too long for this trajectory's sensitivity "
            "(chaos amplifies round-off like e^{λt}): use DirectAdjoint or CheckpointedAdjoint, a "
            "shorter horizon or multiple shooting, or pass ReversibleAdjoint(tolerance=...)."
        )


def _stepwise_loop(loop, inputs, result0, *, reversible, tolerance):
    """The forward loop with a backward pass of one vector–Jacobian product per step, taken at
    the state before the step: rebuilt by the step with −h (`reversible`) or stored by the
    forward pass."""
    # Everything differentiated is an explicit input of the custom_vjp, which must not close
    # over it: the loop's own arrays (a force's coefficients, ...), the inputs (y0, params, dt,
    # controls) and the initial result code computed from them.
    if loop.policy is not None:
        # A feedback policy may close over traced arrays (an MLP's weights inside a loss):
        # make them leaves of the loop.
        example = (jnp.zeros((), inputs.dt.dtype), *inputs.y0, eqx.combine(inputs.params, loop.static_params))
        loop = eqx.tree_at(lambda l: l.policy, loop, eqx.filter_closure_convert(loop.policy, *example))
    loop_arrays, loop_static = eqx.partition(loop, eqx.is_inexact_array)
    scan_steps = _scan_steps if reversible else _scan_steps_keeping_states

    def rebuild(loop_arrays):
        return eqx.combine(loop_arrays, loop_static)

    @jax.custom_vjp
    def run(loop_arrays, inputs, result0):
        return rebuild(loop_arrays).run(inputs, result0, _scan_steps)[:2]

    def forward(loop_arrays, inputs, result0):
        final, ys, stored = rebuild(loop_arrays).run(inputs, result0, scan_steps)
        return (final, ys), (loop_arrays, inputs, final, stored)

    def backward(residuals, cotangents):
        loop_arrays, inputs, final, stored = residuals
        _, ct_ys = cotangents
        dt = inputs.dt
        # Cotangents flow only to the inexact leaves of the system's args (params may hold ints).
        args, static_args = eqx.partition(loop.args(inputs), eqx.is_inexact_array)
        _, args_vjp = jax.vjp(
            lambda la, i: eqx.filter(rebuild(la).args(i), eqx.is_inexact_array), loop_arrays, inputs
        )

        def step(k, t0, y, state, args, h, loop_arrays, u):
            """The step from t0 by h with the control u_k of step k (held over the step)."""
            loop = rebuild(loop_arrays)
            args = loop.control(k, y, eqx.combine(args, static_args), dt, u)
            return loop.advance(t0, h, y, state, args)[:2]

        def back_step(carry, xs):
            k, y, state, ct, ct_args, ct_loop, ct_dt = carry
            u, kept = xs
            k = k - 1
            if reversible:
                # (q_k, ω_k) from (q_{k+1}, ω_{k+1}) by the step with −h, then the vjp of step k.
                previous = step(k, loop.time(k + 1, dt), y, state, args, -dt, loop_arrays, u)
            else:
                previous = kept
            _, vjp = jax.vjp(
                lambda y, s, a, h, la, u: step(k, loop.time(k, h), y, s, a, h, la, u),
                *previous, args, dt, loop_arrays, u,
            )
            dy, dstate, dargs, ddt, dloop, du = vjp(ct)
            ct_args = jtu.tree_map(jnp.add, ct_args, dargs)
            ct_loop = jtu.tree_map(jnp.add, ct_loop, dloop)
            return (k, *previous, (dy, dstate), ct_args, ct_loop, ct_dt + ddt), du

        def back_save(carry, xs):
            ct_save, controls, kept = xs
            carry, du = lax.scan(back_step, carry, (controls, kept), length=loop.save_every, reverse=True)
            k, y, state, (dy, dstate), ct_args, ct_loop, ct_dt = carry
            dy = jtu.tree_map(jnp.add, dy, ct_save)
            return (k, y, state, (dy, dstate), ct_args, ct_loop, ct_dt), du

        zeros = jtu.tree_map(jnp.zeros_like, final.state)
        ct_final = (jtu.tree_map(lambda c: c[-1], ct_ys), zeros)
        carry = (
            final.step, final.y, final.state, ct_final, jtu.tree_map(jnp.zeros_like, args),
            jtu.tree_map(jnp.zeros_like, loop_arrays), jnp.zeros_like(dt),
        )
        # After the block that ends at save s (s ≥ 1) comes the cotangent of save s − 1; the
        # first block (back to step 0) adds nothing: the initial state is not an output here.
        # Both scans run backwards (reverse=True), so the controls' cotangents come out in order.
        pending = jtu.tree_map(lambda c: jnp.concatenate([jnp.zeros_like(c[:1]), c[:-1]]), ct_ys)
        xs = (pending, rebuild(loop_arrays).controls_by_save(inputs.controls), stored)
        carry, ct_controls = lax.scan(back_save, carry, xs, reverse=True)
        _, y0_rebuilt, _, (dy, dstate), ct_args, ct_loop, ct_dt = carry
        _, init_vjp = jax.vjp(
            lambda y0, a, la, u: rebuild(la).integrator_init(y0, eqx.combine(a, static_args), dt, u),
            inputs.y0, args, loop_arrays, inputs.controls,
        )
        dy0, dargs0, dloop0, dcontrols0 = init_vjp(dstate)
        ct_loop_args, ct_inputs = args_vjp(jtu.tree_map(jnp.add, ct_args, dargs0))
        ct_controls = jtu.tree_map(lambda c, u, c0: c.reshape(u.shape) + c0, ct_controls, inputs.controls, dcontrols0)
        direct = eqx.tree_at(
            lambda i: (i.y0, i.dt, i.controls),
            jtu.tree_map(jnp.zeros_like, inputs),
            (jtu.tree_map(jnp.add, dy, dy0), ct_dt, ct_controls),
            is_leaf=lambda x: x is None,
        )
        grads = (
            jtu.tree_map(lambda *g: sum(g), ct_loop, dloop0, ct_loop_args),
            jtu.tree_map(jnp.add, ct_inputs, direct),
        )
        untrusted = final.result != RESULTS.successful
        if reversible:
            error = _reconstruction_error(y0_rebuilt, inputs.y0)
            untrusted = untrusted | (error > tolerance)
        grads = jtu.tree_map(lambda g: jnp.where(untrusted, jnp.nan, g), grads)
        if reversible and loop.throw:
            inexact = functools.partial(_raise_if_inexact, tolerance=tolerance)
            grads = error_if(grads, ~(error <= tolerance), inexact, error)
        return (*grads, None)

    run.defvjp(forward, backward)
    return run(loop_arrays, inputs, result0)
