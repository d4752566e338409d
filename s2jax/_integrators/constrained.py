"""Störmer–Verlet and RATTLE on the embedded equations of point masses on spheres (004 §VI).

Each body is a point x = q_i of ℝ³ with velocity v = q̇_i = ω_i × q_i and mass m = M_ii (a point
mass m at radius r has M_ii = m r² in the unit-vector variable q), under the force
F_i = −∂V/∂q_i. 004's (25)–(26) are written for one body on the unit sphere under gravity;
with m → M_ii and −m g e₃ → F_i they read, body by body, in velocity form,

    ẋ = v,   m v̇ = f(x, v) = F − (x·F) x − m |v|² x.                                (25)–(26)

This is the index reduction of m ẍ = F − λ x, |x|² = 1: differentiating the constraint twice
at |x| = 1 gives λ = x·F + m |v|². The manifold {|x| = 1, x·v = 0} is invariant, but (26) is
not projected onto it: off it, a = |x|² − 1 and b = x·v obey ȧ = 2b, ḃ = −(κ/m) a with

    κ = m |v|² + x·F,

the magnitude of the constraint force −κ x. Deviations oscillate where κ > 0 (the link is in
tension, as for a hanging pendulum; a κ that varies along the motion can still pump them) and
grow like exp(√(2|κ|/m) t) where κ < 0 (the constraint pushes outward: a slow pendulum above
the equator). κ depends on ∂V/∂q off the sphere, through x·F.

**Störmer–Verlet ≡ RATTLE on the manifold.** One step of the generalised Störmer–Verlet
method below from |x_n| = 1, x_n·v_n = 0 gives, with x_n·f(x_n, ·) = −m |v_{n+1/2}|²,

    x_n·v_{n+1/2} = −h/2 |v_{n+1/2}|²,   |x_{n+1}|² = 1 + 2h x_n·v_{n+1/2} + h² |v_{n+1/2}|² = 1,
    x_{n+1}·v_{n+1} = x_n·v_{n+1/2} + h |v_{n+1/2}|² − h/2 |v_{n+1/2}|² = 0,

exactly: the step stays on the manifold, with the multipliers λ_n = x_n·F_n + m|v_{n+1/2}|²,
μ_n = x_{n+1}·F_{n+1} + m|v_{n+1/2}|², which solve RATTLE's constraint equations (the small
root). In exact arithmetic the two methods are one map; they differ only in floating point,
where RATTLE re-imposes the constraints every step and Störmer–Verlet carries the round-off
of |x| and x·v with the dynamics of a, b above (measured in `StormerVerlet`).

**Doubts about 004 §VI–VII.** (1) The first Störmer–Verlet equation is called "linearly
implicit"; through |p_{n+1/2}|² it is quadratic, a scalar quadratic per body solved here in
closed form. (2) RATTLE's "nonlinear solve of dimension equal to the number of constraints"
is, for spheres and a diagonal M, one scalar quadratic per body, also solved in closed form,
so its cost does not grow faster than n. (3) By the identity above, the reported gap between
Störmer–Verlet (|x| to 10⁻¹¹) and RATTLE (10⁻⁷) cannot come from the methods; 10⁻⁷ looks like
the tolerance of the nonlinear solver 004 used. Here RATTLE holds |x| = 1 to ~10⁻¹⁶. (4) (26)
is written for r = 1 although §VII uses r = 9.8 m; here the radius is inside M_ii and V.

Both integrators keep v (the velocity in ℝ³) in their state and ignore the incoming ω, as
`VariationalIntegrator` keeps its impulse: v's normal component x·v, nonzero off the manifold,
is part of Störmer–Verlet's state and cannot be rebuilt from an ω with ω × x = v. The ω they
return is x × v / |x|², the angular velocity of v's component tangent to the sphere through x.
"""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp

from .._custom_types import Array, Float
from .._geometry import dot
from .._results import RESULTS
from .base import AbstractIntegrator, check_finite


class EmbeddedState(eqx.Module):
    velocity: Float[Array, "n 3"]  # v_k = q̇_k in ℝ³
    potential_force: Float[Array, "n 3"]  # −∂V/∂q at the current configuration


