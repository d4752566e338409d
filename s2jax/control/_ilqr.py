"""iLQR (iterative LQR, a Gauss–Newton DDP) on T(S²)ⁿ, in tangent coordinates.

Around the current trajectory each state is written in the chart of `s2jax._chart` (4n coordinates),
so the local problem is an ordinary LQR problem in ℝ^{4n} × ℝ^m: δx_{k+1} ≈ A_k δx_k + B_k δu_k is
`jax.jacfwd` of chart⁻¹_{k+1} ∘ step ∘ chart_k (through the step's Newton solve, the implicit-function
derivative of the step's own equations, 002 (3.16), (3.13)), the costs are expanded to second order by
`jax.hessian`. The backward pass is Tassa, Erez & Todorov (2012)'s with Levenberg–Marquardt
regularisation; box bounds by projection; a backtracking line search. Details: docs/api/control.md.

The three passes (`expand`, `backward`, `forward`) are functions of their own: the real-time
iterations of `receding_horizon` (`_real_time.py`) and the feedback policy of a solution
(`_feedback.py`) run the same passes.
"""

from typing import ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .._custom_types import Array, Bool, Float
from .._optimisation.augmented_lagrangian import augmented_lagrangian
from .._optimisation.chart import chart_to_state, state_to_chart, tangent_basis
from .._results import RESULTS
from .._validation import positive_int
from ._problem import Problem
from ._solver import AbstractControlSolver


def _to_vector(a, b):
    return jnp.concatenate([a.ravel(), b.ravel()])


def _from_vector(x, n):
    return x[: 2 * n].reshape(n, 2), x[2 * n :].reshape(n, 2)


class Expansion(NamedTuple):
    """The local LQR problem around a trajectory (q̄, ω̄, ū), in the chart of `tangent_basis`:
    δx_{k+1} ≈ A_k δx_k + B_k δu_k, the running cost h ℓ to second order (lx, lu, lxx, lxu, luu),
    the terminal cost Φ + λ·c + ρ/2 |c|² to second order (vx, vxx), and the chart's bases."""

    a: Float[Array, "N 4n 4n"]
    b: Float[Array, "N 4n m"]
    lx: Float[Array, "N 4n"]
    lu: Float[Array, "N m"]
    lxx: Float[Array, "N 4n 4n"]
    lxu: Float[Array, "N 4n m"]
    luu: Float[Array, "N m m"]
    vx: Float[Array, " 4n"]
    vxx: Float[Array, "4n 4n"]
    basis: Float[Array, "N+1 n 2 3"]


def terminal_objective(problem: Problem, q, omega, multipliers, penalty) -> Float[Array, ""]:
    """Φ(q_N, ω_N) + λ·c + ρ/2 |c|²: the terminal cost with the augmented-Lagrangian term."""
    return problem.terminal(q, omega) + augmented_lagrangian(problem.constraint(q, omega), multipliers, penalty)


def trajectory_objective(problem: Problem, q, omega, controls, multipliers, penalty) -> Float[Array, ""]:
    """Σ_k h ℓ_k + the terminal objective, of a trajectory saved at every step."""
    t = problem.dt * jnp.arange(problem.num_steps, dtype=q.dtype)
    running = problem.running(t, q[:-1], omega[:-1], controls)
    return running + terminal_objective(problem, q[-1], omega[-1], multipliers, penalty)


def expand(problem: Problem, q, omega, controls, multipliers, penalty) -> Expansion:
    """The `Expansion` around the trajectory (q, ω) of `controls`, saved at every step.

    A_k, B_k linearise q̄_{k+1}'s chart of the step from q̄_k's: for a trajectory that is not
    the rollout of its controls (a shifted prediction), the step's defect is dropped, as in the
    Gauss–Newton step of real-time iterations.
    """
    n = q.shape[1]
    dt = problem.dt
    shape = controls.shape[1:]
    basis = tangent_basis(q)
    t = dt * jnp.arange(problem.num_steps, dtype=q.dtype)

    def local_step(x, v, k):
        qk, wk = chart_to_state(q[k], omega[k], basis[k], *_from_vector(x, n))
        (q1, w1), _ = problem.step(t[k], qk, wk, v.reshape(shape))
        return _to_vector(*state_to_chart(q[k + 1], omega[k + 1], basis[k + 1], q1, w1))

    def local_running(x, v, k):
        qk, wk = chart_to_state(q[k], omega[k], basis[k], *_from_vector(x, n))
        return dt * problem.running_cost(t[k], qk, wk, v.reshape(shape))

    def local_terminal(x):
        qn, wn = chart_to_state(q[-1], omega[-1], basis[-1], *_from_vector(x, n))
        return terminal_objective(problem, qn, wn, multipliers, penalty)

    zero = jnp.zeros(4 * n, q.dtype)

    def derivatives(xs):
        v, k = xs
        a, b = jax.jacfwd(local_step, argnums=(0, 1))(zero, v, k)
        lx, lu = jax.grad(local_running, argnums=(0, 1))(zero, v, k)
        (lxx, lxu), (_, luu) = jax.hessian(local_running, argnums=(0, 1))(zero, v, k)
        return a, b, lx, lu, lxx, lxu, luu

    # A loop over the steps, not `jax.vmap`: XLA's CPU backend runs the vmapped derivatives' batched
    # kernels 2–3× slower than the same work step by step (measured at N = 50 for one body: the running
    # cost's Hessians 200 µs vmapped, 87 µs looped).
    xs = (controls.reshape(problem.num_steps, -1), jnp.arange(problem.num_steps))
    a, b, lx, lu, lxx, lxu, luu = lax.map(derivatives, xs)
    vx, vxx = jax.grad(local_terminal)(zero), jax.hessian(local_terminal)(zero)
    return Expansion(a, b, lx, lu, lxx, lxu, luu, vx, vxx, basis)


