"""Lie group integrators on (TS²)ⁿ through the transitive action of SE(3)ⁿ (003).

Celledoni–Çokaj–Leone–Murari–Owren 2021 (003) make (TS²)ⁿ a homogeneous space of SE(3)ⁿ, body by
body through Ψ((A, a), (q, ω)) = (A q, A ω + â A q), whose generator is
Ψ_*((u, v))|_(q, ω) = (û q, û ω + v̂ q). The vector field is ξ(q, ω) = (ω_i, q_i × h_i)_i with
h_i = ω̇_i (003's display after (22); in s2jax `LagrangianSystem.angular_acceleration`, 002 (2.11)).
A step is y₁ = Ψ(exp(θ), y₀) with θ ∈ se(3)ⁿ from ξ at stage points, so |q_i| = 1 and q_i·ω_i = 0
hold to round-off: Lie–Euler, RKMK of order 2, 3, 4 and the commutator-free method of order 4, with
the standard tableaux. Derivation and sources: docs/integrators/lie_group.md.
"""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp

from .._custom_types import Array, Float
from .._geometry import cross, dot
from .._results import RESULTS
from .._system import AbstractSystem
from .base import AbstractIntegrator, check_finite

Algebra = tuple[Float[Array, "n 3"], Float[Array, "n 3"]]
"""An element (u_i, v_i)_i of se(3)ⁿ ≅ (ℝ³ × ℝ³)ⁿ: rotation part u, translation part v."""

# Below θ² = 0.01 the coefficients use their Taylor series (truncation error < 3e-18).
_TAYLOR_THETA2 = 0.01


def _exp_coefficients(theta2):
    """sin θ/θ, (1 − cos θ)/θ², (θ − sin θ)/θ³ as functions of θ², safe at θ = 0.

    The closed forms are evaluated at a dummy θ² = 1 where θ is small (the double-where trick),
    so neither their values nor their gradients there can be NaN.
    """
    small = theta2 < _TAYLOR_THETA2
    safe = jnp.where(small, jnp.ones_like(theta2), theta2)
    theta = jnp.sqrt(safe)
    sin = jnp.sin(theta)
    alpha = sin / theta
    beta = 2.0 * jnp.sin(0.5 * theta) ** 2 / safe  # no cancellation in 1 − cos θ
    gamma = (theta - sin) / (safe * theta)
    t = theta2
    alpha_taylor = 1.0 - t / 6.0 * (1.0 - t / 20.0 * (1.0 - t / 42.0 * (1.0 - t / 72.0)))
    beta_taylor = 0.5 * (1.0 - t / 12.0 * (1.0 - t / 30.0 * (1.0 - t / 56.0 * (1.0 - t / 90.0))))
    gamma_taylor = (1.0 - t / 20.0 * (1.0 - t / 42.0 * (1.0 - t / 72.0 * (1.0 - t / 110.0)))) / 6.0
    return (
        jnp.where(small, alpha_taylor, alpha),
        jnp.where(small, beta_taylor, beta),
        jnp.where(small, gamma_taylor, gamma),
    )


def exp_action(
    xi: Algebra, q: Float[Array, "n 3"], omega: Float[Array, "n 3"]
) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"]]:
    """Ψ(exp(ξ), (q, ω)), the action of 003 of the exponential of ξ = (u_i, v_i)_i ∈ se(3)ⁿ.

    exp((u, v)) = (A, a) with, for θ = |u|, Rodrigues' formula

        A x = x + (sin θ/θ) u × x + ((1 − cos θ)/θ²) u × (u × x),

    and a = V v, V = I + ((1 − cos θ)/θ²) û + ((θ − sin θ)/θ³) û² (the exponential of the
    4 × 4 matrix [[û, v], [0, 0]]). Then (q, ω) ↦ (A q, A ω + a × A q). Written with cross
    products, one body per row; no NaN value or gradient at u = 0.

    **Arguments:**

    - `xi`: the pair (u, v), each of shape (n, 3).
    - `q`, `omega`: the state, shape (n, 3).

    **Returns:** `(q_next, omega_next)`; |q_next_i| = |q_i| and q_next_i·ω_next_i = q_i·ω_i
    to round-off.
    """
    u, v = xi
    alpha, beta, gamma = (c[..., None] for c in _exp_coefficients(dot(u, u)))

    def rotate(x):
        ux = cross(u, x)
        return x + alpha * ux + beta * cross(u, ux)

    uv = cross(u, v)
    translation = v + beta * uv + gamma * cross(u, uv)
    q_next = rotate(q)
    return q_next, rotate(omega) + cross(translation, q_next)


