"""Störmer–Verlet and RATTLE on the embedded equations of point masses on spheres (004 §VI).

Each body is a point x = q_i ∈ ℝ³ with velocity v = q̇_i and mass m = M_ii under F_i = −∂V/∂q_i;
004's (25)–(26) read, body by body, ẋ = v, m v̇ = f(x, v) = F − (x·F) x − m |v|² x (the index
reduction of m ẍ = F − λ x, |x|² = 1). For a diagonal M a Störmer–Verlet step from |x| = 1,
x·v = 0 stays on that manifold in exact arithmetic and is RATTLE's; the two differ only in floating
point. `Rattle` also takes a coupled M, and is then 002's variational integrator. Both keep v in
their state and return ω = x × v / |x|². Derivation and doubts about 004:
docs/integrators/constrained.md, docs/papers.md.
"""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jax import lax

from .._block_elimination import MAX_UNROLLED_BODIES
from .._custom_types import Array, Float
from .._geometry import dot, gram
from .._inertia import Inertia, cholesky_solve, gram_cholesky
from .._newton import NewtonSettings, newton_root
from .._results import RESULTS
from .._structured_solve import chain_inverse_bands, thomas_solve, tridiagonal_times
from .._system import AbstractSystem, LagrangianSystem
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

    system_type: ClassVar[type[AbstractSystem]] = LagrangianSystem
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

    **Unit length.** The step does not impose |q_i| = 1 (docs/integrators/constrained.md shows
    it keeps the manifold in exact arithmetic, and is then RATTLE), so |q_i| − 1 carries
    round-off with the linearised dynamics ä = −(2κ/m) a. Measured in float64
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


class ChainInverse(eqx.Module):
    """W = M⁻¹ of a chain, tridiagonal, by its bands (`chain_inverse_bands`), and R = W diag(W)⁻¹'s:
    RATTLE's W from `MIN_CHAIN_RATTLE_BODIES` links, where every product by W and R and every solve
    is then O(n)."""

    main: Float[Array, " n"]  # W_ii
    upper: Float[Array, " n-1"]  # W_{i,i+1} = W_{i+1,i}
    below: Float[Array, " n-1"]  # R_{i+1,i} = W_{i+1,i}/W_ii (R_ii = 1)
    above: Float[Array, " n-1"]  # R_{i,i+1} = W_{i,i+1}/W_{i+1,i+1}

    @classmethod
    def of(cls, lengths, carried):
        main, upper = chain_inverse_bands(lengths, carried)
        return cls(main, upper, upper / main[:-1], upper / main[1:])


class RattleState(eqx.Module):
    velocity: Float[Array, "n 3"]  # v_k = q̇_k in ℝ³
    potential_force: Float[Array, "n 3"]  # −∂V/∂q at the current configuration
    # W = M⁻¹: its diagonal for a diagonal M, its bands for a chain of many links, else dense.
    inverse: Float[Array, "n n"] | Float[Array, " n"] | ChainInverse
    coupling: Float[Array, "n n"] | None  # R_ij = W_ij/W_jj of a dense W (else None, see `_coupled`)
    # Only for the starting point of Newton's method (no derivative flows through them):
    # With ρ_λ = W_jj λ_j/2 = z/h² and ρ_μ = W_jj μ_j/2 of a step (`Rattle`, the guess):
    rate: Float[Array, " n"]  # (ρ_λ + ρ_μ)/2 of the last step, ≈ its value at the midpoint
    rate_slope: Float[Array, " n"]  # its d/dt, from the last two steps' midpoints
    asymmetry: Float[Array, " n"]  # (ρ_λ − ρ_μ)/h of the last step
    last_dt: Float[Array, ""]


# From this many links RATTLE solves a chain's multipliers in O(n) (`_chain_multipliers`): µs per
# step on the chain pendulum (`benchmarks/step_speed.py`'s model, ad-hoc runs), the unrolled
# elimination on the expanded quadratics → the chain's: n = 3: 0.21 → 0.21, 4: 0.28 → 0.29,
# 5: 0.46 → 0.37, 8: 1.21 → 0.51; beyond 8 links, where a dense W's Cholesky chord took over,
# n = 16: 12 → 1.15 (docs/performance.md, "RATTLE on chains").
MIN_CHAIN_RATTLE_BODIES = 5