def backward(
    problem: Problem, expansion: Expansion, controls, mu
) -> tuple[Float[Array, "N m"], Float[Array, "N m 4n"], Float[Array, "2"], Bool[Array, ""]]:
    """The Riccati recursion of the local LQR problem, Q_uu regularised by μ I, bounds by
    clamping (a control at a bound that the gradient pushes against is held).

    **Returns:** `(ks, gains, decrease, ok)`: the feed-forward steps k_k and feedback gains K_k
    (δu_k = k_k + K_k δx_k), the model's predicted change of the objective in α and α² (a step
    α k changes it by α d₁ + α² d₂), and whether every Q_uu was positive definite.
    """
    us = controls.reshape(problem.num_steps, -1)
    m = us.shape[1]
    eye = jnp.eye(m, dtype=us.dtype)
    lower, upper = _flat_bounds(problem, controls.shape[1:])

    def body(carry, xs):
        vx, vxx, decrease, ok = carry
        a, b, lx, lu, lxx, lxu, luu, u = xs
        qx = lx + a.T @ vx
        qu = lu + b.T @ vx
        qxx = lxx + a.T @ vxx @ a
        quu = luu + b.T @ vxx @ b + mu * eye
        qux = lxu.T + b.T @ vxx @ a
        if lower is None:
            free = jnp.ones(m, bool)
        else:  # clamp controls at a bound that the gradient pushes against
            free = ~(((u <= lower) & (qu > 0)) | ((u >= upper) & (qu < 0)))
        mask = free[:, None] & free[None, :]
        quu_free = jnp.where(mask, quu, eye)
        rhs = jnp.concatenate([jnp.where(free, qu, 0.0)[:, None], jnp.where(free[:, None], qux, 0.0)], axis=1)
        solution, positive = spd_solve(quu_free, rhs)
        k = jnp.where(free, -solution[:, 0], 0.0)
        gain = jnp.where(free[:, None], -solution[:, 1:], 0.0)
        vx = qx + gain.T @ quu @ k + gain.T @ qu + qux.T @ k
        vxx = qxx + gain.T @ quu @ gain + gain.T @ qux + qux.T @ gain
        vxx = 0.5 * (vxx + vxx.T)
        decrease = decrease + jnp.stack([k @ qu, 0.5 * k @ quu @ k])
        ok = ok & positive
        return (vx, vxx, decrease, ok), (k, gain)

    e = expansion
    carry = (e.vx, e.vxx, jnp.zeros(2, us.dtype), jnp.array(True))
    xs = (e.a, e.b, e.lx, e.lu, e.lxx, e.lxu, e.luu, us)
    (_, _, decrease, ok), (ks, gains) = lax.scan(body, carry, xs, reverse=True)
    return ks, gains, decrease, ok


