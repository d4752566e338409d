"""Step refinement: any integrator taking several equal sub-steps per step.

A controlled system is driven by controls held over each step h (zero-order hold), so h is the
control's period as well as the integrator's step. `Substeps(integrator, count)` keeps the first
and shrinks the second: the error of an order-p method falls by count^p on the same control grid
(`s2jax.control.solve` uses it to meet a `Problem`'s `fidelity`).
"""

from typing import ClassVar

from .base import AbstractIntegrator
from .composition import AbstractSubSteps


class Substeps(AbstractSubSteps):
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
    def order(self) -> int:
        return self.integrator.order

    @property
    def is_symmetric(self) -> bool:
        return self.integrator.is_symmetric

    @property
    def weights(self) -> tuple[float, ...]:
        return (1.0 / self.count,) * self.count