def _init(system, y0, args):
    q, omega = y0
    return EmbeddedState(jnp.cross(omega, q), -system.potential_gradient(q, args))


def _angular_velocity(x, v):
    """ω with ω × x = v − (x·v/|x|²) x, the tangential part of v."""
    return jnp.cross(x, v) / dot(x, x)[:, None]


def _finish(x, v, potential_force, slack):
    """The new (y, state, result): `slack` ≥ 0 where the step's quadratics have real roots."""
    omega = _angular_velocity(x, v)
    result = RESULTS.where(jnp.all(slack >= 0), RESULTS.successful, RESULTS.step_too_large)
    result = check_finite(result, x, omega, v)
    return (x, omega), EmbeddedState(v, potential_force), result


class _AbstractEmbedded(AbstractIntegrator):
    """A method on the embedded equations (25)–(26), with v in its state (see the module docstring).

    A non-conservative force f enters F = −∂V/∂q + f; it is evaluated at (t_n, x_n) and
    (t_{n+1}, x_{n+1}) with ω from the velocity in the state, so it may not depend on ω.
    """

    order: ClassVar[int] = 2
    is_symmetric: ClassVar[bool] = True
    requires_diagonal_inertia: ClassVar[bool] = True
    velocity_dependent_forces: ClassVar[bool] = False

    def init(self, system, t0, y0, args):
        return _init(system, y0, args)


class StormerVerlet(_AbstractEmbedded):
    """The generalised Störmer–Verlet method (Hairer–Lubich–Wanner (3.4)) on 004's (25)–(26).

    With f the index-reduced force of the module docstring, m = M_ii and G = F − (x·F) x,

        v_{n+1/2} = v_n + h/(2m) f(x_n, v_{n+1/2}),
        x_{n+1}   = x_n + h v_{n+1/2},
        v_{n+1}   = v_{n+1/2} + h/(2m) f(x_{n+1}, v_{n+1/2}),

    004's scheme after (26) with p = m v. The first equation is implicit only through
    s = |v_{n+1/2}|²: with c = v_n + h/(2m) G(x_n), v_{n+1/2} = c − (h/2) s x_n and s solves

        (h²/4)|x_n|² s² − (1 + h c·x_n) s + |c|² = 0,

    whose root s = 2|c|² / (β + √(β² − h²|x_n|²|c|²)), β = 1 + h c·x_n, tends to |c|² as h → 0.
    A negative discriminant or β ≤ 0 (only for steps far beyond the method's stability) gives
    `RESULTS.step_too_large`. The step is explicit otherwise: one gradient of V per step.

    **Unit length.** The step does not impose |q_i| = 1 (the module docstring shows it keeps
    the manifold in exact arithmetic, and is then RATTLE), so |q_i| − 1 carries round-off with
    the linearised dynamics ä = −(2κ/m) a. Measured in float64
    (`tests/test_hamel_and_constrained.py`), max_k ||q_k| − 1|:

    - 004 §VII's hanging pendulum (κ > 0), 10⁴ steps of 0.2 s: 4.2e-15, round-off (004: 1e-11);
    - a pendulum released at rest 0.1 rad from upright (κ < 0 near the top of each swing),
      600 steps of 0.05 s: 7e-5, growing ~30× per swing until the step fails;
    - three particles coupled by k Σ (q_i·q_j)² under gravity, steps of 0.05: with V's
      quartic extension (x·F < 0 at times) 7e-11 after 400 steps, 3e-6 after 800, and at step
      1184 the quadratic for |v_{n+1/2}|² has no real root (`RESULTS.step_too_large`); with V
      written through q_i/|q_i| (x·F = 0, κ = m|v|² > 0) still 3.8e-6 after 10⁴ steps.

    Use `Rattle` unless the constraint force is known to be a tension throughout.
    """

    def step(self, system, t0, dt, y, args, state):
        x, omega = y  # v is carried exactly as `state.velocity`, see the module docstring
        v = state.velocity
        mass = jnp.diag(system.inertia(x, args))[:, None]
        force = system.generalized_force(t0, x, omega, args, state.potential_force)
        xx = dot(x, x)[:, None]
        tangential = force - dot(x, force)[:, None] * x
        c = v + 0.5 * dt / mass * tangential
        cc = dot(c, c)[:, None]
        beta = 1.0 + dt * dot(c, x)[:, None]
        discriminant = beta**2 - dt**2 * xx * cc
        speed2 = 2.0 * cc / (beta + jnp.sqrt(jnp.maximum(discriminant, 0.0)))
        v_half = c - 0.5 * dt * speed2 * x
        x_next = x + dt * v_half
        potential_next = -system.potential_gradient(x_next, args)
        force_next = system.generalized_force(t0 + dt, x_next, omega, args, potential_next)
        tangential_next = force_next - dot(x_next, force_next)[:, None] * x_next
        v_next = v_half + 0.5 * dt / mass * (
            tangential_next - mass * dot(v_half, v_half)[:, None] * x_next
        )
        slack = jnp.minimum(discriminant, beta)
        return _finish(x_next, v_next, potential_next, slack)


