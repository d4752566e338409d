"""The variational integrators of Lee–Leok–McClamroch 2009 (002) on (S²)ⁿ.

Both come from the discrete Lagrangian (3.1) by the discrete Hamilton principle and the discrete
Legendre maps (3.8)–(3.9): the implicit one solves the Cayley equation (3.16) and steps by
(3.10)–(3.13), the explicit one (diagonal M) by (3.17)–(3.18). The configuration is advanced by
rotations q_{i,k+1} = F_i q_{i,k}, F_i ∈ SO(3) (3.7), so |q_i| = 1 holds to round-off. Forces enter
as +h²/2 q_i × F_i, F = −∂V/∂q + f of 001 (10), with weight h/2 at both ends of the step.
Derivation and the forced (3.10)–(3.13): docs/integrators/variational.md.
"""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jax import lax

from .._block_elimination import MAX_UNROLLED_BODIES, block_factor, dense_block_solve
from .._custom_types import Array, Bool, Float
from .._geometry import cayley_displacement, cayley_rotate, dot, hat
from .._inertia import tangent_solve
from .._newton import NewtonSettings, newton_root
from .._results import RESULTS
from .._structured_solve import inertia_times, matrix_diagonal, tilted_chain_solve
from .._system import AbstractSystem, LagrangianSystem
from .._two_body import two_body_newton
from .base import AbstractIntegrator, check_finite


class ExplicitState(eqx.Module):
    potential_force: Float[Array, "n 3"]  # −∂V/∂q(q_k), shared by two steps


class ImplicitState(eqx.Module):
    potential_force: Float[Array, "n 3"]
    momentum: Float[Array, "n 3"]  # A(q_k) ω_k, the right side of (3.13) at the last step
    # Only for the starting point of the iterations (no derivative flows through them):
    cayley_rate: Float[Array, "n 3"]  # f/h of the last step, ≈ ω/2 at its midpoint
    rate_slope: Float[Array, "n 3"]  # d(f/h)/dt, from the last two steps' midpoints
    last_dt: Float[Array, ""]
    # For a dense M of many bodies (`Inertia.gram_factor`, else None): the Cholesky factor of
    # M⁻¹ ∘ Gram(q_k), shared by the solve of (3.13) at q_k and the chord of the step from q_k.
    gram_factor: Float[Array, "n n"] | None = None


def _coupled(inertia, x, chain):
    """Σ_{j≠i} M_ij x_j (`inertia_times`: O(n) for a chain)."""
    return inertia_times(inertia, x, chain) - matrix_diagonal(inertia)[:, None] * x


def _momentum(q, omega, inertia, chain):
    """A(q) ω of (2.11)/(3.13): row i is M_ii ω_i − q_i × Σ_{j≠i} M_ij (q_j × ω_j)."""
    return matrix_diagonal(inertia)[:, None] * omega - jnp.cross(q, _coupled(inertia, jnp.cross(q, omega), chain))


