"""The discrete Hamel integrator of Zenkov–Leok–Bloch 2012 (004 §V), carried to (S²)ⁿ.

**004's construction.** 004 writes the spherical pendulum as a rigid body whose body frame
has its third axis along the link: Γ is the upward vertical in that frame, Ω = (Ω¹, Ω², 0)
the body angular velocity, 𝓘 = diag(m r², m r², 0) and l(Ω, Γ) = ½⟨𝓘Ω, Ω⟩ − U(Γ) (16).
Hamel's equations in the redundant coordinates Γ (frame u_a = Γ × e_a) are (17)–(18),
𝓘Ω̇ = T = Γ × ∂U/∂Γ and Γ̇ = Γ × Ω; the bracket term M × Ω of (13) vanishes because
M = 𝓘Ω ∥ Ω. The midpoint rule on l gives (19) and the discrete equations (20)–(21),

    𝓘 (Ω_{k,k+1} − Ω_{k−1,k}) / h = T(Γ̄_k),                                   (20)
    (Γ_{k+1/2} − Γ_{k−1/2}) / h = Γ̄_k × Ω̄_k,                                  (21)
    Γ̄_k = ½(Γ_{k+1/2} + Γ_{k−1/2}),   Ω̄_k = ½(Ω_{k,k+1} + Ω_{k−1,k}),

with (21) solved by the Cayley transform of A_k = h/4 (Ω_{k,k+1} + Ω_{k−1,k})^.

**Why not in 004's body frame.** The body form needs the potential as a function of Γ alone.
That holds for gravity (U = m g r Γ³) but not for a general V(q) on (S²)ⁿ: a horizontal field
or a coupling between bodies depends on all of the attitude R, which 004 does not track; nor
are s2jax's q = R e₃ and ω = R Ω functions of (Γ, Ω).

**What is implemented.** The same construction in the spatial (right-invariant) frame
u_a(q) = e_a × q, whose quasi-velocities are s2jax's ω: redundant coordinates q_i ∈ ℝ³,
q̇_i = ω_i × q_i, l(q, ω) = Σ_i ½ M_ii |ω_i|² − V(q), and ω_i·q_i = 0 in place of Ω³ = 0
(for the pendulum Ω³ = e₃·Rᵀω = q·ω). The bracket term vanishes for 004's reason,
∂l/∂ω_i = M_ii ω_i ∥ ω_i, and Hamel's equations are M_ii ω̇_i = q_i × F_i, q̇_i = ω_i × q_i with
F = −∂V/∂q: 002 (2.9)–(2.11) for a diagonal M. Each body is 004's pendulum with 𝓘₁ = 𝓘₂ = M_ii
and torque q_i × F_i, and (20)–(21) read

    M_ii (ω_{i,k+1} − ω_{i,k}) / h = q̄_i × F_i(q̄),                              (20)
    q_{i,k+1} = (I − A_i)⁻¹ (I + A_i) q_{i,k},   A_i = h/4 (ω_{i,k} + ω_{i,k+1})^,   (21)

q̄ = ½(q_k + q_{k+1}): 004's Cayley form with 004's printed sign, which is the right one for
q̇ = ω × q (see the slips below). In (q, ω) ∈ ℝ⁶ⁿ this is the implicit midpoint rule, so it keeps
every quadratic invariant exactly (to the Newton tolerance and round-off): |q_i| (the Cayley
map), q_i·ω_i (Δ(q_i·ω_i) = h (ω̄_i × q̄_i)·ω̄_i + h/M_ii q̄_i·(q̄_i × F_i) = 0), the momentum map
Σ_i M_ii e·ω_i of a rotation about e that leaves V invariant on ℝ³ⁿ (F is evaluated inside
the ball), and, for a V linear in q (004's
pendulum), the energy: ΔT = h ω̄·(q̄ × F) = −ΔV, 004's discrete energy argument after (24). For
a nonlinear V the energy is not conserved, and its error depends on how V is written off the
sphere (next paragraph but one).

**Mapping and indices.** s2jax's state after k steps, (q_k, ω_k), plays the part of 004's pair
(Γ_{k+1/2}, Ω_{k,k+1}): 004's update map (after (12)) acts on (q_{k−1/2}, ξ_{k−1,k}) and never
forms the integer-time Γ_k; the initial state is the first pair. For the pendulum with attitude
R (body to space), q = R e₃, ω = R Ω and Γ = Rᵀ e_up, so the height is e_up·q = Γ³, |ω| = |Ω|
and e_up·ω = Γ·Ω: 004's energy ½ m r²|Ω|² + m g r Γ³ and vertical momentum m r² Γ·Ω are s2jax's
energy and momentum map about e_up (e_up = −e₃ in s2jax's models, where e₃ points along gravity).
A body-frame state (Γ₀, Ω₀) maps to (R₀ e₃, R₀ Ω₀) for any R₀ with R₀ Γ₀ = e_up; the choices
differ by a rotation about e_up, a symmetry. The body-frame and spatial schemes are two
different discretisations of the same motion (each the midpoint rule of its own variables),
with the same invariants; they are not the same map.

**Choice of the torque.** (20) evaluates the torque at q̄, as (22)–(23) print. 004's general
(12) instead averages the directional derivatives at the two midpoints, i.e. the torque
½(q_k × F(q_k) + q_{k+1} × F(q_{k+1})). The two coincide for 004's linear potential; for a
nonlinear V only the first keeps q_i·ω_i = 0 exactly, so it is the one used. F is the ambient
gradient at |q̄_i| = cos(θ_i/2) < 1 (θ_i the angle turned in the step), so the extension of V off
the sphere enters the force at O(h²), the step at O(h³): the order of the local error, but not
always harmless for the energy. Measured on three particles coupled by k Σ (q_i·q_j)² under
gravity (`tests/test_hamel_and_constrained.py`, h = 0.05, 2·10⁴ steps), mean |E_k − E₀| over the
first and second half of the run: 2.7e-3 and 1.2e-2 with V's quartic extension, 3.1e-3 and
3.1e-3 with V written through q_i/|q_i| (RATTLE and the explicit VI: 5e-3, 5e-3). Evaluating
∂V/∂q at q̄_i/|q̄_i| instead would remove the dependence but break either the exact energy of
the pendulum (torque q̂ × F(q̂)) or, for bodies turning by different angles, the exact momentum
map (torque q̄ × F(q̂)); 004's q̄ × F(q̄) keeps both.

**Slips in 004.**

1. The Cayley form. In 004's body frame Γ̇ = Γ × Ω = −Ω̂Γ, so (21) is
   (I + A_k) Γ_{k+1/2} = (I − A_k) Γ_{k−1/2} and Γ_{k+1/2} = (I + A_k)⁻¹ (I − A_k) Γ_{k−1/2},
   the inverse of the printed (I − A_k)⁻¹ (I + A_k). The component form (24) agrees with (21):
   solving (22)–(24) to round-off for §VII's data, the corrected form reproduces Γ_{k+1/2} to
   2e-16 and the printed one misses it by up to 0.24. Both are rotations, so the norm argument
   stands.
2. "‖Γ_{k+1}‖ = ‖Γ_k‖": the Cayley map acts on the midpoints, ‖Γ_{k+1/2}‖ = ‖Γ_{k−1/2}‖.
3. (20) writes T_{k+1/2}, but (22)–(23) evaluate T at ½(Γ_{k+1/2} + Γ_{k−1/2}), i.e. at time k.
4. From symplecticity and exact energy and momentum 004 concludes, by Ge–Marsden, that the
   method "recovers the exact trajectory, up to a possible time reparameterization". The
   pendulum is integrable: keeping E and J confines the discrete orbit to the exact invariant
   torus, but the rotation on it is off by O(h²) (the second order measured against DOP853),
   which no time reparametrisation of the exact orbit removes.
"""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp

