"""How `simulate` is differentiated: the loop over steps, with three ways to store it.

Every adjoint runs the same forward loop: `save_every` steps between saved states, a failed
step freezing the state (see `simulate`). They differ in what reverse mode keeps:

- `DirectAdjoint`: every step's intermediate values (plain `jax.grad` of `lax.scan`). Fastest;
  memory ∝ number of steps.
- `CheckpointedAdjoint`: `jax.checkpoint` over blocks of steps; the backward pass recomputes
  one block at a time. Memory ∝ number of blocks + block size.
- `ReversibleAdjoint`: nothing per step. The variational integrators are symmetric, so a step
  with −h undoes a step with h (to the Newton tolerance); the backward pass recomputes
  (q_k, ω_k) by stepping backwards from the final state. Memory independent of the number of
  steps.

Forward mode (`jax.jvp`, `jax.jacfwd`) goes through the loop directly for all three.
Derivatives of each implicit step come from the implicit function theorem (`_newton.py`).
"""

import abc
import math
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jax import lax

from ._results import RESULTS

_NO_FAILURE = -1  # `Solution.failed_step` when every step succeeded

StepFn = Callable[..., Any]


def _guarded_step(step: StepFn, inputs):
    """One step of the forward loop: a failure freezes the state and records the step index."""
    _, _, params, dt = inputs

    def body(carry):
        q, omega, state, result, failed_step, k = carry
        q1, omega1, state1, step_result = step(q, omega, state, params, dt)
        running = result == RESULTS.successful
        accept = running & (step_result == RESULTS.successful)
        q, omega, state = jtu.tree_map(
            lambda new, old: jnp.where(accept, new, old), (q1, omega1, state1), (q, omega, state)
        )
        failed_step = jnp.where(running & ~accept, k, failed_step)
        result = RESULTS.where(running, step_result, result)
        return q, omega, state, result, failed_step, k + 1

    return body


def _scan_steps(body, carry, length):
    return lax.scan(lambda c, _: (body(c), None), carry, length=length)[0]


class AbstractAdjoint(eqx.Module):
    """How reverse-mode differentiation of `simulate` stores (or recomputes) the trajectory."""

    @abc.abstractmethod
    def loop(self, init: StepFn, step: StepFn, inputs, result0, num_saves: int, save_every: int, on_save=None):
        """Run `num_saves × save_every` steps from `init(*inputs)`.

        `inputs = (q0, omega0, params, dt)` holds the differentiable inputs (params filtered
        to its inexact arrays); `step(q, omega, state, params, dt)` is the integrator's step.
        `on_save(index)`, if given, is called (traced) after each saved state: the progress bar.

        **Returns:** `(qs, omegas, result, failed_step)`, with qs, omegas of shape
        (num_saves, n, 3): the states after each block of `save_every` steps.
        """


def _forward(init, step, inputs, result0, num_saves, save_every, run_block, on_save):
    q0, omega0, params, dt = inputs
    failed0 = jnp.where(result0 == RESULTS.successful, _NO_FAILURE, 0)
    carry = (q0, omega0, init(*inputs), result0, failed0, jnp.array(0))
    body = _guarded_step(step, inputs)

    def save(carry, index):
        carry = run_block(body, carry)
        if on_save is not None:
            on_save(index)
        return carry, (carry[0], carry[1])

    final, (qs, omegas) = lax.scan(save, carry, jnp.arange(num_saves))
    return final, qs, omegas


class DirectAdjoint(AbstractAdjoint):
    """Reverse mode through the `lax.scan` as it is: stores every step. Fastest for short runs."""

    def loop(self, init, step, inputs, result0, num_saves, save_every, on_save=None):
        final, qs, omegas = _forward(
            init, step, inputs, result0, num_saves, save_every,
            lambda body, carry: _scan_steps(body, carry, save_every), on_save,
        )
        return qs, omegas, final[3], final[4]


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
    """

    block_size: int | None = None

    def loop(self, init, step, inputs, result0, num_saves, save_every, on_save=None):
        block = _block_size(save_every, self.block_size)

        def run_block(body, carry):
            inner = jax.checkpoint(lambda c: _scan_steps(body, c, block))
            return lax.scan(lambda c, _: (inner(c), None), carry, length=save_every // block)[0]

        final, qs, omegas = _forward(
            init, step, inputs, result0, num_saves, save_every, run_block, on_save
        )
        return qs, omegas, final[3], final[4]


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

    Needs an integrator whose states carry nothing that depends on the sign of h: the
    variational integrators and their compositions. Gradients of a simulation that failed
    (`result` not successful) are NaN.
    """

    def loop(self, init, step, inputs, result0, num_saves, save_every, on_save=None):
        return _reversible_loop(init, step, num_saves, save_every, inputs, result0, on_save)


