"""Ready-made generalized forces (001 (10)–(11)); pass one to `simulate(..., force=...)`."""

import numbers
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

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

    def __check_init__(self):
        if isinstance(self.coefficient, jax.core.Tracer):
            return  # traced (e.g. under jax.grad in c): the run's result codes report what follows
        c = np.asarray(self.coefficient)
        bad = ~(np.isfinite(c) & (c >= 0))
        if np.any(bad):
            where = f" (body {int(np.argmax(bad))})" if c.ndim else ""
            raise ValueError(
                f"LinearDamping: the coefficient c must be finite and ≥ 0 (a negative c feeds energy in); "
                f"got {c}{where}"
            )

    def __call__(self, t, q, omega, u, params):
        c = jnp.broadcast_to(self.coefficient, q.shape[:1])[:, None]
        return -c * jnp.cross(omega, q)


def _check_body_index(body, name):
    """`body` must be a Python int ≥ 0 (a negative index would count from the end)."""
    if isinstance(body, bool) or not isinstance(body, numbers.Integral) or body < 0:
        raise ValueError(f"{name}: body must be an int ≥ 0; got {body!r}")


def _check_body_exists(body, n, name):
    """Checked where n is first known, when the force is traced (before compiling): an index past
    the last body would otherwise be dropped by the scatter, or act on every body of a chain."""
    if body >= n:
        raise ValueError(f"{name}(body={body}): there is no body {body}; the system has n = {n} bodies, 0 … {n - 1}")


def _given_or_control(value, u, name):
    if value is not None:
        return value
    if u is None:
        raise ValueError(f"{name}: no fixed value was given, so it reads the control u, but the run has no `controls`")
    return u


class PivotTorque(AbstractForce):
    """A torque τ ∈ ℝ³ on body i about its pivot: the generalized force f_i = τ × q_i.

    Its virtual work is τ·γ_i for the variation δq_i = γ_i × q_i, since (τ × q_i)·(γ_i × q_i) =
    τ·γ_i for τ, γ_i ⊥ q_i: only the part of τ normal to q_i acts (a torque about the link's own
    axis turns nothing on a point mass). With `joint=True` the torque acts between bodies i − 1
    and i (a motor at the joint): body i − 1 takes the reaction, f_{i−1} = −τ × q_{i−1}.

    **Arguments:**

    - `body`: i, the index of the body (0-based).
    - `torque`: a fixed τ (3,), or None (default) to take τ = u, the control of the step.
    - `joint`: whether the reaction acts on body i − 1 (needs i ≥ 1).
    """

    body: int = eqx.field(static=True)
    torque: Float[Array, "3"] | None = None
    joint: bool = eqx.field(default=False, static=True)

    depends_on_velocity: ClassVar[bool] = False

    def __check_init__(self):
        _check_body_index(self.body, "PivotTorque")
        if self.joint and self.body < 1:
            raise ValueError("PivotTorque(joint=True) needs body ≥ 1: the reaction acts on body − 1")

    def __call__(self, t, q, omega, u, params):
        _check_body_exists(self.body, q.shape[0], "PivotTorque")
        torque = jnp.asarray(_given_or_control(self.torque, u, "PivotTorque"))
        if torque.shape != (3,):
            raise ValueError(f"PivotTorque takes a torque of shape (3,); got {torque.shape}")
        # rows selected by a mask, not `.at[body].set`: a scatter, which a batch with the members
        # along the last axis would hand back to `jax.vmap` (`_members_last`); the same values
        rows = jnp.arange(q.shape[0])[:, None]
        force = jnp.where(rows == self.body, jnp.cross(torque, q[self.body])[None, :], 0.0)
        if self.joint:
            force = force - jnp.where(rows == self.body - 1, jnp.cross(torque, q[self.body - 1])[None, :], 0.0)
        return force


class PointForce(AbstractForce):
    """A force F ∈ ℝ³ at the end of body k of a chain: f_j = l_j F for every j ≤ k.

    The point is x_k = Σ_{j≤k} l_j q_j (the k-th mass of `models.chain_pendulum`), so its
    virtual displacement is Σ_{j≤k} l_j δq_j and the virtual work F·δx_k gives f_j = l_j F
    (001 (10); papers/README.md, last slip of 001 §V). For bodies that are not chained (each q_i
    the position of a body on a sphere of radius l_k), pass `chain=False`: f_k = l_k F only.

    **Arguments:**

    - `body`: k, the index of the body whose end F acts at (0-based).
    - `lengths`: l, shape (n,).
    - `force`: a fixed F (3,), or None (default) to take F = u, the control of the step.
    - `chain`: whether the bodies form a chain from a fixed pivot (default True).
    """

    body: int = eqx.field(static=True)
    lengths: Float[Array, " n"] = eqx.field(converter=jnp.asarray)
    force: Float[Array, "3"] | None = None
    chain: bool = eqx.field(default=True, static=True)

    depends_on_velocity: ClassVar[bool] = False

    def __check_init__(self):
        _check_body_index(self.body, "PointForce")

    def __call__(self, t, q, omega, u, params):
        n = q.shape[0]
        _check_body_exists(self.body, n, "PointForce")
        if self.lengths.shape != (n,):
            raise ValueError(f"PointForce: `lengths` has shape {self.lengths.shape}; the system has n = {n} bodies")
        force = jnp.asarray(_given_or_control(self.force, u, "PointForce"))
        if force.shape != (3,):
            raise ValueError(f"PointForce takes a force of shape (3,); got {force.shape}")
        index = jnp.arange(n)
        acts = (index <= self.body) if self.chain else (index == self.body)
        return jnp.where(acts[:, None], self.lengths[:, None] * force[None, :], 0.0)