class Rattle(_AbstractEmbedded):
    """RATTLE (Hairer–Lubich–Wanner (1.26), 004 §VI) with the constraints |q_i|² = 1.

    With m = M_ii, body by body,

        v_{n+1/2} = v_n + h/(2m) (F(x_n) − λ_n x_n),
        x_{n+1}   = x_n + h v_{n+1/2},                  |x_{n+1}|² = 1,
        v_{n+1}   = v_{n+1/2} + h/(2m) (F(x_{n+1}) − μ_n x_{n+1}),   x_{n+1}·v_{n+1} = 0.

    Both multipliers are in closed form (004 writes φ = ½(|x|² − 1), Φ = xᵀ). With
    d = h v_n + h²/(2m) F(x_n) and y = h²/(2m) λ_n, x_{n+1} = x_n + d − y x_n and the position
    constraint is the quadratic |x_n|² y² − 2 (c·x_n) y + γ = 0, c = x_n + d,
    γ = |c|² − 1 = (|x_n|² − 1) + 2 x_n·d + |d|² (written so to avoid cancellation), whose small
    root y = γ / (c·x_n + √((c·x_n)² − |x_n|² γ)) is the one that tends to 0 with h (the other
    is O(1) and throws x through the sphere). μ_n makes v_{n+1} the projection of
    v_{n+1/2} + h/(2m) F(x_{n+1}) onto the plane ⊥ x_{n+1}. A negative discriminant or
    c·x_n ≤ 0 means no such x_{n+1} near x_n: `RESULTS.step_too_large`.

    The constraints are solved from scratch every step, so |q_i| − 1 and q_i·v_i stay at the
    round-off of one step (~1e-16) however long the run; the energy error is O(h²) and
    bounded, as for `StormerVerlet` (the same map up to round-off, see the module docstring).
    """

    def step(self, system, t0, dt, y, args, state):
        x, omega = y  # v is carried as `state.velocity`, see the module docstring
        v = state.velocity
        mass = jnp.diag(system.inertia(x, args))[:, None]
        force = system.generalized_force(t0, x, omega, args, state.potential_force)
        xx = dot(x, x)[:, None]
        d = dt * v + 0.5 * dt**2 / mass * force
        cx = xx + dot(x, d)[:, None]
        gamma = (xx - 1.0) + 2.0 * dot(x, d)[:, None] + dot(d, d)[:, None]
        discriminant = cx**2 - xx * gamma
        y = gamma / (cx + jnp.sqrt(jnp.maximum(discriminant, 0.0)))
        x_next = x + d - y * x
        v_half = v + 0.5 * dt / mass * force - y / dt * x
        potential_next = -system.potential_gradient(x_next, args)
        force_next = system.generalized_force(t0 + dt, x_next, omega, args, potential_next)
        u = v_half + 0.5 * dt / mass * force_next
        v_next = u - (dot(x_next, u) / dot(x_next, x_next))[:, None] * x_next
        slack = jnp.minimum(discriminant, cx)
        return _finish(x_next, v_next, potential_next, slack)
