"""The loop of `simulate`: what one step does, over a named carry, and how saves are taken.

`Loop` calls the integrator, freezes the state after a failure and records the failing step;
the adjoints of `_adjoint.py` only choose how the scan over its steps is stored, checkpointed
or reversed for reverse-mode differentiation.
"""

import dataclasses
import functools
import math
import sys
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jax import lax

from ._adjoint import NO_FAILURE
from ._custom_types import Array, Float, Int, Params
from ._integrators.base import AbstractIntegrator, IntegratorState, State
from ._results import RESULTS
from ._system import AbstractSystem, SystemArgs

_FROZEN_STEP_FRACTION = 2.0**-10
"""The fraction of h that a failed member of a batch steps by (and discards): see `Loop.step`."""

MEMBERS_AXIS = "s2jax_members"
"""The name of the `jax.vmap` axis over which `simulate_batch` runs its members on CPU. A loop
traced under it takes each step of all members together (`Loop.step`)."""


def _members_axis_bound() -> bool:
    """Whether this trace runs under `simulate_batch`'s vmap named `MEMBERS_AXIS`."""
    try:
        lax.axis_size(MEMBERS_AXIS)
    except NameError:
        return False
    return True


class LoopState(eqx.Module):
    """What the loop carries from step to step.

    **Fields:** `y` = (q_k, ω_k); `state`, the integrator's own; `result`, the code so far;
    `failed_step`, the first failed step or −1; `step`, k, the steps attempted so far.
    """

    y: State
    state: IntegratorState
    result: RESULTS
    failed_step: Int[Array, ""]
    step: Int[Array, ""]


class LoopInputs(eqx.Module):
    """The inputs of the loop that derivatives flow to.

    **Fields:** `y0`; `params`, the inexact leaves of the model's params; `dt`; `controls`, the
    open-loop controls u_k, shape (num_steps, …), or None.
    """

    y0: State
    params: Params
    dt: Float[Array, ""]
    controls: Array | None = None