def cayley_jacobian(
    f: Float[Array, "n 3"], q: Float[Array, "n 3"], inertia: Float[Array, "n n"]
) -> Float[Array, "n n 3 3"]:
    """The Jacobian of the residual of (3.16) in f, as n × n blocks of 3 × 3, in closed form.

    With s_i = 1 + |f_i|² and D_j = (F_j − I) q_j = N_j / s_j, N_j = 2((f_j·q_j) f_j + f_j × q_j −
    |f_j|² q_j) (`cayley_displacement`), the blocks are

        diagonal:  2 M_ii (I / s_i − 2 f_i f_iᵀ / s_i²),
        i ≠ j:     M_ij q̂_i ∂D_j/∂f_j,  ∂D_j/∂f_j = (∂N_j/∂f_j − 2 D_j f_jᵀ) / s_j,
                   ∂N_j/∂f_j = 2 (f_j q_jᵀ + (f_j·q_j) I − q̂_j − 2 q_j f_jᵀ).

    At f = 0 this is 2A(q), A the operator of (3.13). Far cheaper than `jax.jacfwd` (3n
    forward passes of the residual), which `tests/test_variational.py` compares it with.
    """
    eye = jnp.eye(3, dtype=f.dtype)[None]
    s = (1.0 + dot(f, f))[:, None, None]
    fq = dot(f, q)[:, None, None]
    q_hat = hat(q)
    outer_fq = f[:, :, None] * q[:, None, :]
    outer_qf = q[:, :, None] * f[:, None, :]
    displacement = cayley_displacement(f, q)
    d_numerator = 2.0 * (outer_fq + fq * eye - q_hat - 2.0 * outer_qf)
    d_displacement = (d_numerator - 2.0 * displacement[:, :, None] * f[:, None, :]) / s
    if f.shape[0] > MAX_UNROLLED_BODIES:
        products = jnp.einsum("iab,jbc->ijac", q_hat, d_displacement)
    else:
        # Elementwise: under `jax.vmap` an einsum of 3 × 3 blocks becomes a batched dot of tiny
        # matrices, which XLA's CPU backend runs several times slower than fused elementwise work.
        products = jnp.sum(q_hat[:, None, :, :, None] * d_displacement[None, :, None, :, :], axis=-2)
    off = inertia[:, :, None, None] * products
    mass = matrix_diagonal(inertia)[:, None, None]
    diag = 2.0 * mass * (eye / s - 2.0 * f[:, :, None] * f[:, None, :] / (s * s))
    is_diag = jnp.eye(f.shape[0], dtype=bool)[:, :, None, None]
    return jnp.where(is_diag, diag[:, None], off)


def _chord_solve(f0, q, inertia):
    """The fixed approximate inverse Jacobian of (3.16) that the step's chord iterations use:
    the closed-form Jacobian (`cayley_jacobian`) at the starting point f0 (the extrapolated
    guess, off the root by O(h³)), factorised once (`block_factor`). The iterations contract by
    O(|f0 − f*|), nearly as fast as Newton's, without forming and factorising a Jacobian per
    iteration (2.0 per step on 002 Example 4, h = 1e-4). It carries no derivative: the
    iterations are never differentiated (`newton_root` differentiates their root, with the true
    Jacobian).
    """
    return block_factor(cayley_jacobian(*lax.stop_gradient((f0, q, inertia))))


def _tangent_chord(q, inverse, mass, factor):
    """The chord's approximate inverse of (3.16)'s Jacobian for a dense M of many bodies
    (`_inertia.MIN_CHOLESKY_BODIES`): the Jacobian at f = 0, O(n²) per solve after one n × n
    Cholesky (the closed-form Jacobian at f0 is 3n × 3n, whose LU costs 18n³ flops a step).

    At f = 0 the Jacobian (`cayley_jacobian`) is 2M_ii on the normal part of δf_i and 2A(q) on
    the tangential parts, A the operator of (3.13), solved by `_inertia.tangent_solve` (with the
    Cholesky factor kept for every iteration). The chord contracts by O(|f|) = O(h|ω|) per
    iteration (the Jacobian at f0, off the root by O(h³), contracts faster but costs the 3n LU).
    No derivative flows through it: `newton_root` differentiates the root with the true Jacobian.
    """
    q, inverse, mass, factor = lax.stop_gradient((q, inverse, mass, factor))
    half_inverse_mass = 0.5 / mass

    def solve(r):
        normal = dot(q, r)
        tangential = tangent_solve(q, 0.5 * (r - normal[:, None] * q), inverse, factor)
        return tangential + half_inverse_mass * normal[:, None] * q

    return solve


def _rotate_by_tangent(q, t, squared):
    """The rotation of (3.17): q_{k+1} = q + (t − δ q) with t ⊥ q the tangential part of the
    displacement, |t|² = `squared`, and δ = 1 − √(1 − |t|²) = |t|²/(1 + √(1 − |t|²)).

    δ is written in the second form: for small |t| the rounded √(1 − |t|²) sits just below a
    rounding tie half of the time and always rounds down, which shrinks |q| by ~2.8e-17 per step
    (−2.8e-11 after 10⁶ steps of 1e-5 on 002 Example 2); δ carries full relative precision and the
    correction is unbiased.

    **Returns:** `(q_next, root, slack)` with root = 1 + √(1 − |t|²) and slack = 1 − |t|² (≤ 0:
    no such rotation; the step is too large).
    """
    slack = 1.0 - squared
    root = 1.0 + jnp.sqrt(jnp.maximum(slack, 0.0))
    return q + (t - (squared / root) * q), root, slack