def _reversible_loop(init, step, num_saves, save_every, inputs, result0, on_save):
    # The initial result code enters as an explicit (integer) input: a custom_vjp must not
    # close over values computed from the inputs being differentiated.
    def run(inputs, code0):
        return _forward(
            init, step, inputs, _as_result(code0), num_saves, save_every,
            lambda body, carry: _scan_steps(body, carry, save_every), on_save,
        )

    @jax.custom_vjp
    def loop(inputs, code0):
        final, qs, omegas = run(inputs, code0)
        return qs, omegas, final[3]._value, final[4]

    def forward(inputs, code0):
        final, qs, omegas = run(inputs, code0)
        return (qs, omegas, final[3]._value, final[4]), (inputs, final[:3], final[3]._value)

    def backward(residuals, cotangents):
        inputs, (q, omega, state), code = residuals
        _, _, params, dt = inputs
        ct_qs, ct_omegas, _, _ = cotangents

        def one_step(q, omega, state, params, dt):
            return step(q, omega, state, params, dt)[:3]

        def back_step(carry, _):
            x, lam, ct_params, ct_dt = carry
            previous = one_step(*x, params, -dt)
            _, vjp = jax.vjp(one_step, *previous, params, dt)
            dq, domega, dstate, dparams, ddt = vjp(lam)
            ct_params = jtu.tree_map(jnp.add, ct_params, dparams)
            return (previous, (dq, domega, dstate), ct_params, ct_dt + ddt), None

        def back_save(carry, ct_save):
            carry, _ = lax.scan(back_step, carry, length=save_every)
            x, (dq, domega, dstate), ct_params, ct_dt = carry
            return (x, (dq + ct_save[0], domega + ct_save[1], dstate), ct_params, ct_dt), None

        zeros = jtu.tree_map(jnp.zeros_like, state)
        lam = (ct_qs[-1], ct_omegas[-1], zeros)
        carry = ((q, omega, state), lam, jtu.tree_map(jnp.zeros_like, params), jnp.zeros_like(dt))
        # After the block that ends at save s (s ≥ 1) comes the cotangent of save s − 1; the
        # last block (back to step 0) adds nothing: the initial state is not an output here.
        pending = (
            jnp.concatenate([jnp.zeros_like(ct_qs[:1]), ct_qs[:-1]])[::-1],
            jnp.concatenate([jnp.zeros_like(ct_omegas[:1]), ct_omegas[:-1]])[::-1],
        )
        ((q0, omega0, _), (dq, domega, dstate), ct_params, ct_dt), _ = lax.scan(back_save, carry, pending)
        q0_in, omega0_in, params_in, dt_in = inputs
        _, vjp_init = jax.vjp(init, q0_in, omega0_in, params_in, dt_in)
        dq0, domega0, dparams0, ddt0 = vjp_init(dstate)
        grads = (dq + dq0, domega + domega0, jtu.tree_map(jnp.add, ct_params, dparams0), ct_dt + ddt0)
        failed = code != RESULTS.successful._value
        return jtu.tree_map(lambda g: jnp.where(failed, jnp.nan, g), grads), None

    loop.defvjp(forward, backward)
    qs, omegas, code, failed_step = loop(inputs, result0._value)
    return qs, omegas, _as_result(code), failed_step


def _as_result(code) -> RESULTS:
    """The `RESULTS` item of an integer code array."""
    return eqx.tree_at(lambda r: r._value, RESULTS.successful, code)
