"""Changes of variables from an optimiser's unconstrained unknowns to constrained quantities.

`squash` maps ℝ onto an open box (trajectory optimisation's bounded controls, `Bounded` fitted
parameters). The parameterisations of `s2jax.fit` say how each free parameter θ is written in the
unconstrained x that the optimiser moves: `Positive` (θ = eˣ), `Bounded` (θ = m + r tanh x) and
`Unconstrained` (θ = x). Each is elementwise, so the Jacobian dθ/dx that carries a covariance of x
to one of θ is diagonal (`derivative`).
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._custom_types import Array, ArrayLike, Float


def squash(z, lower, upper):
    """u = m + r tanh(z), m, r the box's centre and half-width: unconstrained z ↦ the open box."""
    return 0.5 * (upper + lower) + 0.5 * (upper - lower) * jnp.tanh(z)


def unsquash(u, lower, upper):
    """The inverse of `squash`, for u strictly inside the box (clipped 1e-9 from its faces)."""
    s = (u - 0.5 * (upper + lower)) / (0.5 * (upper - lower))
    return jnp.arctanh(jnp.clip(s, -1.0 + 1e-9, 1.0 - 1e-9))


class AbstractParameterisation(eqx.Module):
    """How a free parameter θ is written in the unconstrained x an optimiser moves (elementwise)."""

    @abc.abstractmethod
    def to_parameter(self, x: Float[Array, "..."]) -> Float[Array, "..."]:
        """θ(x)."""

    @abc.abstractmethod
    def to_unconstrained(self, theta: Float[Array, "..."]) -> Float[Array, "..."]:
        """x(θ), the inverse of `to_parameter` on its range."""

    @abc.abstractmethod
    def admits(self, theta: np.ndarray) -> np.ndarray:
        """Where θ lies in the range of `to_parameter` (an initial guess must, entry by entry)."""

    @abc.abstractmethod
    def describe(self) -> str:
        """The range, for error messages: "finite and positive"."""

    def derivative(self, x: Float[Array, "..."]) -> Float[Array, "..."]:
        """dθ/dx, entry by entry."""
        return jax.jvp(self.to_parameter, (x,), (jnp.ones_like(x),))[1]


class Positive(AbstractParameterisation):
    """θ = eˣ: a positive parameter (a mass, a length, a stiffness). The default of `fit`."""

    def to_parameter(self, x):
        return jnp.exp(x)

    def to_unconstrained(self, theta):
        return jnp.log(theta)

    def admits(self, theta):
        return (theta > 0) & (theta < np.inf)

    def describe(self):
        return "finite and positive"


class Bounded(AbstractParameterisation):
    """θ = m + r tanh x in the open interval (lower, upper), m and r its centre and half-width.

    A guess must lie strictly inside. Near a bound dθ/dx → 0, and with it the standard error that
    the linearised covariance gives: a fit that ends against a bound is a warning sign, not a
    precise value.
    """

    lower: Float[ArrayLike, "..."]
    upper: Float[ArrayLike, "..."]

    def __check_init__(self):
        lower, upper = np.asarray(self.lower, dtype=float), np.asarray(self.upper, dtype=float)
        if not np.all(np.isfinite(lower) & np.isfinite(upper) & (lower < upper)):
            raise ValueError(f"Bounded needs finite lower < upper; got lower = {self.lower}, upper = {self.upper}")

    def to_parameter(self, x):
        return squash(x, jnp.asarray(self.lower, x.dtype), jnp.asarray(self.upper, x.dtype))

    def to_unconstrained(self, theta):
        return unsquash(theta, jnp.asarray(self.lower, theta.dtype), jnp.asarray(self.upper, theta.dtype))

    def admits(self, theta):
        return (theta > np.asarray(self.lower)) & (theta < np.asarray(self.upper))

    def describe(self):
        return f"strictly between {self.lower} and {self.upper} (Bounded)"


class Unconstrained(AbstractParameterisation):
    """θ = x: a parameter of either sign (an offset, a field component, a bias)."""

    def to_parameter(self, x):
        return x

    def to_unconstrained(self, theta):
        return theta

    def admits(self, theta):
        return np.isfinite(theta)

    def describe(self):
        return "finite"