class Loop(eqx.Module):
    """One simulation's loop: `num_saves` blocks of `save_every` steps of `integrator`.

    t_k = k h is computed from the step count, not accumulated. A step that fails freezes
    the state and records its index; every later step is skipped (`step`), so the saves that
    follow repeat the last good state bitwise, q and ω alike. Between saves the steps are lazy
    (`AbstractIntegrator.lazy_step`: the VI leaves its solve for ω to the saves) unless a
    feedback policy reads ω at every step.

    Controls are held over each step (zero-order hold): u_k is the k-th row of
    `LoopInputs.controls`, or `policy(t_k, q_k, ω_k, params)` sampled at the start of step k.
    They reach the system as `SystemArgs.control`, and from there the force.
    """

    integrator: AbstractIntegrator
    system: AbstractSystem
    static_params: Params
    policy: Callable | None
    num_saves: int = eqx.field(static=True)
    save_every: int = eqx.field(static=True)
    progress: bool = eqx.field(static=True)
    throw: bool = eqx.field(static=True)

    def args(self, inputs: LoopInputs) -> SystemArgs:
        return self.system.prepare(inputs.y0[0], eqx.combine(inputs.params, self.static_params))

    def integrator_init(self, y0: State, args: SystemArgs, dt: Float[Array, ""], controls) -> IntegratorState:
        """The integrator's initial state, with the control of step 0 (some methods evaluate the force)."""
        u0 = None if controls is None else controls[0]
        args = self.control(jnp.array(0), y0, args, dt, u0)
        return self.integrator.init(self.system, jnp.zeros((), dt.dtype), y0, args)

    def init(self, inputs: LoopInputs, args: SystemArgs, result0: RESULTS) -> LoopState:
        state = self.integrator_init(inputs.y0, args, inputs.dt, inputs.controls)
        failed0 = jnp.where(result0 == RESULTS.successful, NO_FAILURE, 0)
        return LoopState(inputs.y0, state, result0, failed0, jnp.array(0))

    def time(self, k: Int[Array, ""], dt: Float[Array, ""]) -> Float[Array, ""]:
        return k.astype(dt.dtype) * dt

    def advance(self, t0, dt, y, state, args, *, lazy=False):
        """The integrator's step from t0 by dt: `(y_next, state_next, result)`; with `lazy`,
        `AbstractIntegrator.lazy_step` (the adjoints' backward passes take full steps)."""
        take_step = self.integrator.lazy_step if lazy else self.integrator.step
        return take_step(self.system, t0, dt, y, args, state)

    @property
    def lazy(self) -> bool:
        """Whether the steps between saves are lazy (`AbstractIntegrator.lazy_step`): ω is read
        only at the saves, unless a feedback policy reads it at every step."""
        return self.policy is None

    def with_velocity(self, carry: LoopState, args: SystemArgs) -> LoopState:
        """`carry` at a save, with the ω of its y brought up to date after lazy steps.

        ω is computed only where the state moved since the last save: after a failure, once,
        at the first save after a failure inside a block (the frozen state's ω was never
        computed); a failure at the start of a block, or before the first step, leaves the ω
        already saved (ω0 itself), so every later save repeats the same bits, and no ω is
        computed from an initial state or params that were refused.
        """
        if not self.lazy:
            return carry
        moved = (carry.result == RESULTS.successful) | (carry.failed_step > carry.step - self.save_every)
        omega = jnp.where(moved, self.integrator.velocity(self.system, carry.y, args, carry.state), carry.y[1])
        return dataclasses.replace(carry, y=(carry.y[0], omega))

    def control(self, k, y, args: SystemArgs, dt, u) -> SystemArgs:
        """`args` with the control of step k: the given u_k, or the policy's at (t_k, q_k, ω_k)."""
        if self.policy is not None:
            u = self.policy(self.time(k, dt), *y, args.params)
        return args if u is None else dataclasses.replace(args, control=u)

    def step(self, carry: LoopState, args: SystemArgs, dt: Float[Array, ""], u=None) -> LoopState:
        """Step k of the run, or nothing once it has failed.

        After a failure the step is not computed (a `lax.cond`): a failed run costs a loop trip
        per remaining step. Under `jax.vmap` the cond is a select that computes the step for
        every member; a failed member then steps from its frozen state by h·2⁻¹⁰ (discarded),
        not by h, so that it never repeats the failing step (a Newton iteration run to its cap
        every step would hold up the whole batch): its steps cost no more than a good one's.
        Under `simulate_batch`'s vmap on CPU (`MEMBERS_AXIS`) the members step together: a step
        that every member took keeps their new states without the per-member selects.
        """
        running = carry.result == RESULTS.successful
        h = dt * jnp.where(running, 1.0, _FROZEN_STEP_FRACTION)  # dt itself while running (× 1.0 is exact)

        def attempt(carry):
            step_args = self.control(carry.step, carry.y, args, dt, u)
            y, state, result = self.advance(
                self.time(carry.step, dt), h, carry.y, carry.state, step_args, lazy=self.lazy
            )
            return y, state, result, running & (result == RESULTS.successful)

        def take(carry, stepped):
            y, state, result, accept = stepped
            y, state = jtu.tree_map(lambda new, old: jnp.where(accept, new, old), (y, state), (carry.y, carry.state))
            failed_step = jnp.where(running & ~accept, carry.step, carry.failed_step)
            result = RESULTS.where(running, result, carry.result)
            return LoopState(y, state, result, failed_step, carry.step + 1)

        if _members_axis_bound():
            # All members of `simulate_batch`'s vmap step together. Where every one of them took
            # its step, the selects of `take` change nothing and are skipped: an unbatched
            # `lax.cond`, its predicate reduced over the members. 1024 double pendula in chunks of
            # 64: VI 183 → 163 ms, `Rattle` 84 → 69 ms, the same bits (docs/batches.md).
            stepped = attempt(carry)
            everyone = lax.pmin(stepped[3].astype(jnp.int32), MEMBERS_AXIS) == 1

            def took(stepped):
                y, state, result, _ = stepped
                return LoopState(y, state, result, carry.failed_step, carry.step + 1)

            return lax.cond(everyone, took, functools.partial(take, carry), stepped)

        def skip(carry):
            return dataclasses.replace(carry, step=carry.step + 1)

        return lax.cond(running, lambda carry: take(carry, attempt(carry)), skip, carry)

    def controls_by_save(self, controls):
        """The controls as (num_saves, save_every, …): the rows of each block between saves."""
        return jtu.tree_map(lambda u: u.reshape(self.num_saves, self.save_every, *u.shape[1:]), controls)

    def run(self, inputs: LoopInputs, result0: RESULTS, scan_steps: Callable) -> tuple[LoopState, State, object]:
        """The forward loop; `scan_steps(body, carry, xs, length)` runs `length` steps of
        `body(carry, x)`, x running over the leading axis of `xs` (the controls, or None), and
        returns `(carry, per_step)`: what it kept of each step (stacked), or None.

        **Returns:** the final `LoopState`, the states after each block, shape (num_saves, n, 3),
        and the `per_step` of every block, stacked (num_saves, save_every, …), or None.
        """
        args = self.args(inputs)
        on_save = _progress_hook(self.num_saves, self.save_every) if self.progress else None

        def save(carry, xs):
            index, controls = xs
            carry, per_step = scan_steps(
                lambda c, u: self.step(c, args, inputs.dt, u), carry, controls, self.save_every
            )
            carry = self.with_velocity(carry, args)
            if on_save is not None:
                on_save(index)
            return carry, (carry.y, per_step)

        xs = (jnp.arange(self.num_saves), self.controls_by_save(inputs.controls))
        final, (ys, per_step) = lax.scan(save, self.init(inputs, args, result0), xs)
        return final, ys, per_step


def _progress_hook(num_saves: int, save_every: int):
    """A text progress bar, updated from the device at most every few hundred steps.

    The update is a `jax.debug.callback` inside a `lax.cond` on the save index, so the
    host is called at most ~50 times per simulation, never once per step: after the first
    block of `save_every` steps (so that the bar appears as soon as the run starts), every
    `every` blocks, and after the last.
    """
    total = num_saves * save_every
    every = max(math.ceil(200 / save_every), math.ceil(num_saves / 50))

    def show(index):
        done = (int(index) + 1) * save_every
        filled = round(30 * done / total)
        end = "\n" if done >= total else ""
        print(f"\r  [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} steps", end=end,
              file=sys.stderr, flush=True)

    def on_save(index):
        update = (index == 0) | ((index + 1) % every == 0) | (index == num_saves - 1)
        lax.cond(update, lambda: jax.debug.callback(show, index), lambda: None)

    return on_save
