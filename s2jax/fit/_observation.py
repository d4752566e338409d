"""What `fit` compares with the data: a function of one time's state (q, ω) and the params.

Any `observe(q, omega, params) -> array` works (compared by value, so an equal function rebuilt
does not compile again). `Directions`, `Positions` and `PolarAngles` are the common ones.
"""


import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .._custom_types import Array, Float, Params


def _indices(bodies) -> tuple[int, ...]:
    bodies = tuple(int(i) for i in np.atleast_1d(np.asarray(bodies)))
    if not bodies or len(set(bodies)) != len(bodies) or min(bodies) < 0:
        raise ValueError(f"bodies must be distinct non-negative body indices; got {bodies}")
    return bodies


class Directions(eqx.Module):
    """The unit vectors q_i of `bodies`, shape (b, 3): a camera or an inertial sensor's attitude.

    Noisy directions q̃ = q + ε are not renormalised: then the noise along the radius, |q̃| − 1,
    tells `fit` the noise level without the residuals (`FitResult.reduced_chi_squared`).
    """

    bodies: tuple[int, ...] = eqx.field(static=True, converter=_indices)

    def __call__(self, q: Float[Array, "n 3"], omega: Float[Array, "n 3"], params: Params) -> Float[Array, "b 3"]:
        return q[np.asarray(self.bodies)]


class Positions(eqx.Module):
    """The positions x_k = Σ_{i ≤ k} l_i q_i of `bodies` of a chain hanging from the origin, shape (b, 3).

    `lengths` gives l_1 … l_n: each a key of params (so a fitted length moves the positions) or a
    number. Marker positions from motion capture are of this kind.
    """

    bodies: tuple[int, ...] = eqx.field(static=True, converter=_indices)
    lengths: tuple = eqx.field(static=True, converter=lambda v: tuple(x if isinstance(x, str) else float(x) for x in v))

    def __check_init__(self):
        if max(self.bodies) >= len(self.lengths):
            raise ValueError(
                f"Positions: body {max(self.bodies)} needs {max(self.bodies) + 1} lengths; got {self.lengths}"
            )

    def __call__(self, q, omega, params) -> Float[Array, "b 3"]:
        count = max(self.bodies) + 1
        lengths = jnp.stack(
            [jnp.asarray(params[x] if isinstance(x, str) else x, q.dtype) for x in self.lengths[:count]]
        )
        return jnp.cumsum(lengths[:, None] * q[:count], axis=0)[np.asarray(self.bodies)]


class PolarAngles(eqx.Module):
    """The angles between q_i of `bodies` and `axis` (default the downward vertical −e₃), in
    radians, shape (b,): a joint encoder's reading of a pendulum's swing.

    Computed as atan2(|q × a|, q · a), accurate at every angle; its derivative is singular where
    q = ±a (a body exactly on the axis), so data that sit there are better fitted as `Directions`.
    """

    bodies: tuple[int, ...] = eqx.field(static=True, converter=_indices)
    axis: tuple[float, float, float] = eqx.field(static=True, default=(0.0, 0.0, -1.0))

    def __check_init__(self):
        if len(self.axis) != 3 or not np.isclose(np.linalg.norm(self.axis), 1.0):
            raise ValueError(f"PolarAngles: axis must be a unit vector of 3 numbers; got {self.axis}")

    def __call__(self, q, omega, params) -> Float[Array, " b"]:
        axis = jnp.asarray(self.axis, q.dtype)
        selected = q[np.asarray(self.bodies)]
        return jnp.arctan2(jnp.linalg.norm(jnp.cross(selected, axis), axis=-1), selected @ axis)


def largest_body(observe) -> int | None:
    """The largest body index a built-in observation reads (to check it against n), else None."""
    bodies = getattr(observe, "bodies", None)
    return max(bodies) if isinstance(observe, (Directions, Positions, PolarAngles)) else None