def _displacement_newton(q, d, f0, inertia, chain, *, rtol, atol, max_steps, unrolled):
    """(3.16) for a chain by Newton's method on the tangential displacements, O(n) per iteration.

    For f ⊥ q, 2 M_ii f_i/(1 + |f_i|²) = M_ii q_i × D_i with D = q_{k+1} − q_k, so (3.16) reads
    q_i × (M D)_i = d_i: the tangential part of (M D)_i is g_i = −q_i × d_i (the discrete Legendre
    transform (3.10) written in D). Newton's unknowns are the tangential parts t_i of D_i at q_i,
    D_i = t_i − α_i q_i (`_rotate_by_tangent`). The Jacobian of t ↦ P_{q_i}(M D(t))_i maps
    δt to P_{q_i}(M δD)_i, where δD_i is δt_i carried onto the tangent plane at q_{i,k+1}
    (δD_i ⊥ q_{i,k+1} with tangential part δt_i at q_i); so a Newton step is one
    `tilted_chain_solve` with p_i = q_{i,k+1} of the current iterate, O(n), and the iterations
    converge quadratically: from the extrapolated guess of `VariationalIntegrator` (O(h³)) two
    per step at h = 0.01 on the 4-link chain, 2.6 at n = 32, 3.0 at n = 128. (Two bodies, any M,
    take the same Newton iterations in tangent-plane coordinates, `_two_body.two_body_newton`.
    Chord iterations with the Jacobian at the guess, factorised once, were faster on the
    double pendulum (measured: see docs/performance.md), but their error left is the linear-rate
    estimate itself: 10–1000 ulps on 30 % of the steps at two iterations, against ~K|δ₂|²,
    round-off, here.) A term
    (q_i·t_i) q_i in the residual holds t_i ⊥ q_i and keeps its Jacobian nonsingular for the
    implicit-function derivative, which uses the true Jacobian at the root.

    **Returns:** `(f, q_next, converged, solvable)`: the Cayley vectors of (3.16), q_{k+1} (the
    rotation of t itself, `_rotate_by_tangent`, not cay(f) q recomputed), whether Newton
    converged, whether every |t_i| < 1 and finite (otherwise the step is too large, f = 0 and
    q_next = q).
    """
    tangent = -jnp.cross(q, d)

    def tangential(x):
        return x - dot(q, x)[:, None] * q

    def step_end(t):
        # (D, q_{k+1}) from the tangential part of t.
        t = tangential(t)
        q_next = _rotate_by_tangent(q, t, dot(t, t)[:, None])[0]
        return q_next - q, q_next

    def residual(t):
        return tangential(inertia_times(inertia, step_end(t)[0], chain)) - tangent + dot(q, t)[:, None] * q

    t0 = _tangent_guess(q, f0)

    def newton_step(t, r):
        return tangential(tilted_chain_solve(q, step_end(t)[1], tangential(r), *chain)) + dot(q, r)[:, None] * q

    t, _, converged = newton_root(
        residual, t0, rtol=rtol, atol=atol, max_steps=max_steps, unrolled=unrolled, jacobian_solve=newton_step
    )
    t = tangential(t)
    f, q_next, solvable = _rotation_of_tangent(q, t, dot(t, t)[:, None])
    return f, q_next, converged, solvable


def _tangent_guess(q, f0):
    """The tangential displacement of the rotation cay(f0) at q: 2 f0 × q/(1 + |f0|²)."""
    return 2.0 * jnp.cross(f0, q) / (1.0 + dot(f0, f0))[:, None]


