"""Higher order by symmetric composition (002 §3.4): Yoshida's triple jump."""

from .._results import RESULTS
from .base import AbstractIntegrator


def triple_jump_weights(order: int) -> tuple[float, ...]:
    """Sub-step weights of the recursive triple jump raising a symmetric order-2 method to `order`.

    From order p to p + 2: γ₁ = 1/(2 − 2^{1/(p+1)}), γ₂ = 1 − 2γ₁, steps γ₁h, γ₂h, γ₁h
    (Yoshida 1990; γ₂ < 0, a backward sub-step). Order 4 takes 3 sub-steps, order 6 takes 9.
    """
    weights = (1.0,)
    for p in range(2, order, 2):
        outer = 1.0 / (2.0 - 2.0 ** (1.0 / (p + 1)))
        inner = 1.0 - 2.0 * outer
        weights = tuple(w * g for g in (outer, inner, outer) for w in weights)
    return weights


class Composition(AbstractIntegrator):
    """A symmetric second-order integrator composed to order 4 or 6 (002 §3.4).

    Each step applies `integrator` with the sub-steps of `triple_jump_weights(order)`. With the
    `VariationalIntegrator` (or `ExplicitVariationalIntegrator`) the result is again a
    variational, symplectic integrator that keeps |q_i| = 1 to round-off. The base
    integrator must be symmetric (the VIs are; Runge–Kutta baselines are not, and
    composing them does not raise their order this way).

    **Arguments:**

    - `integrator`: the symmetric second-order base method.
    - `order`: 4 or 6.
    """

    integrator: AbstractIntegrator
    order: int = 4

    def __check_init__(self):
        if self.order not in (4, 6):
            raise ValueError(f"Composition supports order 4 or 6, got {self.order}")
        if not (self.integrator.is_symmetric and self.integrator.order == 2):
            raise ValueError(
                "Composition raises the order of a symmetric second-order method; "
                f"{type(self.integrator).__name__} is not one"
            )

    @property
    def is_symmetric(self) -> bool:
        return True  # the triple jump is palindromic and its base method symmetric

    @property
    def requires_diagonal_inertia(self) -> bool:
        return self.integrator.requires_diagonal_inertia

    @property
    def velocity_dependent_forces(self) -> bool:
        return self.integrator.velocity_dependent_forces

    def init(self, system, t0, y0, args):
        return self.integrator.init(system, t0, y0, args)

    def step(self, system, t0, dt, y, args, state):
        result = RESULTS.successful
        t = t0
        for weight in triple_jump_weights(self.order):
            y, state, sub_result = self.integrator.step(system, t, weight * dt, y, args, state)
            t = t + weight * dt
            result = RESULTS.where(result == RESULTS.successful, sub_result, result)
        return y, state, result
