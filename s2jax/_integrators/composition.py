"""Higher order by symmetric composition (002 §3.4): Yoshida's triple jump, and Kahan and Li's
compositions with smaller error constants.

The weights and which base method to take: docs/integrators/composition.md.
"""

import abc
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jax import lax

from .._results import RESULTS
from .base import AbstractIntegrator

# Kahan & Li, Math. Comp. 66 (1997) 1089–1099, methods s9odr6a and s17odr8a, as printed in Hairer,
# Lubich & Wanner, Geometric Numerical Integration (2006), §V.3.2, (3.12) and (3.14): the first
# half of a palindrome of 9 and 17 sub-steps (the middle weight last).
_KAHAN_LI_HALVES = {
    6: (
        0.39216144400731413927925056,
        0.33259913678935943859974864,
        -0.70624617255763935980996482,
        0.08221359629355080023149045,
        0.79854399093482996339895035,
    ),
    8: (
        0.13020248308889008087881763,
        0.56116298177510838456196441,
        -0.38947496264484728640807860,
        0.15884190655515560089621075,
        -0.39590389413323757733623154,
        0.18453964097831570709183254,
        0.25837438768632204729397911,
        0.29501172360931029887096624,
        -0.60550853383003451169892108,
    ),
}


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


def kahan_li_weights(order: int) -> tuple[float, ...]:
    """Sub-step weights of Kahan and Li's symmetric compositions: order 6 in 9 sub-steps
    (s9odr6a), order 8 in 17 (s17odr8a).

    Chosen among the solutions of the order conditions for small error coefficients: at equal
    cost they are far more accurate than the triple jump of the same order (Hairer–Lubich–Wanner
    §V.3.2, Fig. 3.2), whose order 6 also takes 9 sub-steps.
    """
    half = _KAHAN_LI_HALVES[order]
    return half + half[-2::-1]


_WEIGHTS = {"triple_jump": (triple_jump_weights, (4, 6)), "kahan_li": (kahan_li_weights, (6, 8))}


class AbstractSubSteps(AbstractIntegrator):
    """A step of h made of sub-steps γ_1 h, …, γ_s h (Σγ = 1) of a base `integrator`: what
    `Composition` and `Substeps` share. A subclass gives the `weights` and its order and
    symmetry; the sub-steps are unrolled up to `max_unrolled` of them, else looped."""

    integrator: eqx.AbstractVar[AbstractIntegrator]
    max_unrolled: eqx.AbstractClassVar[int]

    @property
    @abc.abstractmethod
    def weights(self) -> tuple[float, ...]:
        """The sub-step weights γ_1, …, γ_s of one step."""

    @property
    def system_type(self) -> type:
        return self.integrator.system_type

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
        # Lazy sub-steps (`AbstractIntegrator.lazy_step`): the VI solves (3.13) for ω once per
        # step, not once per sub-step.
        def sub_step(carry, weight):
            t, y, state, result = carry
            y, state, sub_result = self.integrator.lazy_step(system, t, weight * dt, y, args, state)
            result = RESULTS.where(result == RESULTS.successful, sub_result, result)
            return (t + weight * dt, y, state, result), None

        _, y, state, result = self.sub_steps(sub_step, (t0, y, state, RESULTS.successful), dt)
        return y, state, result

    def sub_steps(self, sub_step, carry, dt):
        """`carry` through `sub_step(carry, γ_j) -> (carry, None)` for each weight γ_j."""
        weights = self.weights
        if len(weights) <= self.max_unrolled:
            for weight in weights:
                carry, _ = sub_step(carry, weight)
            return carry
        # One compiled sub-step looped over the weights: 9 or 17 unrolled implicit steps
        # compile for minutes, and a loop trip costs little beside a sub-step.
        carry, _ = lax.scan(sub_step, carry, jnp.asarray(weights, dtype=jnp.result_type(dt)))
        return carry


class Composition(AbstractSubSteps):
    """A symmetric second-order integrator composed to order 4, 6 or 8 (002 §3.4).

    Each step applies `integrator` with sub-steps γ_1 h, …, γ_s h, a palindrome of weights with
    Σγ = 1 that satisfies the order conditions of a symmetric composition: Yoshida's triple jump
    (`triple_jump_weights`, the composition of 002 §3.4) or Kahan and Li's (`kahan_li_weights`).
    With the `VariationalIntegrator` (or `ExplicitVariationalIntegrator`) the result is again a
    variational, symplectic integrator that keeps |q_i| = 1 to round-off. The base
    integrator must be symmetric (the VIs are; Runge–Kutta baselines are not, and
    composing them does not raise their order this way).

    **Arguments:**

    - `integrator`: the symmetric second-order base method.
    - `order`: 4 or 6 for `"triple_jump"` (3 and 9 sub-steps), 6 or 8 for `"kahan_li"` (9 and 17).
    - `method`: `"triple_jump"` (default, 002 §3.4) or `"kahan_li"` (smaller errors at the same
      cost; the choice for long, accurate runs).
    """

    integrator: AbstractIntegrator
    order: int = 4
    method: str = "triple_jump"
    max_unrolled: ClassVar[int] = 3

    def __check_init__(self):
        if self.method not in _WEIGHTS:
            raise ValueError(f"Composition method must be one of {sorted(_WEIGHTS)}, got {self.method!r}")
        orders = _WEIGHTS[self.method][1]
        if self.order not in orders:
            raise ValueError(
                f"Composition method {self.method!r} supports order {orders[0]} or {orders[1]}, got {self.order}"
            )
        if not (self.integrator.is_symmetric and self.integrator.order == 2):
            raise ValueError(
                "Composition raises the order of a symmetric second-order method; "
                f"{type(self.integrator).__name__} is not one"
            )

    @property
    def is_symmetric(self) -> bool:
        return True  # the weights are palindromic and the base method symmetric

    @property
    def weights(self) -> tuple[float, ...]:
        """The sub-step weights γ_1, …, γ_s of one step."""
        return _WEIGHTS[self.method][0](self.order)
