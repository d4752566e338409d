"""`Stepper`: one step of a model, planned and compiled once, to call from a Python loop.

`simulate` checks its inputs and makes its plan on every call, which costs far more than one
step of a small system (an eager 10-step `simulate` of the spherical pendulum: ~0.9 ms). An
environment for reinforcement learning, an interactive notebook or a controller in the loop
steps one state at a time. A `Stepper` does that work once, at construction, with the same
checks as `simulate` (raising there), and each call runs one compiled step of the same plan:
(q, ω) in, (q, ω) out. The state's own rules (|q_i| = 1, q_i·ω_i = 0, finiteness) are checked
inside the compiled step, so a bad state in is an error, not a wrong step.
"""

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.tree_util as jtu

from ._custom_types import Array, ArrayLike, Float, Lagrangian, Params
from ._errors import SimulationError
from ._force import AbstractForce
from ._integrators import AbstractAdaptiveIntegrator, AbstractIntegrator
from ._jit import compiler_options
from ._plan import plan
from ._results import RESULTS, SUCCESSFUL_CODE
from ._system import AbstractSystem
from ._validation import (
    check_force_output,
    check_initial_state,
    check_parameters,
    check_state_arguments,
    initial_state_is_valid,
    trace_floats,
)


class Stepper:
    """One step of `model` with `params` and step `dt`, compiled once: `q, omega = stepper(q, omega)`.

    The plan (system and integrator) is `simulate`'s for the same arguments, made once from
    (q0, ω0) with the same eager checks; so is the step, so a loop of `stepper` calls follows
    `simulate`'s trajectory (the integrator's state is initialised afresh each step, which
    changes only Newton's starting point, within its tolerance). Each call is one jitted
    function of the state (JAX's C++ dispatch): new states never recompile; the params and dt
    are constants of the compiled step (a new Stepper for new ones, compiled anew).

    **Arguments:**

    - `model`, `q0`, `omega0`, `params`, `dt`, `integrator`, `force`: as for `simulate` (an
      adaptive integrator is refused: it has no step of its own).
    - `u0`: a control as the calls will pass it, for a force that reads one (its shape and the
      force's output are checked with it, as `simulate` checks `controls[0]`).

    **Calling** `stepper(q, omega, u=None, t=0.0)`: the state after one step from (q, ω) at time
    t with the control u held (for a force that reads it; without a force, whose step reads
    neither, u is refused and t ignored); returns `(q, omega)`. Raises
    `SimulationError` if the step fails or the state given is not one (|q_i| ≠ 1, q_i·ω_i ≠ 0
    beyond 1e-12, non-finite): the code is read back on the host each call (a device-to-host copy
    of one integer), so nothing fails silently.

    **Speed.** A call costs ~60 µs on a 2-core CPU, most of it JAX's asynchronous dispatch;
    `jax.config.update("jax_cpu_enable_async_dispatch", False)` before JAX runs anything makes
    it ~27 µs (docs/performance.md, "Calls from Python").
    """

    def __init__(
        self,
        model: Lagrangian | AbstractSystem,
        q0: Float[ArrayLike, "n 3"],
        omega0: Float[ArrayLike, "n 3"],
        params: Params,
        *,
        dt: float,
        integrator: AbstractIntegrator | None = None,
        force: AbstractForce | Callable | None = None,
        u0: ArrayLike | None = None,
    ):
        q0, omega0, dt = check_state_arguments(q0, omega0, dt)
        if any(isinstance(x, jax.core.Tracer) for x in jtu.tree_leaves((q0, omega0, dt, params))):
            raise ValueError(
                "a Stepper is built from concrete values, outside jax.jit / jax.vmap / jax.grad; inside them "
                "use s2.simulate"
            )
        check_initial_state(q0, omega0, dt)
        params = jtu.tree_map(trace_floats, params)
        check_parameters(params)
        the_plan = plan(model, q0, omega0, params, integrator=integrator, force=force)
        if isinstance(the_plan.integrator, AbstractAdaptiveIntegrator):
            name = type(the_plan.integrator).__name__
            raise ValueError(f"{name} chooses its own steps; a Stepper takes a fixed-step integrator")
        if the_plan.system.force is not None:
            controls = None if u0 is None else jnp.asarray(u0, q0.dtype)[None]
            check_force_output(the_plan.system.force, None, q0, omega0, params, controls)
        self.system, self.integrator, self.params, self.dt = the_plan.system, the_plan.integrator, params, dt
        # The params and h are the Stepper's own: closed over (constants of the program), each call
        # passes the state alone (measured 29 µs a dispatch against 43 µs with them as arguments).
        # Without a force nothing reads u or t (L and H do not depend on t), and the program takes
        # (q, ω) alone: passing u = None and t cost ~12 µs a call (92 against 80 µs, measured).
        step = functools.partial(_one_step, the_plan.system, the_plan.integrator, dt=dt, params=params)
        self._unforced = the_plan.system.force is None
        if self._unforced:
            step = functools.partial(step, u=None, t=0.0)
        self._step = jax.jit(step, compiler_options=compiler_options() or None)

    def __call__(
        self, q: Float[ArrayLike, "n 3"], omega: Float[ArrayLike, "n 3"], u: ArrayLike | None = None, t: float = 0.0
    ) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"]]:
        if any(isinstance(x, jax.core.Tracer) for x in (q, omega, u, t)):
            raise ValueError(
                "a Stepper is called from Python with concrete states (it reads each step's result code on the "
                "host); inside jax.jit / jax.vmap / jax.grad use s2.simulate"
            )
        if self._unforced:
            if u is not None:
                raise ValueError("this Stepper's system has no force, so nothing reads the control u")
            q1, omega1, code = self._step(q, omega)
        else:
            q1, omega1, code = self._step(q, omega, u, t)
        code = code.item()  # the code on the host: `item` is the cheapest read (~18 µs less than int())
        if code != SUCCESSFUL_CODE:
            raise SimulationError(
                f"Stepper ({type(self.integrator).__name__}), the step from t = {t}: {RESULTS._index_to_message[code]}"
            )
        return q1, omega1

    def __repr__(self) -> str:
        return f"Stepper({type(self.system).__name__}, {type(self.integrator).__name__}, dt={float(self.dt)})"


def step_once(system, integrator, t, dt, q, omega, u, params):
    """`((q_next, ω_next), result)`: one step of `integrator` from (q, ω) at t with u held (None:
    no control), its state initialised afresh (which changes only Newton's starting point)."""
    args = system.prepare(q, params)
    if u is not None:
        args = dataclasses.replace(args, control=u)
    state = integrator.init(system, t, (q, omega), args)
    y, _, result = integrator.step(system, t, dt, (q, omega), args, state)
    return y, result


def _one_step(system, integrator, q, omega, u, t, *, dt, params):
    """One step of `integrator` from (q, ω) at t with u held, and its code (the state's rules first)."""
    q, omega = jnp.asarray(q, dt.dtype), jnp.asarray(omega, dt.dtype)
    u = None if u is None else jnp.asarray(u, dt.dtype)
    (q1, omega1), result = step_once(system, integrator, jnp.asarray(t, dt.dtype), dt, q, omega, u, params)
    valid = initial_state_is_valid(q, omega, dt)
    result = RESULTS.where(valid, result, RESULTS.invalid_initial_state)
    return q1, omega1, result._value