def _weighted(matrix, x):
    """Σ_j matrix_ij x_j for x of shape (n, 3) or (n,); `matrix` given by its diagonal (n,) for
    a diagonal one, by its bands for a chain's W (`ChainInverse`). Elementwise for few bodies (a
    tiny `dot` is a kernel of its own on XLA's CPU backend)."""
    if isinstance(matrix, ChainInverse):
        return tridiagonal_times(matrix.upper, matrix.main, matrix.upper, x)
    if matrix.ndim == 1:
        return matrix.reshape(matrix.shape + (1,) * (x.ndim - 1)) * x
    if matrix.shape[0] > MAX_UNROLLED_BODIES:
        return matrix @ x
    return jnp.sum(matrix.reshape(matrix.shape + (1,) * (x.ndim - 1)) * x[None], axis=1)


def _solve_small(matrix, rhs):
    """matrix⁻¹ rhs for an (n, n) matrix, n ≤ `MAX_UNROLLED_BODIES`: written out for n ≤ 2,
    Gaussian elimination unrolled over rows beyond (more bodies take `_normal_solve`'s Cholesky
    and `_many_body_multipliers`).

    The unrolled elimination does not pivot. RATTLE's matrices are R ∘ (x_i·y_j) with y = x or
    y = x_{n+1} = x + O(h): (W ∘ Gram) diag(W)⁻¹, a positive definite matrix times a positive
    diagonal (up to O(h)), whose leading minors are positive, so every pivot is. It keeps the
    steps' loop free of LAPACK calls, which XLA's CPU compiler does not compile into a whole
    loop (`s2jax._jit`; `jnp.linalg.solve` instead, measured: see docs/performance.md,
    "RATTLE's solves")."""
    n = matrix.shape[0]
    if n == 1:
        return rhs / matrix[0, 0]
    if n == 2:
        (a, b), (c, d) = matrix
        return jnp.stack([d * rhs[0] - b * rhs[1], a * rhs[1] - c * rhs[0]]) * (1.0 / (a * d - b * c))
    # The matrix as a list of rows, eliminated by whole-row arithmetic (no scatter, which would
    # also break the loop compiled whole); the right side apart, so that the result stays linear
    # in it (the implicit-function derivative solves with tangents and transposes the solve).
    rows, right = list(matrix), list(rhs)
    for k in range(n):
        for i in range(k + 1, n):
            factor = rows[i][k] / rows[k][k]
            rows[i] = rows[i] - factor * rows[k]
            right[i] = right[i] - factor * right[k]
    solution = [None] * n
    for i in reversed(range(n)):
        remainder = right[i]
        for j in range(i + 1, n):
            remainder = remainder - rows[i][j] * solution[j]
        solution[i] = remainder / rows[i][i]
    return jnp.stack(solution)


def _inverse_inertia(structured: Inertia):
    """(W, R): W = M⁻¹ and R = W diag(W)⁻¹ (R_ij = W_ij/W_jj); (1/M_ii, None) for a diagonal M,
    (`ChainInverse`, None) for a chain of at least `MIN_CHAIN_RATTLE_BODIES` links."""
    inertia = structured.matrix
    n = inertia.shape[0]
    if structured.structure == "diagonal":
        return 1.0 / jnp.diagonal(inertia), None
    if structured.structure == "chain" and n >= MIN_CHAIN_RATTLE_BODIES:
        return ChainInverse.of(*structured.chain), None
    if n <= 2:
        eye = jnp.eye(n, dtype=inertia.dtype)
        inverse = jnp.stack([_solve_small(inertia, column) for column in eye], axis=1)
    else:
        inverse = jnp.linalg.inv(inertia)
    return inverse, inverse / jnp.diagonal(inverse)[None, :]


def _coupled(inverse, coupling, x):
    """Σ_j R_ij x_j: x itself for R = I (a diagonal M), by R's bands for a chain's W."""
    if isinstance(inverse, ChainInverse):  # R_ii = 1
        return tridiagonal_times(inverse.below, jnp.ones_like(inverse.main), inverse.above, x)
    return x if coupling is None else _weighted(coupling, x)


def _chain_gram(inverse, x, y):
    """The bands (lower, main, upper) of R ∘ (x_i·y_j) for a chain's W (`ChainInverse`): R_ij =
    W_ij/W_jj is tridiagonal, with R_ii = 1."""
    return inverse.below * dot(x[1:], y[:-1]), dot(x, y), inverse.above * dot(x[:-1], y[1:])