def infinitesimal_generator(
    xi: Algebra, q: Float[Array, "n 3"], omega: Float[Array, "n 3"]
) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"]]:
    """Ψ_*(ξ)|_(q, ω) = (û_i q_i, û_i ω_i + v̂_i q_i)_i of 003 §"Transitive group action"."""
    u, v = xi
    return cross(u, q), cross(u, omega) + cross(v, q)


def bracket(xi: Algebra, eta: Algebra) -> Algebra:
    """The matrix commutator of se(3)ⁿ: [(u₁, v₁), (u₂, v₂)] = (u₁ × u₂, u₁ × v₂ − u₂ × v₁)."""
    u1, v1 = xi
    u2, v2 = eta
    return cross(u1, u2), cross(u1, v2) - cross(u2, v1)


# B_k / k! for k = 1, …, 4: dexp⁻¹_θ = Σ_k (B_k / k!) ad_θ^k with Bernoulli numbers B_k.
_DEXPINV_COEFFICIENTS = (-1.0 / 2.0, 1.0 / 12.0, 0.0, -1.0 / 720.0)


def dexpinv(theta: Algebra, xi: Algebra, truncation: int) -> Algebra:
    """dexp⁻¹_θ(ξ) = ξ − ½[θ, ξ] + 1/12 [θ, [θ, ξ]] − …, up to the ad_θ^k term, k = truncation.

    An RKMK method of order p needs k ≤ p − 2: θ = O(h), so the dropped terms change a stage
    by O(h^{p−1}) and the step by O(h^p) (Munthe-Kaas 1999).
    """
    result = xi
    term = xi
    for coefficient in _DEXPINV_COEFFICIENTS[:truncation]:
        term = bracket(theta, term)
        if coefficient:
            result = tuple(r + coefficient * t for r, t in zip(result, term))
    return result


def se3_vector_field(system, t, q, omega, args) -> Algebra:
    """ξ(t, q, ω) = (ω_i, q_i × h_i)_i, h_i = ω̇_i: the f of 003 §"The equations of motion".

    `Ψ_*(ξ(t, q, ω))|_(q, ω)` equals `system.vector_field(t, q, omega, args)` on (TS²)ⁿ
    (see docs/integrators/lie_group.md for why h_i = ω̇_i is tangent, so (q_i × h_i) × q_i = h_i).
    """
    h = system.angular_acceleration(t, q, omega, args)
    return omega, cross(q, h)


def _combine(dt, weights, elements) -> Algebra | None:
    """dt Σ_j w_j ξ_j over the non-zero weights; None if all are zero."""
    terms = [(w, x) for w, x in zip(weights, elements) if w]
    if not terms:
        return None
    u = dt * sum(w * x[0] for w, x in terms)
    v = dt * sum(w * x[1] for w, x in terms)
    return u, v


def _rkmk_step(field, t0, q, omega, dt, a, b, truncation):
    """One Runge–Kutta–Munthe-Kaas step with Butcher tableau (a, b) (Iserles et al. 2000, §8).

    θ_i = h Σ_j a_ij k_j, k_i = dexp⁻¹_{θ_i}(ξ(t₀ + c_i h, Ψ(exp θ_i, y₀))), c_i = Σ_j a_ij,
    y₁ = Ψ(exp(h Σ_i b_i k_i), y₀).
    """
    stages = []
    for row in a:
        theta = _combine(dt, row, stages)
        t = t0 + sum(row) * dt
        if theta is None:
            stages.append(field(t, q, omega))
        else:
            stages.append(dexpinv(theta, field(t, *exp_action(theta, q, omega)), truncation))
    return exp_action(_combine(dt, b, stages), q, omega)


class _AbstractLieGroupMethod(AbstractIntegrator):
    """An explicit Lie group method: no state between steps; forces through ξ."""

    system_type: ClassVar[type[AbstractSystem]] = AbstractSystem
    is_symmetric: ClassVar[bool] = False
    requires_diagonal_inertia: ClassVar[bool] = False
    velocity_dependent_forces: ClassVar[bool] = True

    def init(self, system, t0, y0, args):
        return None


