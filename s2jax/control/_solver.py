"""The interface of a trajectory-optimisation solver (`AbstractControlSolver`).

`solve` runs a solver's inner minimisations inside the augmented-Lagrangian loop of
`s2jax._optimisation.augmented_lagrangian`, whose docstring describes the rounds.
"""

import abc
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from .._custom_types import Array, Bool, Float, Int
from ._problem import Problem


class AbstractControlSolver(eqx.Module):
    """A solver of `Problem`s: decision variables, an inner minimisation, constraints, controls.

    `max_steps` bounds the inner iterations of each augmented-Lagrangian round.
    """

    max_steps: eqx.AbstractVar[int]
    # Whether the iterations differentiate the dynamics in forward mode only (`jax.jacfwd`), so
    # that they can run sub-steps whose count is a value of the program
    # (`Problem.with_runtime_substeps`): then `solve` compiles them once for every count.
    forward_mode_only: ClassVar[bool] = False

    @abc.abstractmethod
    def init(self, problem: Problem, q0, omega0, controls: Float[Array, "N ..."]):
        """The decision variables for the initial guess `controls` (inside the bounds)."""

    @abc.abstractmethod
    def constraints(self, problem: Problem, q0, omega0, decision) -> Float[Array, " c"]:
        """All equality constraints at `decision`, flattened."""

    @abc.abstractmethod
    def minimise(
        self, problem: Problem, q0, omega0, decision, multipliers: Float[Array, " c"], penalty: Float[Array, ""]
    ) -> tuple[object, Float[Array, " max_steps"], Int[Array, ""], Bool[Array, ""]]:
        """Minimise the augmented objective from `decision`.

        **Returns:** `(decision, objective, num_steps, converged)`: the new decision variables,
        the augmented objective after each iteration (NaN past `num_steps`), the iterations
        taken, and whether the inner tolerance was met.
        """

    @abc.abstractmethod
    def controls(self, problem: Problem, decision) -> Float[Array, "N ..."]:
        """The controls u_0 … u_{N−1} of `decision`."""

    def minimise_with_constraints(
        self, problem: Problem, q0, omega0, decision, multipliers: Float[Array, " c"], penalty: Float[Array, ""]
    ) -> tuple[object, Float[Array, " max_steps"], Int[Array, ""], Bool[Array, ""], Float[Array, " c"]]:
        """`minimise`, and `constraints` at the decision variables it returns (what each round of
        `run_augmented_lagrangian` needs). A solver that ends with that trajectory at hand
        overrides it and skips the rollout of `constraints` (`ILQR`), which would otherwise be
        traced and compiled once more."""
        decision, objective, steps, converged = self.minimise(problem, q0, omega0, decision, multipliers, penalty)
        return decision, objective, steps, converged, self.constraints(problem, q0, omega0, decision)


def as_values(solver: AbstractControlSolver, tolerance: float, dtype) -> tuple[AbstractControlSolver, Array]:
    """`solver` with its float settings (`rtol`, `regularisation`, `penalty`, ...) and the constraint
    `tolerance` as arrays of `dtype`: values of a compiled solve, not part of its key. A Python
    float is static to `equinox.filter_jit`, so each new value compiled the solve again; as
    arrays, new values reuse the program (the ground rule for every value of a run). Integer and
    static settings (`max_steps`) still select a program: they size its loops and arrays."""
    values = jax.tree.map(lambda x: jnp.asarray(x, dtype) if isinstance(x, float) else x, solver)
    return values, jnp.asarray(tolerance, dtype)