def _normal_solve(inverse, coupling, x, rhs):
    """ν with Σ_j R_ij (x_i·x_j) ν_j = rhs_i: rhs_i/|x_i|² for R = I; for a chain's W by one
    `thomas_solve` (R ∘ Gram is tridiagonal); beyond `MAX_UNROLLED_BODIES` bodies by Cholesky,
    R ∘ Gram being S diag(W)⁻¹ with S = W ∘ Gram symmetric positive definite, so
    ν = diag(W) S⁻¹ rhs (`_inertia.gram_cholesky`; n³/6 flops against an LU's n³·2/3)."""
    if isinstance(inverse, ChainInverse):
        return thomas_solve(*_chain_gram(inverse, x, x), rhs)
    if coupling is None:
        return rhs / dot(x, x)
    if x.shape[0] > MAX_UNROLLED_BODIES:
        return jnp.diagonal(inverse) * cholesky_solve(gram_cholesky(inverse, x), rhs)
    return _solve_small(coupling * gram(x, x), rhs)


def _position_residual(x, displacement):
    """φ(z)_i = (|x_i|² − 1) + 2 x_i·e_i + |e_i|² with e = displacement(z): |x_i + e_i|² − 1, written
    so as to avoid cancellation (the iterations of `_many_body_multipliers`, `_chain_multipliers`)."""

    def residual(z):
        e = displacement(z)
        return (dot(x, x) - 1.0) + 2.0 * dot(x, e) + dot(e, e)

    return residual


def _many_body_multipliers(inverse, coupling, x, displacement, guess, newton, unrolled):
    """z of a coupled M with more than `MAX_UNROLLED_BODIES` bodies, by chord iterations.

    The expansion of φ into coefficients (`Rattle._step`) holds n³ numbers C_ijk; here each
    iteration evaluates φ_i(z) = (|x_i|² − 1) + 2 x_i·e_i + |e_i|² from e = d − R (z ⊙ x), O(n²),
    and applies a fixed approximation of the inverse Jacobian: ∂φ_i/∂z_k = −2 R_ik x_{i,n+1}·x_k
    is −2 R ∘ Gram(x) up to O(|e|) = O(h |v|), so the chord inverse −½ diag(W) S⁻¹, S = W ∘ Gram
    factorised once by Cholesky, contracts by O(h |v|) per iteration. The derivative is the exact
    root's (`newton_root`), solved with the true Jacobian.
    """
    factor = gram_cholesky(*lax.stop_gradient((inverse, x)))
    scale = lax.stop_gradient(jnp.diagonal(inverse))

    def approximate_inverse(r):
        return -0.5 * scale * cholesky_solve(factor, r)

    def jacobian_solve(z, r):
        return jnp.linalg.solve(-2.0 * coupling * gram(x + displacement(z), x), r)

    return newton_root(
        _position_residual(x, displacement), guess, **newton.options, unrolled=unrolled,
        approximate_inverse=approximate_inverse, jacobian_solve=jacobian_solve,
    )


def _chain_multipliers(inverse, x, displacement, guess, newton, unrolled):
    """z of a chain's M (from `MIN_CHAIN_RATTLE_BODIES` links) by Newton's method in O(n) an iteration.

    φ_i(z) = (|x_i|² − 1) + 2 x_i·e_i + |e_i|² from e = d − R (z ⊙ x) (products by the
    tridiagonal W), and the Jacobian ∂φ_i/∂z_k = −2 R_ik x_{i,n+1}·x_k is tridiagonal: each
    iteration is one `thomas_solve`. Without pivoting, as `_solve_small`: the matrix is
    −2 (W ∘ Gram(x)) diag(W)⁻¹ up to O(h |v|), whose leading minors have one sign."""

    def jacobian_solve(z, r):
        lower, main, upper = _chain_gram(inverse, x + displacement(z), x)
        return thomas_solve(-2.0 * lower, -2.0 * main, -2.0 * upper, r)

    return newton_root(
        _position_residual(x, displacement), guess, **newton.options, unrolled=unrolled, jacobian_solve=jacobian_solve
    )


