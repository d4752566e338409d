"""The interface every s2jax integrator implements; `simulate` owns the loop."""

import abc
from typing import Any

import equinox as eqx
import jax.numpy as jnp

from .._custom_types import Array, Float, Params
from .._results import RESULTS
from .._system import LagrangianSystem

IntegratorState = Any


class AbstractIntegrator(eqx.Module):
    """A one-step method on T(S²)ⁿ in the (q, ω) variables of 002 (2.9)–(2.10).

    `init` computes what the steps share (the inertia matrix M, a cached force); `step` maps
    (q_k, ω_k) to (q_{k+1}, ω_{k+1}) and returns a `RESULTS` code. Steps never renormalise q.
    """

    requires_diagonal_inertia: eqx.AbstractClassVar[bool]

    @abc.abstractmethod
    def init(
        self,
        system: LagrangianSystem,
        q: Float[Array, "n 3"],
        omega: Float[Array, "n 3"],
        params: Params,
        dt: Float[Array, ""],
    ) -> IntegratorState:
        """The integrator's state before the first step."""

    @abc.abstractmethod
    def step(
        self,
        system: LagrangianSystem,
        q: Float[Array, "n 3"],
        omega: Float[Array, "n 3"],
        params: Params,
        dt: Float[Array, ""],
        state: IntegratorState,
    ) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"], IntegratorState, RESULTS]:
        """One step of size dt: `(q_next, omega_next, state_next, result)`."""


def check_finite(result: RESULTS, *arrays: Array) -> RESULTS:
    """`result`, or `RESULTS.nonfinite_state` if any of the arrays holds a NaN or inf."""
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in arrays]))
    return RESULTS.where(finite, result, RESULTS.nonfinite_state)
