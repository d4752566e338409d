"""Step refinement: any integrator taking several equal sub-steps per step.

A controlled system is driven by controls held over each step h (zero-order hold), so h is the
control's period as well as the integrator's step. `Substeps(integrator, count)` keeps the first
and shrinks the second: the error of an order-p method falls by count^p on the same control grid
(`s2jax.control.solve` uses it to meet a `Problem`'s `fidelity`).
"""

from jax import lax

from .._results import RESULTS
from .base import AbstractIntegrator


class Substeps(AbstractIntegrator):
    """`integrator` taking `count` steps of h / count per step of h.

    The method has the base's order p, its symmetry and what it admits (inertia, forces); its
    global error is the base's at step h / count, (count)^p times smaller at count times the cost.
    Forces and controls are evaluated by the base at each sub-step's time (a control u_k held
    over the step is held over all its sub-steps).

    **Arguments:**

    - `integrator`: the base method (any `AbstractIntegrator`, e.g. a `Composition`).
    - `count`: sub-steps per step, ≥ 1.
    """

    integrator: AbstractIntegrator
    count: int

    def __check_init__(self):
        if not isinstance(self.integrator, AbstractIntegrator):
            raise TypeError(f"Substeps refines an s2jax integrator; got {self.integrator!r}")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"Substeps needs count ≥ 1 (an int); got {self.count!r}")

    @property
    def system_type(self) -> type:
        return self.integrator.system_type

    @property
    def order(self) -> int:
        return self.integrator.order

    @property
    def is_symmetric(self) -> bool:
        return self.integrator.is_symmetric

    @property
    def requires_diagonal_inertia(self) -> bool:
        return self.integrator.requires_diagonal_inertia

    @property
    def velocity_dependent_forces(self) -> bool:
        return self.integrator.velocity_dependent_forces

    def init(self, system, t0, y0, args):
        return self.integrator.init(system, t0, y0, args)

    def step(self, system, t0, dt, y, args, state):
        y, state, result = self.lazy_step(system, t0, dt, y, args, state)
        return (y[0], self.integrator.velocity(system, y, args, state)), state, result

    def velocity(self, system, y, args, state):
        return self.integrator.velocity(system, y, args, state)

    def lazy_step(self, system, t0, dt, y, args, state):
        # Lazy sub-steps, as in `Composition`: a VI solves (3.13) for ω once per step.
        h = dt / self.count

        def sub_step(carry, _):
            t, y, state, result = carry
            y, state, sub_result = self.integrator.lazy_step(system, t, h, y, args, state)
            result = RESULTS.where(result == RESULTS.successful, sub_result, result)
            return (t + h, y, state, result), None

        carry = (t0, y, state, RESULTS.successful)
        if self.count == 1:
            carry, _ = sub_step(carry, None)
        else:  # one compiled sub-step, looped: compile time independent of count
            carry, _ = lax.scan(sub_step, carry, length=self.count)
        _, y, state, result = carry
        return y, state, result
