"""Generalized forces on (S²)ⁿ: the f_i of Lee–Leok–McClamroch 2015 (001) (10)–(11).

A force is conjugate to δq_i: its virtual work is Σ_i f_i·δq_i, so a torque u on body i about
its pivot is f_i = u × q_i, and a force F at the point Σ_{j ≤ k} l_j q_j adds l_j F to each
f_j, j ≤ k (papers/README.md, the last slip of 001 §V). Only the tangential part of f_i acts:
it enters the equations of motion as q_i × f_i (001 (17), (19); 002 (2.11) with −∂V/∂q → f).
"""

import abc
from collections.abc import Callable

import equinox as eqx

from ._by_value import by_value
from ._custom_types import Array, Float, Params


class AbstractForce(eqx.Module):
    """A generalized force f(t, q, ω, u, params) on (S²)ⁿ, shape (n, 3), in ℝ³ per body.

    `u` is the control held over the current step (None when the run has no controls).
    `depends_on_velocity` declares whether f depends on ω: a force that does (damping) makes
    the update of ω in a variational step implicit, and breaks the step's reversibility.
    """

    depends_on_velocity: eqx.AbstractVar[bool]

    @abc.abstractmethod
    def __call__(
        self,
        t: Float[Array, ""],
        q: Float[Array, "n 3"],
        omega: Float[Array, "n 3"],
        u,
        params: Params,
    ) -> Float[Array, "n 3"]:
        """The generalized force f_i on each body, shape (n, 3)."""

    def __add__(self, other: "AbstractForce") -> "SumOfForces":
        """The sum of two forces: their generalized forces add (so do their virtual works)."""
        if not isinstance(other, AbstractForce):
            return NotImplemented
        return SumOfForces((self, other))


class SumOfForces(AbstractForce):
    """f = Σ f⁽ᵏ⁾: several forces on the same system, each given the same (t, q, ω, u, params)."""

    forces: tuple[AbstractForce, ...]

    @property
    def depends_on_velocity(self) -> bool:
        return any(force.depends_on_velocity for force in self.forces)

    def __call__(self, t, q, omega, u, params):
        total = self.forces[0](t, q, omega, u, params)
        for force in self.forces[1:]:
            total = total + force(t, q, omega, u, params)
        return total

    def __add__(self, other):
        if not isinstance(other, AbstractForce):
            return NotImplemented
        return SumOfForces((*self.forces, other))


class Force(AbstractForce):
    """A user function `fn(t, q, omega, u, params) -> (n, 3)` as a generalized force.

    **Arguments:**

    - `fn`: the force, a pure JAX function. Compared by value: another function of the same code,
      defaults, closure values and globals read makes an equal `Force`.
    - `depends_on_velocity`: whether `fn` reads `omega`. The default, True, is always correct;
      False lets the variational integrators keep an explicit velocity update (and the
      reversible adjoint), and is only right when `fn` ignores `omega`.
    """

    # Compared by value (`_by_value`): a Force rebuilt from an equal new lambda does not compile
    # the program that runs it again.
    fn: Callable = eqx.field(converter=by_value)
    depends_on_velocity: bool = True

    def __call__(self, t, q, omega, u, params):
        return self.fn(t, q, omega, u, params)
