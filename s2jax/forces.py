"""Ready-made generalized forces (001 (10)–(11)); pass one to `simulate(..., force=...)`."""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp

from ._custom_types import Array, Float
from ._force import AbstractForce


class LinearDamping(AbstractForce):
    """Viscous damping of every body's velocity, f_i = −c_i q̇_i = −c_i ω_i × q_i.

    Its power Σ_i f_i·q̇_i = −Σ_i c_i |q̇_i|² ≤ 0, so the energy decreases. The force depends on
    ω: the variational integrators solve their velocity update (3.13) for it by Newton's
    method, and `ReversibleAdjoint` does not take it.

    **Arguments:**

    - `coefficient`: c ≥ 0, a scalar or one value per body (shape (n,)); in the units of
      M_ij per second (for a point mass m on a link of length l, c = b l² damps the bob's
      velocity with the force −b v).
    """

    coefficient: Float[Array, "*n"] = eqx.field(converter=jnp.asarray)

    depends_on_velocity: ClassVar[bool] = True

    def __call__(self, t, q, omega, u, params):
        c = jnp.broadcast_to(self.coefficient, q.shape[:1])[:, None]
        return -c * jnp.cross(omega, q)