def _rotation_of_tangent(q, t, squared):
    """(f, q_{k+1}, solvable) from the tangential displacements t ⊥ q, |t_i|² = `squared`.

    q_{k+1} is the rotation of t itself (`_rotate_by_tangent`), and f its Cayley vector,
    f = q × t/(1 + √(1 − |t|²)), since 2 f × q/(1 + |f|²) = t for f ⊥ q (002 §3.3). Past
    |t_i| = 1 there is no such rotation (the iterates leave the sphere, and a solve can
    overflow): the step is too large; then f = 0 and q_{k+1} = q, finite (the loop keeps the
    state before the step), and solvable is False.
    """
    q_next, root, slack = _rotate_by_tangent(q, t, squared)
    f = jnp.cross(q, t) / root
    solvable = jnp.all(slack > 0) & jnp.all(jnp.isfinite(t))
    return jnp.where(solvable, f, 0.0), jnp.where(solvable, q_next, q), solvable


def _one_body_cayley(d: Float[Array, "1 3"], mass: Float[Array, "1 1"]) -> tuple[Float[Array, "1 3"], Bool[Array, ""]]:
    """(3.16) for a single body, in closed form: 2M f/(1 + |f|²) = d with f, d ⊥ q.

    f is parallel to d, and |f| the root of 2M x/(1 + x²) = |d| that vanishes with h:
    f = d / (M + √(M² − |d|²)), the rotation of the explicit (3.17) with a = d/M. There is none
    when |d| > M (the step is too large; `RESULTS.step_too_large`, as for (3.17)).

    **Returns:** `(f, solvable)`.
    """
    slack = mass * mass - dot(d, d)[:, None]
    return d / (mass + jnp.sqrt(jnp.maximum(slack, 0.0))), jnp.all(slack >= 0)


def forced_velocity_update(system, t1, q1, omega_guess, args, potential_force, update, *, rtol, atol, max_steps):
    """ω_{k+1} = update(F_{k+1}), F_{k+1} = F(t_{k+1}, q_{k+1}, ω_{k+1}, u_k): (3.13) or (3.18) with forces.

    `update` maps the generalized force at the end of the step to ω_{k+1}. Unless the force
    depends on ω this is explicit; otherwise ω − update(F(ω)) = 0 is solved by Newton's method
    from update(F(ω_guess)), differentiated by the implicit function theorem.

    **Returns:** `(omega_next, force_next, converged)`, force_next = F_{k+1} at omega_next.
    """

    def force(omega):
        return system.generalized_force(t1, q1, omega, args, potential_force)

    force_next = force(omega_guess)
    omega = update(force_next)
    if not system.force_depends_on_velocity:
        return omega, force_next, jnp.array(True)
    omega, _, converged = newton_root(
        lambda w: w - update(force(w)), omega, rtol=rtol, atol=atol, max_steps=max_steps
    )
    return omega, force(omega), converged


