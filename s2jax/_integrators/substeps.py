"""Step refinement: any integrator taking several equal sub-steps per step.

A controlled system is driven by controls held over each step h (zero-order hold), so h is the
control's period as well as the integrator's step. `Substeps(integrator, count)` keeps the first
and shrinks the second: the error of an order-p method falls by count^p on the same control grid
(`s2jax.control.solve` uses it to meet a `Problem`'s `fidelity`).
"""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jax import lax

from .._custom_types import Array, Int
from .base import AbstractIntegrator
from .composition import AbstractSubSteps


class _AbstractEqualSubsteps(AbstractSubSteps):
    """Equal sub-steps of a base method: its order and symmetry (`Substeps`, `RuntimeSubsteps`)."""

    @property
    def order(self) -> int:
        return self.integrator.order

    @property
    def is_symmetric(self) -> bool:
        return self.integrator.is_symmetric


class Substeps(_AbstractEqualSubsteps):
    """`integrator` taking `count` steps of h / count per step of h.

    The method has the base's order p, its symmetry and what it admits (inertia, forces); its
    global error is the base's at step h / count, count^p times smaller at count times the cost.
    Forces and controls are evaluated by the base at each sub-step's time (a control u_k held
    over the step is held over all its sub-steps). The sub-steps are one compiled step, looped:
    the compile time does not grow with `count`.

    **Arguments:**

    - `integrator`: the base method (any `AbstractIntegrator`, e.g. a `Composition`).
    - `count`: sub-steps per step, ≥ 1.
    """

    integrator: AbstractIntegrator
    count: int
    max_unrolled: ClassVar[int] = 1

    def __check_init__(self):
        if not isinstance(self.integrator, AbstractIntegrator):
            raise TypeError(f"Substeps refines an s2jax integrator; got {self.integrator!r}")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"Substeps needs count ≥ 1 (an int); got {self.count!r}")

    @property
    def weights(self) -> tuple[float, ...]:
        return (1.0 / self.count,) * self.count


class RuntimeSubsteps(_AbstractEqualSubsteps):
    """`Substeps` whose `count` is a value of the program (an integer array), not part of its
    shape: the sub-steps are a `lax.fori_loop` of `count` trips, so one compiled program serves
    every count, and each count takes the same arithmetic as `Substeps(integrator, count)`.

    Private, and for forward mode only: a loop of traced length has no reverse-mode derivative.
    `s2jax.control.solve` iterates iLQR (whose linearisations are `jax.jacfwd`) on it, so that
    refining a problem's sub-steps to meet its fidelity does not compile the iterations again.
    """

    integrator: AbstractIntegrator
    count: Int[Array, ""]
    max_unrolled: ClassVar[int] = 0

    @property
    def weights(self) -> tuple[float, ...]:
        raise TypeError("RuntimeSubsteps' count is a value of the program: it has no tuple of weights")

    def sub_steps(self, sub_step, carry, dt):
        dtype = jnp.result_type(dt)
        weight = jnp.ones((), dtype) / self.count.astype(dtype)  # 1/count, as Substeps' weights
        return lax.fori_loop(0, self.count, lambda _, carry: sub_step(carry, weight)[0], carry)


def sub_stepped(integrator: AbstractIntegrator, count) -> AbstractIntegrator:
    """`integrator` taking `count` equal sub-steps per step: `RuntimeSubsteps` for a count that is
    an integer array (a value of the program, forward mode only), else `Substeps`, or `integrator`
    itself for a count of 1."""
    if eqx.is_array(count):
        return RuntimeSubsteps(integrator, count)
    return integrator if count == 1 else Substeps(integrator, count)