from .._custom_types import Array, Float
from .._geometry import cayley_rotate
from .._newton import NewtonSettings, newton_root
from .._results import RESULTS
from .._system import AbstractSystem, LagrangianSystem
from .base import AbstractIntegrator, check_finite


class HamelState(eqx.Module):
    torque: Float[Array, "n 3"]  # q̄ × F(q̄) of the previous step (q × F(q) before the first)


class DiscreteHamelIntegrator(AbstractIntegrator):
    """The discrete Hamel equations (20)–(21) of 004, in s2jax's (q, ω), for a diagonal M.

    One step from (q_k, ω_k) (see the module docstring for the derivation and the mapping to
    004's body variables Γ, Ω):

    1. solve for the mean angular velocity ω̄ = ½(ω_k + ω_{k+1}) the equation

           ω̄_i − ω_{i,k} − h/(2 M_ii) q̄_i × F_i(q̄) = 0,
           q_{i,k+1} = cay(h ω̄_i / 2) q_{i,k},   q̄ = ½(q_k + q_{k+1}),

       by Newton's method (`newton_root`), starting from ω_{i,k} + h/(2 M_ii) τ_i with τ the
       previous step's torque (an O(h²) guess). cay(h ω̄/2) = (I − A)⁻¹(I + A) with
       A = h/4 (ω_k + ω_{k+1})^ is the Cayley form of (21); every iterate is an exact rotation,
       so |q_i| holds to round-off even before Newton has converged;
    2. q_{k+1} = cay(h ω̄ / 2) q_k (21) and ω_{i,k+1} = ω_{i,k} + h/M_ii q̄_i × F_i(q̄) (20).

    F = −∂V/∂q + f; a non-conservative force f is evaluated at the midpoint (t_k + h/2, q̄, ω̄),
    so a force that depends on ω is solved for with ω̄.

    |q_i|, q_i·ω_i, the momentum maps of the symmetries of V and, for V linear in q, the
    energy are kept to round-off; the method is symmetric and of order 2.

    **Arguments:**

    - `newton`: Newton stops once max|δω̄| ≤ atol + rtol·max|ω̄|, or after `max_steps`
      iterations with `RESULTS.newton_failed` (`NewtonSettings`).
    """

    newton: NewtonSettings = NewtonSettings()

    system_type: ClassVar[type[AbstractSystem]] = LagrangianSystem
    order: ClassVar[int] = 2
    is_symmetric: ClassVar[bool] = True
    requires_diagonal_inertia: ClassVar[bool] = True
    velocity_dependent_forces: ClassVar[bool] = True

    def init(self, system, t0, y0, args):
        q, omega = y0
        return HamelState(jnp.cross(q, system.generalized_force(t0, q, omega, args)))

    def step(self, system, t0, dt, y, args, state):
        q, omega = y
        mass = jnp.diag(system.inertia(q, args))[:, None]
        t_mean = t0 + 0.5 * dt

        def rotate(mean_omega):
            q_next = cayley_rotate(0.5 * dt * mean_omega, q)
            q_mean = 0.5 * (q + q_next)
            return q_next, jnp.cross(q_mean, system.generalized_force(t_mean, q_mean, mean_omega, args))

        def residual(mean_omega):
            _, torque = rotate(mean_omega)
            return mean_omega - omega - 0.5 * dt / mass * torque

        guess = omega + 0.5 * dt / mass * state.torque
        mean_omega, _, converged = newton_root(
            residual, guess, **self.newton.options
        )
        q_next, torque = rotate(mean_omega)
        # (20) as written, rather than 2ω̄ − ω_k: the two agree once Newton has converged,
        # and this one makes q̄·(ω_{k+1} − ω_k) = 0 hold to round-off.
        omega_next = omega + dt / mass * torque
        result = RESULTS.where(converged, RESULTS.successful, RESULTS.newton_failed)
        result = check_finite(result, q_next, omega_next)
        return (q_next, omega_next), HamelState(torque), result