def forward(problem: Problem, nominal, q0, omega0, ks, gains, alpha):
    """Roll out u_k = ū_k + α k_k + K_k δx_k from (q0, ω0), δx_k the chart of the state
    reached around the nominal's q̄_k, ω̄_k, clipped into the bounds.

    `nominal` is `(q̄, ω̄, ū, basis)`; (q0, ω0) need not be q̄_0, ω̄_0 (a receding horizon's new
    measurement: the gains then act on its deviation from the prediction from the start).

    **Returns:** `(q, ω, controls, failed)`: the trajectory, every step saved, its controls, and
    whether a step failed.
    """
    q_bar, omega_bar, controls, basis = nominal
    shape = controls.shape[1:]
    lower, upper = _flat_bounds(problem, shape)

    def body(carry, xs):
        (q, omega), failed = carry
        k, qb, wb, e, u_bar, ff, gain = xs
        dx = _to_vector(*state_to_chart(qb, wb, e, q, omega))
        u = u_bar + alpha * ff + gain @ dx
        u = u if lower is None else jnp.clip(u, lower, upper)
        (q1, w1), result = problem.step(k * problem.dt, q, omega, u.reshape(shape))
        return ((q1, w1), failed | (result != RESULTS.successful)), (q1, w1, u)

    ts = jnp.arange(problem.num_steps, dtype=q0.dtype)
    xs = (ts, q_bar[:-1], omega_bar[:-1], basis[:-1], controls.reshape(problem.num_steps, -1), ks, gains)
    (_, failed), (q, omega, us) = lax.scan(body, ((q0, omega0), jnp.array(False)), xs)
    q = jnp.concatenate([q0[None], q])
    omega = jnp.concatenate([omega0[None], omega])
    return q, omega, us.reshape(controls.shape), failed


# Up to this size Q_uu is factored by a Cholesky decomposition written out entry by entry: XLA's CPU
# backend compiles LAPACK's (a custom call per step) outside the backward pass's loop, which made
# the pass cost 6 µs per step for m = 3 (measured: 298 µs for 50 steps, 27 µs written out).
MAX_UNROLLED_CONTROLS = 8


def spd_solve(matrix: Float[Array, "m m"], rhs: Float[Array, "m r"]) -> tuple[Float[Array, "m r"], Bool[Array, ""]]:
    """matrix⁻¹ rhs for a symmetric `matrix` by its Cholesky factor L Lᵀ, and whether the matrix is
    positive definite (every pivot finite and > 0; the solution is not finite where it is not).

    Written out entry by entry for m ≤ `MAX_UNROLLED_CONTROLS` (elementwise arithmetic that XLA fuses
    into the loop around it), LAPACK's `cholesky` beyond.
    """
    m = matrix.shape[0]
    if m > MAX_UNROLLED_CONTROLS:
        chol = jnp.linalg.cholesky(matrix)
        return jax.scipy.linalg.cho_solve((chol, True), rhs), jnp.all(jnp.isfinite(chol))
    factor = [[None] * m for _ in range(m)]
    pivots = []
    for j in range(m):
        pivot = matrix[j, j] - sum((factor[j][p] ** 2 for p in range(j)), jnp.zeros((), matrix.dtype))
        pivots.append(pivot)
        factor[j][j] = jnp.sqrt(pivot)
        for i in range(j + 1, m):
            off = matrix[i, j] - sum((factor[i][p] * factor[j][p] for p in range(j)), jnp.zeros((), matrix.dtype))
            factor[i][j] = off / factor[j][j]
    forward_rows = []  # L y = rhs
    for i in range(m):
        row = rhs[i] - sum((factor[i][p] * forward_rows[p] for p in range(i)), jnp.zeros_like(rhs[i]))
        forward_rows.append(row / factor[i][i])
    solution = [None] * m  # Lᵀ x = y
    for i in reversed(range(m)):
        row = forward_rows[i] - sum((factor[p][i] * solution[p] for p in range(i + 1, m)), jnp.zeros_like(rhs[i]))
        solution[i] = row / factor[i][i]
    pivots = jnp.stack(pivots)
    return jnp.stack(solution), jnp.all(pivots > 0) & jnp.all(jnp.isfinite(pivots))


def _flat_bounds(problem: Problem, shape):
    """The bounds broadcast to one control's shape, flattened; (None, None) without bounds."""
    if not problem.bounded:
        return None, None
    return jnp.broadcast_to(problem.lower, shape).ravel(), jnp.broadcast_to(problem.upper, shape).ravel()