class VariationalIntegrator(AbstractIntegrator):
    """The implicit variational integrator (3.10)–(3.13) for any symmetric positive-definite M.

    One step from (q_k, ω_k):

    1. d_i = h M_ii ω_i − q_i × Σ_{j≠i} M_ij (q_j × h ω_j) + h²/2 q_i × F_i  (right side of (3.10)),
       that is d = h A(q_k) ω_k + h²/2 q × F with A the operator of (2.11)/(3.13); A(q_k) ω_k is
       the right side of the last step's (3.13), carried in the state (`_momentum` at the start),
       so that the path from q_k to q_{k+1} never waits for the solve of (3.13);
    2. solve the Cayley equation (3.16) for f = (f_1, …, f_n),
       2 M_ii f_i / (1 + |f_i|²) + q_i × Σ_{j≠i} M_ij (F_j − I) q_j = d_i,
       by chord (simplified Newton) iterations (`newton_root`, `_chord_solve`) with the
       closed-form Jacobian (`cayley_jacobian`) at the starting point, factorised once per step
       (from `_inertia.MIN_CHOLESKY_BODIES` bodies with the Jacobian at f = 0, solved through one
       n × n Cholesky of M⁻¹ ∘ Gram(q) a step, `_tangent_chord`: O(n³/6) instead of the 3n × 3n
       LU; the factor is the one the last step's solve of (3.13) used at the same q, carried in
       the state, so a step saved every time factorises once, not twice: 100 → 84 µs a step at
       n = 64, `benchmarks/compare_revisions.py --dense 64`);
       for a chain (M_ij = c_{max(i,j)} l_i l_j), by Newton's method on the displacements with
       an O(n) solve (`_displacement_newton`); for any two bodies, by the same Newton iterations
       in tangent-plane coordinates, four scalar unknowns (`_two_body.two_body_newton`; measured:
       see docs/performance.md); derivatives by the implicit function theorem with the
       true Jacobian (for the displacements, the same structured solve; on the dense path,
       `cayley_jacobian` at the root, factorised once, not `jax.jacfwd`'s 3n residual passes).
       For a single body (3.16) is solved in closed form (`_one_body_cayley`).
       The q_i component of the first term, 2 M_ii (f_i·q_i)/(1 + |f_i|²), is the only one
       along q_i, so the solution has f_i ⊥ q_i without a constraint. The iterations start from
       f/h extrapolated linearly in time: f/h = ω/2 + O(h²) at the step's midpoint (the VI is
       symmetric), so the last two steps' f/h at their midpoints give the guess to O(h²), f to
       O(h³), for any sequence of step sizes (the sub-steps of a `Composition`, a step with −h);
       the first from ω₀/2 and ω̇₀/2 by (2.11). From that guess two iterations reach round-off
       on 002 Example 1 (h = 0.01, also in VI-4) and the 4-link chain pendulum, 2.06 on
       average on Example 4 and 2.6 at 32 links (2.3–3.1 from the last step's f/h alone);
    3. q_{k+1} = cay(f_i) q_i (3.11);
    4. ω_{k+1} from the linear system (3.13) (`solve_operator`: block elimination, or O(n)
       for a chain). The next step needs only its right side A(q_{k+1}) ω_{k+1}, so unless a
       force depends on ω, `lazy_step` (what `simulate` takes between saves) skips this solve
       and `velocity` does it at the saves (measured: see docs/performance.md, "Lazy steps"), and
       one solve per step of a `Composition` instead of one per sub-step.

    The state carried between steps holds −∂V/∂q(q_k) (each evaluation serves two steps),
    A(q_k) ω_k, for a dense M of many bodies the Cholesky factor of M⁻¹ ∘ Gram(q_k) (the solve of
    (3.13) at q_k and the next step's chord share it), and the starting point of the iterations,
    which does not change the solution: a step with −h from (q_{k+1}, ω_{k+1}) returns (q_k, ω_k)
    up to the Newton tolerance, which the reversible adjoint relies on (for forces that do not
    depend on ω).

    **Arguments:**

    - `newton`: the stopping rule and iteration cap of Newton's method on f (`NewtonSettings`;
      the defaults leave round-off).
    - `unrolled`: iterations run before the `while_loop` tests convergence (two suffice from
      the extrapolated guess); more only cost time, never change the root beyond round-off.
    """

    newton: NewtonSettings = NewtonSettings()
    unrolled: int = 2

    system_type: ClassVar[type[AbstractSystem]] = LagrangianSystem
    order: ClassVar[int] = 2
    is_symmetric: ClassVar[bool] = True
    requires_diagonal_inertia: ClassVar[bool] = False
    velocity_dependent_forces: ClassVar[bool] = True

    def init(self, system, t0, y0, args):
        q, omega = y0
        inertia = system.structured_inertia(q, args)
        momentum = _momentum(q, omega, inertia.matrix, inertia.chain)
        # f/h ≈ ω/2 at the step's midpoint (to O(h²), the VI being symmetric): at t₀, the
        # midpoint of a step of length 0, the rate is ω₀/2 and its slope ω̇₀/2 (2.11).
        rate = 0.5 * omega
        slope = 0.5 * system.angular_acceleration(t0, q, omega, args)
        zero_dt = jnp.zeros((), rate.dtype)
        return ImplicitState(
            -system.potential_gradient(q, args), momentum, rate, slope, zero_dt, inertia.gram_factor(q)
        )

    def step(self, system, t0, dt, y, args, state):
        return self._step(system, t0, dt, y, args, state, velocity=True)

    def lazy_step(self, system, t0, dt, y, args, state):
        # Without ω-dependent forces nothing in a step reads ω_k (d comes from the momentum
        # carried in the state), so the solve of (3.13) waits for `velocity`.
        return self._step(system, t0, dt, y, args, state, velocity=system.force_depends_on_velocity)

    def velocity(self, system, y, args, state):
        """ω_{k+1} from (3.13), A(q_{k+1}) ω_{k+1} = the momentum carried in the state."""
        if system.force_depends_on_velocity:
            return y[1]
        return system.solve_operator(y[0], state.momentum, args, state.gram_factor)

    def _step(self, system, t0, dt, y, args, state, *, velocity):
        q, omega = y
        structured = system.structured_inertia(q, args)
        inertia, chain = structured.matrix, structured.chain
        force = system.generalized_force(t0, q, omega, args, state.potential_force)
        mass = matrix_diagonal(inertia)[:, None]
        # h A(q_k) ω_k from the right side of the last step's (3.13) (`ImplicitState.momentum`).
        d = dt * state.momentum + 0.5 * dt**2 * jnp.cross(q, force)
        # The guess for f/h at this step's midpoint, extrapolated linearly from the last two
        # steps' (step 2 of the docstring), span = the time between the midpoints.
        span = 0.5 * (state.last_dt + dt)
        guess = state.cayley_rate + state.rate_slope * span
        # Midpoints closer than 1e-3 h (this step undoes the last) will keep the last slope: a
        # difference quotient over them is round-off.
        close = jnp.abs(span) <= 1e-3 * jnp.abs(dt)
        inverse_span = 1.0 / jnp.where(close, 1.0, span)

        def cayley_residual(f):
            # (3.16) with (F_j − I) q_j written by `cayley_displacement`.
            displacement = cayley_displacement(f, q)
            return 2.0 * mass * f / (1.0 + dot(f, f)[:, None]) + jnp.cross(
                q, _coupled(inertia, displacement, chain)
            ) - d

        if q.shape[0] == 1:
            f, solvable = _one_body_cayley(d, mass)
            converged, failure = solvable, RESULTS.step_too_large
            q_next = cayley_rotate(f, q)
        elif q.shape[0] == 2 or chain is not None:
            if q.shape[0] == 2:
                # Any two bodies (the double pendulum): Newton in tangent-plane coordinates.
                t, squared, converged = two_body_newton(
                    q, -jnp.cross(q, d), _tangent_guess(q, dt * guess), inertia,
                    **self.newton.options, unrolled=self.unrolled,
                )
                f, q_next, solvable = _rotation_of_tangent(q, t, squared)
            else:
                f, q_next, converged, solvable = _displacement_newton(
                    q, d, dt * guess, inertia, chain,
                    **self.newton.options, unrolled=self.unrolled,
                )
            failure = RESULTS.where(solvable, RESULTS.newton_failed, RESULTS.step_too_large)
            converged = converged & solvable
        else:
            f0 = dt * guess
            if structured.inverse is None:
                chord = _chord_solve(f0, q, inertia)
            else:
                chord = _tangent_chord(q, structured.inverse, mass, state.gram_factor)
            # Newton's steps after a stalled chord, and the root's derivative, solve with the
            # closed-form Jacobian by one LU (`dense_block_solve`): with the unrolled elimination
            # compiled into the stall loop a dense n = 8 run's first call took 8.6–9.4 s, 2.3–2.9 s now.
            f, _, converged = newton_root(
                cayley_residual, f0, **self.newton.options,
                unrolled=self.unrolled, approximate_inverse=chord,
                jacobian_solve=lambda f, r: dense_block_solve(cayley_jacobian(f, q, inertia), r),
            )
            failure = RESULTS.newton_failed
            q_next = cayley_rotate(f, q)
        # Δ from the stored q_{k+1}, not from f: the discrete Euler–Lagrange equations
        # then hold for the sequence actually stored.
        displacement = q_next - q
        potential_force = -system.potential_gradient(q_next, args)
        # Products with 1/h, not divisions by h: a division is several times slower, and XLA
        # turns one by a constant h into a product but not one by a traced h.
        inverse_dt = 1.0 / dt
        impulse = jnp.cross(q_next, structured.times(displacement)) * inverse_dt
        factor_next = structured.gram_factor(q_next)  # None unless M is dense, of many bodies

        def momentum(force_next):
            return impulse + 0.5 * dt * jnp.cross(q_next, force_next)

        if velocity:
            omega_next, force_next, solved = forced_velocity_update(
                system, t0 + dt, q_next, omega, args, potential_force,
                lambda force_next: system.solve_operator(q_next, momentum(force_next), args, factor_next),
                **self.newton.options,
            )
        else:
            # A lazy step: ω_{k+1} is left for `velocity`; y carries ω_k (stale).
            force_next = system.generalized_force(t0 + dt, q_next, omega, args, potential_force)
            omega_next, solved = omega, jnp.array(True)
        result = RESULTS.where(converged, RESULTS.successful, failure)
        result = RESULTS.where(solved, result, RESULTS.newton_failed)
        momentum_next = momentum(force_next)
        result = check_finite(result, q_next, omega_next, momentum_next)
        rate = f * inverse_dt
        slope = jnp.where(close, state.rate_slope, (rate - state.cayley_rate) * inverse_span)
        state = ImplicitState(potential_force, momentum_next, rate, slope, dt, factor_next)
        return (q_next, omega_next), state, result