def _diagonal_multipliers(x, d):
    """z for a diagonal M in closed form: |x_i + d_i − z_i x_i|² = 1 is the quadratic
    |x_i|² z² − 2 (c·x_i) z + γ = 0 with c = x_i + d_i, γ = |c|² − 1 = (|x_i|² − 1) + 2 x_i·d_i +
    |d_i|², whose small root is z = γ/(c·x_i + √((c·x_i)² − |x_i|² γ)) (004's RATTLE; the other
    root is O(1) and throws x through the sphere). **Returns:** `(z, solvable)`, solvable where
    every discriminant ≥ 0 and c·x_i > 0."""
    xx = dot(x, x)
    cx = xx + dot(x, d)
    gamma = (xx - 1.0) + 2.0 * dot(x, d) + dot(d, d)
    discriminant = cx**2 - xx * gamma
    z = gamma / (cx + jnp.sqrt(jnp.maximum(discriminant, 0.0)))
    return z, jnp.all(jnp.minimum(discriminant, cx) >= 0)


class Rattle(_AbstractEmbedded):
    """RATTLE (Hairer–Lubich–Wanner VII (1.26), 004 §VI) on the constraints |q_i|² = 1, any M.

    The Lagrangian (2.2) is, in the embedded coordinates, ½ Σ_ij M_ij q̇_i·q̇_j − V(q) with the
    constant mass matrix M ⊗ I₃; with W = M⁻¹ and the multipliers λ, μ ∈ ℝⁿ,

        v_{n+1/2} = v_n + h/2 W (F(x_n) − λ ⊙ x_n),          (λ ⊙ x)_j = λ_j x_j,
        x_{n+1}   = x_n + h v_{n+1/2},                        |x_{i,n+1}|² = 1,
        v_{n+1}   = v_{n+1/2} + h/2 W (F(x_{n+1}) − μ ⊙ x_{n+1}),   x_{i,n+1}·v_{i,n+1} = 0.

    **The same map as `VariationalIntegrator`.** Its positions solve the discrete
    Euler–Lagrange equations of 002's discrete Lagrangian (3.1), 1/(2h) Σ M_ij Δ_i·Δ_j −
    h/2 V(q_k) − h/2 V(q_{k+1}), with the constraints taken by multipliers instead of by
    rotations (3.7): M(q_{k+1} − 2q_k + q_{k−1})/h² = F(q_k) − λ ⊙ q_k is (3.10)–(3.12) with
    the variations restricted to T_{q_k}S² written as a normal force. The velocity step is the
    discrete Legendre map with the hidden constraint, whose cross product with q_{k+1} is
    (3.13). So the two integrators give one trajectory (to round-off,
    `tests/test_hamel_and_constrained.py`), and RATTLE's is cheaper to compute: its unknowns
    are the n multipliers, not 2n tangent coordinates, and its iterations have no square root
    (measured: see docs/performance.md). It holds
    |q_i| = 1 to one step's round-off (the constraint is solved afresh each step, where
    rotations carry the round-off of |q_i| along). It takes no force that depends on ω.

    **The multipliers.** With d = h v_n + h²/2 W F(x_n) and the dimensionless unknowns
    z_j = h²/2 W_jj λ_j, x_{i,n+1} = x_i + e_i with e_i = d_i − Σ_j R_ij z_j x_j, R_ij =
    W_ij/W_jj, and the position constraints are n quadratics,

        φ_i(z) = (|x_i|² − 1) + 2 x_i·e_i + |e_i|² = 0   (written so to avoid cancellation),

    with Jacobian ∂φ_i/∂z_k = −2 R_ik x_{i,n+1}·x_k, nonsingular near z = 0 (R ∘ Gram is
    positive definite, a Schur product). φ is expanded once per step into its coefficients in z
    (a_i − 2 Σ_j b_ij z_j + Σ_jk C_ijk z_j z_k), so an iteration is scalar work on n unknowns.
    Newton's method from an extrapolated guess (`_rate_guess`: symmetric in h, O(h⁴) in z; the
    first step starts from the multipliers of the continuous motion) takes the small root, the
    one that tends to 0 with h, in two iterations on 002 Example 1 (h = 0.01, and the sub-steps
    of its order-6 and order-8 compositions); derivatives by the implicit function theorem
    (`newton_root`). μ then solves the linear system
    Σ_j R_ij (x_i·x_j) ν_j = x_i·u_i for the projection v_{n+1} = u − Σ_j R_ij ν_j x_j,
    u = v_{n+1/2} + h/2 W F(x_{n+1}). For n = 2 all solves are written out, up to 8 bodies
    they are Gaussian elimination unrolled over rows (`_solve_small`) on the expanded quadratics
    (measured on the chain pendulum, with and without an LU from n = 3: see docs/performance.md,
    "RATTLE's solves"); beyond that the expansion's n³ coefficients are not formed: chord
    iterations evaluate φ in O(n²) and solve with −2 R ∘ Gram(x_n), factorised once a step by
    Cholesky (`_many_body_multipliers`), and μ's system by Cholesky too (`_normal_solve`). For a
    chain's M (from `MIN_CHAIN_RATTLE_BODIES` links) W is tridiagonal (`chain_inverse_bands`), and
    so are R ∘ Gram and the Jacobian: Newton's iterations and μ's solve are O(n), one
    `thomas_solve` each (`_chain_multipliers`). Where M is
    diagonal (R = I; known before compiling, `LagrangianSystem.inertia_structure == "diagonal"`,
    which `simulate` sets from concrete params) the quadratics decouple into 004's one per body,
    solved in closed form (`_diagonal_multipliers`), O(n) per step.

    The constraints are solved from scratch every step, so |q_i| − 1 and q_i·v_i stay at the
    round-off of one step (~1e-16) however long the run; the energy error is O(h²) and
    bounded, as for `StormerVerlet` (for a diagonal M the same map up to round-off, see the
    module docstring). Where Newton's method does not converge, `RESULTS.newton_failed`; where
    the quadratics of a diagonal M have no real root, or a root has some x_{i,n+1}·x_i ≤ 0 (a
    body turned by a right angle or more in one step: for a diagonal M, the large root),
    `RESULTS.step_too_large`. Both happen only for steps far beyond the method's stability.

    **Arguments:** `newton` (`NewtonSettings`) and `unrolled` of Newton's method on z, as for
    `VariationalIntegrator` (z is dimensionless, the normal displacement in units of |q_i|).
    """

    newton: NewtonSettings = NewtonSettings()
    unrolled: int = 2

    requires_diagonal_inertia: ClassVar[bool] = False

    def init(self, system, t0, y0, args):
        q, omega = y0
        v = jnp.cross(omega, q)
        potential_force = -system.potential_gradient(q, args)
        inverse, coupling = _inverse_inertia(system.structured_inertia(q, args))
        force = system.generalized_force(t0, q, omega, args, potential_force)
        # The multipliers of the continuous motion, d²|q_i|²/dt² = 0:
        # Σ_j W_ij λ_j (q_i·q_j) = q_i·(W F)_i + |v_i|², in the unknowns W_jj λ_j/2.
        rate = 0.5 * _normal_solve(inverse, coupling, q, dot(q, _weighted(inverse, force)) + dot(v, v))
        zeros = jnp.zeros_like(rate)
        return RattleState(v, potential_force, inverse, coupling, rate, zeros, zeros, jnp.zeros((), q.dtype))

    def step(self, system, t0, dt, y, args, state):
        return self._step(system, t0, dt, y, args, state, velocity=True)

    def lazy_step(self, system, t0, dt, y, args, state):
        # ω is read only at the saves (`velocity`), from the v carried in the state.
        return self._step(system, t0, dt, y, args, state, velocity=False)

    def velocity(self, system, y, args, state):
        return _angular_velocity(y[0], state.velocity)

    def _step(self, system, t0, dt, y, args, state, *, velocity):
        x, omega = y  # v is carried as `state.velocity`, see the module docstring
        inverse, coupling = state.inverse, state.coupling
        force = system.generalized_force(t0, x, omega, args, state.potential_force)
        d = dt * state.velocity + 0.5 * dt**2 * _weighted(inverse, force)

        def displacement(z):
            return d - _coupled(inverse, coupling, z[:, None] * x)

        if isinstance(inverse, ChainInverse):
            z, _, converged = _chain_multipliers(
                inverse, x, displacement, dt**2 * _rate_guess(state, dt), self.newton, self.unrolled
            )
            result = RESULTS.where(converged, RESULTS.successful, RESULTS.newton_failed)
        elif coupling is None:
            z, solvable = _diagonal_multipliers(x, d)
            result = RESULTS.where(solvable, RESULTS.successful, RESULTS.step_too_large)
        elif x.shape[0] > MAX_UNROLLED_BODIES:
            z, _, converged = _many_body_multipliers(
                inverse, coupling, x, displacement, dt**2 * _rate_guess(state, dt), self.newton, self.unrolled
            )
            result = RESULTS.where(converged, RESULTS.successful, RESULTS.newton_failed)
        else:
            # φ_i(z) = a_i − 2 Σ_j b_ij z_j + Σ_jk C_ijk z_j z_k with p_ij = R_ij x_j:
            # a_i = φ_i(0), b_ij = (x_i + d_i)·p_ij, C_ijk = p_ij·p_ik, taken once per step, so
            # that each iteration is scalar work on the n unknowns.
            directions = coupling[:, :, None] * x[None]
            constant = (dot(x, x) - 1.0) + 2.0 * dot(x, d) + dot(d, d)
            linear = dot((x + d)[:, None], directions)
            quadratic = dot(directions[:, :, None], directions[:, None])

            def half_jacobian(z):  # ∂φ_i/∂z_j / 2 = Σ_k C_ijk z_k − b_ij
                return jnp.sum(quadratic * z[None, None], axis=-1) - linear

            def residual(z):  # φ_i = a_i + Σ_j (Σ_k C_ijk z_k − 2 b_ij) z_j
                return constant + jnp.sum((half_jacobian(z) - linear) * z[None], axis=-1)

            def newton_step(z, r):
                return _solve_small(2.0 * half_jacobian(z), r)

            z, _, converged = newton_root(
                residual, dt**2 * _rate_guess(state, dt), **self.newton.options,
                unrolled=self.unrolled, jacobian_solve=newton_step,
            )
            result = RESULTS.where(converged, RESULTS.successful, RESULTS.newton_failed)
        e = displacement(z)
        x_next = x + e
        potential_next = -system.potential_gradient(x_next, args)
        force_next = system.generalized_force(t0 + dt, x_next, omega, args, potential_next)
        inverse_dt = 1.0 / dt
        u = e * inverse_dt + 0.5 * dt * _weighted(inverse, force_next)
        nu = _normal_solve(inverse, coupling, x_next, dot(x_next, u))
        v_next = u - _coupled(inverse, coupling, nu[:, None] * x_next)
        # What `_rate_guess` extrapolates: the symmetric mean of the two multipliers' rates, its
        # slope between midpoints (kept where they are too close for a difference quotient, as
        # at the start), and their difference over h.
        position_rate, velocity_rate = z * inverse_dt**2, nu * inverse_dt
        rate = 0.5 * (position_rate + velocity_rate)
        span = 0.5 * (state.last_dt + dt)
        short = jnp.abs(span) <= 1e-3 * jnp.abs(dt)
        slope = jnp.where(short, state.rate_slope, (rate - state.rate) / jnp.where(short, 1.0, span))
        asymmetry = (position_rate - velocity_rate) * inverse_dt
        rate, slope, asymmetry = lax.stop_gradient((rate, slope, asymmetry))
        omega_next = _angular_velocity(x_next, v_next) if velocity else omega
        # The small root has every x_{i,n+1}·x_i > 0 (for a diagonal M it is that condition; the
        # other root turns a body by more than a right angle in one step).
        result = RESULTS.where(jnp.all(dot(x_next, x) > 0), result, RESULTS.step_too_large)
        result = check_finite(result, x_next, v_next)
        state = RattleState(v_next, potential_next, inverse, coupling, rate, slope, asymmetry, dt)
        return (x_next, omega_next), state, result


def _rate_guess(state, dt):
    """The guess for ρ_λ = z/h² of a step of length dt (the starting point of Newton's method).

    RATTLE is symmetric: its step with −h from (x_{n+1}, v_{n+1}) has position multiplier μ_n.
    So (ρ_λ + ρ_μ)/2 is even in h, its value at the step's midpoint up to O(h²), and
    (ρ_λ − ρ_μ)/h a smooth function of time up to O(h): extrapolating the first linearly
    between midpoints and keeping the second gives ρ_λ to O(h²) for any sequence of steps
    (the sub-steps of a `Composition`, of both signs), z to O(h⁴). (ρ_λ alone, extrapolated
    in time, is off by O(h): Newton's first update was ~2 % of z on VI-8KL's sub-steps.)
    """
    return state.rate + state.rate_slope * 0.5 * (state.last_dt + dt) + 0.5 * dt * state.asymmetry