class _AbstractRKMK(_AbstractLieGroupMethod):
    """An RKMK method given by a Butcher tableau and a dexp⁻¹ truncation."""

    tableau: eqx.AbstractClassVar[tuple]
    truncation: eqx.AbstractClassVar[int]

    def step(self, system, t0, dt, y, args, state):
        def field(t, x, w):
            return se3_vector_field(system, t, x, w, args)

        a, b = self.tableau
        q1, w1 = _rkmk_step(field, t0, *y, dt, a, b, self.truncation)
        return (q1, w1), state, check_finite(RESULTS.successful, q1, w1)


class LieEuler(_AbstractRKMK):
    """The Lie–Euler method of 003: y₁ = Ψ(exp(h ξ(y₀)), y₀). Order 1; one field evaluation."""

    tableau: ClassVar[tuple] = (((),), (1.0,))
    truncation: ClassVar[int] = 0
    order: ClassVar[int] = 1


class LieEulerHeun(_AbstractRKMK):
    """The RKMK method on Heun's tableau (Lie–Euler–Heun). Order 2.

    k₁ = ξ(y₀), k₂ = ξ(Ψ(exp(h k₁), y₀)), y₁ = Ψ(exp(h (k₁ + k₂)/2), y₀); order 2 needs no
    dexp⁻¹ correction.
    """

    tableau: ClassVar[tuple] = (((), (1.0,)), (0.5, 0.5))
    truncation: ClassVar[int] = 0
    order: ClassVar[int] = 2


class RKMK3(_AbstractRKMK):
    """The RKMK method on Kutta's third-order tableau, dexp⁻¹ ≈ I − ½ ad. Order 3.

    Tableau c = (0, ½, 1), a₂₁ = ½, a₃₁ = −1, a₃₂ = 2, b = (1/6, 2/3, 1/6).
    """

    tableau: ClassVar[tuple] = (((), (0.5,), (-1.0, 2.0)), (1 / 6, 2 / 3, 1 / 6))
    truncation: ClassVar[int] = 1
    order: ClassVar[int] = 3


class RKMK4(_AbstractRKMK):
    """The RKMK method on the classical RK4 tableau, dexp⁻¹ ≈ I − ½ ad + 1/12 ad². Order 4."""

    tableau: ClassVar[tuple] = (
        ((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)),
        (1 / 6, 1 / 3, 1 / 3, 1 / 6),
    )
    truncation: ClassVar[int] = 2
    order: ClassVar[int] = 4


class CommutatorFreeRK4(_AbstractLieGroupMethod):
    """The commutator-free Lie group method of order 4 of Celledoni–Marthinsen–Owren 2003.

    With F_i = h ξ(Y_i) and E(θ)·y = Ψ(exp θ, y):

        Y₁ = y₀,  Y₂ = E(½F₁)·y₀,  Y₃ = E(½F₂)·y₀,  Y₄ = E(F₃ − ½F₁)·Y₂,
        y₁ = E(−1/12 F₁ + 1/6 F₂ + 1/6 F₃ + 1/4 F₄)·E(1/4 F₁ + 1/6 F₂ + 1/6 F₃ − 1/12 F₄)·y₀.

    Four field evaluations and five exponentials, no brackets; the stages sit at t₀, t₀ + h/2,
    t₀ + h/2 and t₀ + h.
    """

    order: ClassVar[int] = 4

    def step(self, system, t0, dt, y, args, state):
        def field(t, x, w):
            return se3_vector_field(system, t, x, w, args)

        q, omega = y
        half = t0 + 0.5 * dt
        f1 = field(t0, q, omega)
        y2 = exp_action(_combine(dt, (0.5,), (f1,)), q, omega)
        f2 = field(half, *y2)
        f3 = field(half, *exp_action(_combine(dt, (0.5,), (f2,)), q, omega))
        f4 = field(t0 + dt, *exp_action(_combine(dt, (-0.5, 1.0), (f1, f3)), *y2))
        stages = (f1, f2, f3, f4)
        middle = exp_action(_combine(dt, (1 / 4, 1 / 6, 1 / 6, -1 / 12), stages), q, omega)
        q1, w1 = exp_action(_combine(dt, (-1 / 12, 1 / 6, 1 / 6, 1 / 4), stages), *middle)
        return (q1, w1), state, check_finite(RESULTS.successful, q1, w1)