class ExplicitVariationalIntegrator(AbstractIntegrator):
    """The explicit variational integrator (3.17)–(3.18) for a diagonal inertia matrix.

    With M_ij = 0 for i ≠ j, (3.16) decouples and has the closed-form solution

        a_i = h ω_i + h²/(2 M_ii) q_i × F_i,
        q_{i,k+1} = a_i × q_i + (1 − |a_i|²)^{1/2} q_i,                       (3.17)
        ω_{i,k+1} = ω_i + h/(2 M_ii) (q_i × F_i(q_k) + q_{i,k+1} × F_i(q_{k+1})),   (3.18)

    with F = −∂V/∂q + f. It is the same map as `VariationalIntegrator` (to round-off), without
    Newton's method (unless f depends on ω, which makes (3.18) implicit). When |a_i| > 1 no
    rotation solves (3.14): the step is too large, and the step returns
    `RESULTS.step_too_large` instead of a NaN. `simulate` rejects a non-diagonal M.

    **Arguments** (used only for a force that depends on ω): `newton` (`NewtonSettings`) of
    Newton's method on (3.18), as for `VariationalIntegrator`.
    """

    newton: NewtonSettings = NewtonSettings()

    system_type: ClassVar[type[AbstractSystem]] = LagrangianSystem
    order: ClassVar[int] = 2
    is_symmetric: ClassVar[bool] = True
    requires_diagonal_inertia: ClassVar[bool] = True
    velocity_dependent_forces: ClassVar[bool] = True

    def init(self, system, t0, y0, args):
        return ExplicitState(-system.potential_gradient(y0[0], args))

    def step(self, system, t0, dt, y, args, state):
        q, omega = y
        mass = matrix_diagonal(system.inertia(q, args))[:, None]
        force = system.generalized_force(t0, q, omega, args, state.potential_force)
        a = dt * omega + 0.5 * dt**2 / mass * jnp.cross(q, force)
        # (3.17): t = a × q, |t| = |a| for a ⊥ q.
        q_next, _, slack = _rotate_by_tangent(q, jnp.cross(a, q), dot(a, a)[:, None])
        potential_force = -system.potential_gradient(q_next, args)

        def update(force_next):
            return omega + 0.5 * dt / mass * (jnp.cross(q, force) + jnp.cross(q_next, force_next))

        omega_next, _, solved = forced_velocity_update(
            system, t0 + dt, q_next, omega, args, potential_force, update,
            **self.newton.options,
        )
        result = RESULTS.where(jnp.all(slack >= 0), RESULTS.successful, RESULTS.step_too_large)
        result = RESULTS.where(solved, result, RESULTS.newton_failed)
        result = check_finite(result, q_next, omega_next)
        return (q_next, omega_next), ExplicitState(potential_force), result
