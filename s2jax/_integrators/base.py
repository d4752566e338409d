"""The interfaces every s2jax integrator implements; `simulate` owns the loop."""

import abc
from typing import Any

import equinox as eqx
import jax.numpy as jnp

from .._custom_types import Array, Float, Int
from .._results import RESULTS
from .._system import AbstractSystem, SystemArgs

IntegratorState = Any
State = tuple[Float[Array, "n 3"], Float[Array, "n 3"]]
"""y = (q, ω) ∈ T(S²)ⁿ, the state every integrator advances. What else a method carries
from step to step (RATTLE's velocity in ℝ³, a cached force, Newton's starting point) is in its
own integrator state."""


class AbstractIntegrator(eqx.Module):
    """A one-step method on T(S²)ⁿ in the (q, ω) variables of 002 (2.9)–(2.10).

    `init` computes what the steps share; `step` maps y_k = (q_k, ω_k) at t_k to y_{k+1} at
    t_k + h and returns a `RESULTS` code. Steps never renormalise q.

    Declared capabilities (class attributes, or properties of wrappers such as `Composition`):

    - `system_type`: the `AbstractSystem` subclass the method integrates (`AbstractSystem` for
      methods that need only the equations of motion); the plan refuses any other system.
    - `order`: the order of the global error.
    - `is_symmetric`: a step with −h undoes a step with h (to the solver tolerance), which
      `ReversibleAdjoint` needs.
    - `requires_diagonal_inertia`: the method needs M_ij = 0 for i ≠ j.
    - `velocity_dependent_forces`: the method takes generalized forces that depend on ω.
    """

    system_type: eqx.AbstractVar[type[AbstractSystem]]
    order: eqx.AbstractVar[int]
    is_symmetric: eqx.AbstractVar[bool]
    requires_diagonal_inertia: eqx.AbstractVar[bool]
    velocity_dependent_forces: eqx.AbstractVar[bool]

    @abc.abstractmethod
    def init(self, system: AbstractSystem, t0: Float[Array, ""], y0: State, args: SystemArgs) -> IntegratorState:
        """The integrator's state before the first step."""

    @abc.abstractmethod
    def step(
        self,
        system: AbstractSystem,
        t0: Float[Array, ""],
        dt: Float[Array, ""],
        y: State,
        args: SystemArgs,
        state: IntegratorState,
    ) -> tuple[State, IntegratorState, RESULTS]:
        """One step from t0 to t0 + dt (dt < 0 steps backwards): `(y_next, state_next, result)`.

        h is passed as `dt` rather than as t1 − t0, which differs from h in the last bits, so
        a fixed-step run does the same arithmetic at every t.
        """

    def lazy_step(
        self,
        system: AbstractSystem,
        t0: Float[Array, ""],
        dt: Float[Array, ""],
        y: State,
        args: SystemArgs,
        state: IntegratorState,
    ) -> tuple[State, IntegratorState, RESULTS]:
        """`step`, except that the ω of the returned y may be left stale: `velocity` gives
        ω_{k+1} from what is returned. `simulate` takes lazy steps between saves when nothing
        reads ω there (no feedback policy); the variational integrators then skip the solve of
        (3.13), which only ω needs. By default the same as `step`.
        """
        return self.step(system, t0, dt, y, args, state)

    def velocity(
        self, system: AbstractSystem, y: State, args: SystemArgs, state: IntegratorState
    ) -> Float[Array, "n 3"]:
        """ω at the end of a `lazy_step` that returned `(y, state)` (by default y's own)."""
        return y[1]


class AbstractAdaptiveIntegrator(eqx.Module):
    """A method with its own step-size control, run once over the whole output grid.

    Such a method has no fixed step to put in `simulate`'s loop: `solve` integrates from ts[0]
    to ts[-1] and reads the solution at `ts` from its dense output. It declares the same
    capabilities as `AbstractIntegrator`.
    """

    system_type: eqx.AbstractVar[type[AbstractSystem]]
    order: eqx.AbstractVar[int]
    is_symmetric: eqx.AbstractVar[bool]
    requires_diagonal_inertia: eqx.AbstractVar[bool]
    velocity_dependent_forces: eqx.AbstractVar[bool]

    @abc.abstractmethod
    def solve(
        self, system: AbstractSystem, ts: Float[Array, " S"], y0: State, args: SystemArgs
    ) -> tuple[State, RESULTS, Int[Array, ""], Int[Array, ""]]:
        """`(ys at ts, result, failed_save, num_steps)`: `failed_save` is the index of the first
        save time not reached (−1 if all were), the states from there on repeat the last good one."""


def check_system_type(integrator, system: AbstractSystem) -> None:
    """Raise a `TypeError` unless `system` is of the `system_type` that `integrator` declares
    (for a method called directly; `simulate` and the other entry points refuse the pair before
    compiling, with a hint, through the plan)."""
    if not isinstance(system, integrator.system_type):
        raise TypeError(
            f"{type(integrator).__name__} integrates a {integrator.system_type.__name__}; "
            f"got a {type(system).__name__}"
        )


def check_finite(result: RESULTS, *arrays: Array) -> RESULTS:
    """`result`, or `RESULTS.nonfinite_state` if any of the arrays holds a NaN or inf.

    Tested on one sum of all the entries: a NaN or inf anywhere makes it non-finite (only
    entries near 1e308, far from any physical state, could overflow it), cheaper than a
    reduction per array (measured: see docs/performance.md).
    """
    finite = jnp.isfinite(sum(jnp.sum(x) for x in arrays))
    return RESULTS.where(finite, result, RESULTS.nonfinite_state)