class ILQR(AbstractControlSolver):
    """Iterative LQR in tangent coordinates of T(S²)ⁿ, with box bounds by projection.

    **Arguments:**

    - `max_steps`: iterations (backward + forward pass) per augmented-Lagrangian round.
    - `rtol`: stop when an accepted iteration lowers the cost by at most rtol·|J|, or when the
      quadratic model's full step (at the initial regularisation or less) promises no more than
      that: the test an optimum with J = 0 passes, where no step can lower J.
    - `regularisation`: the initial μ added to Q_uu (raised ×10 when a pass fails, lowered ÷10
      when one succeeds).
    - `penalty`: the initial augmented-Lagrangian ρ of the terminal constraint.
    """

    max_steps: int = eqx.field(default=100, static=True)
    rtol: float = 1e-10
    regularisation: float = 1e-6
    penalty: float = 10.0
    forward_mode_only: ClassVar[bool] = True  # A, B by jax.jacfwd; the costs' Hessians do not step

    def __check_init__(self):
        positive_int(self.max_steps, "ILQR(max_steps)")

    def init(self, problem, q0, omega0, controls):
        return controls

    def controls(self, problem, decision):
        return decision

    def _rollout(self, problem, q0, omega0, controls):
        def body(carry, xs):
            (q, omega), failed = carry
            k, u = xs
            (q1, omega1), result = problem.step(k * problem.dt, q, omega, u)
            return ((q1, omega1), failed | (result != RESULTS.successful)), (q1, omega1)

        ks = jnp.arange(problem.num_steps, dtype=q0.dtype)
        (_, failed), (q, omega) = lax.scan(body, ((q0, omega0), jnp.array(False)), (ks, controls))
        return jnp.concatenate([q0[None], q]), jnp.concatenate([omega0[None], omega]), failed

    def constraints(self, problem, q0, omega0, decision):
        q, omega, _ = self._rollout(problem, q0, omega0, decision)
        return problem.constraint(q[-1], omega[-1])

    def minimise(self, problem, q0, omega0, decision, multipliers, penalty):
        return self.minimise_with_constraints(problem, q0, omega0, decision, multipliers, penalty)[:4]

    def minimise_with_constraints(self, problem, q0, omega0, decision, multipliers, penalty):
        # The constraint at the result is read off the last accepted trajectory, the rollout of
        # the returned controls: no second rollout (`AbstractControlSolver.minimise_with_constraints`).
        def objective(q, omega, controls, failed):
            value = trajectory_objective(problem, q, omega, controls, multipliers, penalty)
            return jnp.where(failed, jnp.inf, value)

        def iteration(carry):
            q, omega, controls, cost, mu, k, values, _ = carry
            expansion = expand(problem, q, omega, controls, multipliers, penalty)
            ks, gains, decrease, ok = backward(problem, expansion, controls, mu)
            nominal = (q, omega, controls, expansion.basis)

            # Backtracking from α = 1 by halves while the trial is refused, down to the first
            # α ≤ 1e-3. Every trial, the first included, runs in the loop's body: the rollout is
            # then traced and compiled once, not twice (the program is the control's largest).
            def search_cond(state):
                alpha, (_, accept) = state
                return ~accept & (alpha > 1e-3)

            def search_body(state):
                alpha = 0.5 * state[0]
                q1, omega1, controls1, failed = forward(problem, nominal, q0, omega0, ks, gains, alpha)
                trial = (q1, omega1, controls1, objective(q1, omega1, controls1, failed))
                expected = alpha * decrease[0] + alpha**2 * decrease[1]
                accept = trial[3] < cost + 1e-4 * jnp.minimum(expected, 0.0)
                return alpha, (trial, accept)

            untried = ((q, omega, controls, jnp.asarray(jnp.inf, q.dtype)), jnp.array(False))
            _, (trial, accept) = lax.while_loop(search_cond, search_body, (jnp.asarray(2.0, q.dtype), untried))
            # Stationary: the full step of the quadratic model, undamped beyond the initial μ,
            # promises at most rtol·|J| (the step is still taken if the line search accepts it).
            # At an optimum where J = 0 (e.g. u = 0 holding an equilibrium) no trial can lower J,
            # so the line search always fails: without this test μ grew to its cap and the
            # optimum was reported as not converged.
            predicted = -(decrease[0] + decrease[1])
            stationary = ok & (mu <= self.regularisation) & (predicted <= self.rtol * jnp.abs(cost))
            accept = accept & ok
            q_new, omega_new, controls_new, cost_new = jax.tree.map(
                lambda new, old: jnp.where(accept, new, old), trial, (q, omega, controls, cost)
            )
            converged = stationary | (accept & (jnp.abs(cost - cost_new) <= self.rtol * jnp.abs(cost)))
            mu = jnp.where(accept | stationary, jnp.maximum(mu / 10, 1e-9), mu * 10)
            values = values.at[k].set(cost_new)
            stuck = mu > 1e10
            return q_new, omega_new, controls_new, cost_new, mu, k + 1, values, converged | stuck

        def cond(carry):
            *_, k, _, done = carry
            return (k < self.max_steps) & ~done

        q, omega, failed = self._rollout(problem, q0, omega0, decision)
        cost = objective(q, omega, decision, failed)
        values = jnp.full((self.max_steps,), jnp.nan, q0.dtype)
        mu = jnp.asarray(self.regularisation, q0.dtype)
        carry = (q, omega, decision, cost, mu, jnp.array(0), values, jnp.array(False))
        q, omega, controls, _, mu, steps, values, done = lax.while_loop(cond, iteration, carry)
        return controls, values, steps, done & (mu <= 1e10), problem.constraint(q[-1], omega[-1])
