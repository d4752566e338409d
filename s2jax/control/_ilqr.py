"""iLQR (iterative LQR, a Gauss–Newton DDP) on T(S²)ⁿ, in tangent coordinates.

Around the current trajectory each state is written in the chart of `s2jax._chart` (4n coordinates),
so the local problem is an ordinary LQR problem in ℝ^{4n} × ℝ^m: δx_{k+1} ≈ A_k δx_k + B_k δu_k is
`jax.jacfwd` of chart⁻¹_{k+1} ∘ step ∘ chart_k (through the step's Newton solve, the implicit-function
derivative of the step's own equations, 002 (3.16), (3.13)), the costs are expanded to second order by
`jax.hessian`. The backward pass is Tassa, Erez & Todorov (2012)'s with Levenberg–Marquardt
regularisation; box bounds by projection; a backtracking line search. Details: docs/api/control.md.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .._chart import chart_to_state, state_to_chart, tangent_basis
from .._results import RESULTS
from .._validation import positive_int
from ._solver import AbstractControlSolver, augmented_lagrangian


def _to_vector(a, b):
    return jnp.concatenate([a.ravel(), b.ravel()])


def _from_vector(x, n):
    return x[: 2 * n].reshape(n, 2), x[2 * n :].reshape(n, 2)


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

    def _cost(self, problem, q, omega, controls, multipliers, penalty):
        t = problem.dt * jnp.arange(problem.num_steps, dtype=q.dtype)
        terminal = problem.terminal(q[-1], omega[-1]) + augmented_lagrangian(
            problem.constraint(q[-1], omega[-1]), multipliers, penalty
        )
        return problem.running(t, q[:-1], omega[:-1], controls) + terminal

    def minimise(self, problem, q0, omega0, decision, multipliers, penalty):
        return self.minimise_with_constraints(problem, q0, omega0, decision, multipliers, penalty)[:4]

    def minimise_with_constraints(self, problem, q0, omega0, decision, multipliers, penalty):
        # The constraint at the result is read off the last accepted trajectory, the rollout of
        # the returned controls: no second rollout (`AbstractControlSolver.minimise_with_constraints`).
        n = q0.shape[0]
        dt = problem.dt
        shape = decision.shape[1:]
        lower = None if not problem.bounded else jnp.broadcast_to(problem.lower, shape).ravel()
        upper = None if not problem.bounded else jnp.broadcast_to(problem.upper, shape).ravel()

        def expand(q, omega, controls):
            """A, B, the running costs' derivatives and the terminal cost's, around a trajectory."""
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
                return problem.terminal(qn, wn) + augmented_lagrangian(problem.constraint(qn, wn), multipliers, penalty)

            zero = jnp.zeros(4 * n, q.dtype)
            us = controls.reshape(problem.num_steps, -1)
            ks = jnp.arange(problem.num_steps)
            a, b = jax.vmap(lambda v, k: jax.jacfwd(local_step, argnums=(0, 1))(zero, v, k))(us, ks)
            grads = jax.vmap(lambda v, k: jax.grad(local_running, argnums=(0, 1))(zero, v, k))(us, ks)
            hessians = jax.vmap(lambda v, k: jax.hessian(local_running, argnums=(0, 1))(zero, v, k))(us, ks)
            return a, b, grads, hessians, jax.grad(local_terminal)(zero), jax.hessian(local_terminal)(zero), basis

        def backward(expansion, controls, mu):
            a, b, (lx, lu), ((lxx, lxu), (_, luu)), vx, vxx, _ = expansion
            us = controls.reshape(problem.num_steps, -1)
            m = us.shape[1]
            eye = jnp.eye(m, dtype=us.dtype)

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
                chol = jnp.linalg.cholesky(quu_free)
                solve = lambda rhs: jax.scipy.linalg.cho_solve((chol, True), rhs)  # noqa: E731
                k = jnp.where(free, -solve(jnp.where(free, qu, 0.0)), 0.0)
                gain = jnp.where(free[:, None], -solve(jnp.where(free[:, None], qux, 0.0)), 0.0)
                vx = qx + gain.T @ quu @ k + gain.T @ qu + qux.T @ k
                vxx = qxx + gain.T @ quu @ gain + gain.T @ qux + qux.T @ gain
                vxx = 0.5 * (vxx + vxx.T)
                decrease = decrease + jnp.stack([k @ qu, 0.5 * k @ quu @ k])
                ok = ok & jnp.all(jnp.isfinite(chol))
                return (vx, vxx, decrease, ok), (k, gain)

            carry = (vx, vxx, jnp.zeros(2, us.dtype), jnp.array(True))
            xs = (a, b, lx, lu, lxx, lxu, luu, us)
            (_, _, decrease, ok), (ks, gains) = lax.scan(body, carry, xs, reverse=True)
            return ks, gains, decrease, ok

        def forward(nominal, ks, gains, alpha):
            q_bar, omega_bar, controls, basis = nominal

            def body(carry, xs):
                (q, omega), failed = carry
                k, qb, wb, e, u_bar, ff, gain = xs
                dx = _to_vector(*state_to_chart(qb, wb, e, q, omega))
                u = u_bar + alpha * ff + gain @ dx
                u = u if lower is None else jnp.clip(u, lower, upper)
                (q1, w1), result = problem.step(k * dt, q, omega, u.reshape(shape))
                return ((q1, w1), failed | (result != RESULTS.successful)), (q1, w1, u)

            ts = jnp.arange(problem.num_steps, dtype=q0.dtype)
            xs = (ts, q_bar[:-1], omega_bar[:-1], basis[:-1], controls.reshape(problem.num_steps, -1), ks, gains)
            (_, failed), (q, omega, us) = lax.scan(body, ((q0, omega0), jnp.array(False)), xs)
            q = jnp.concatenate([q0[None], q])
            omega = jnp.concatenate([omega0[None], omega])
            controls = us.reshape(controls.shape)
            cost = self._cost(problem, q, omega, controls, multipliers, penalty)
            return q, omega, controls, jnp.where(failed, jnp.inf, cost)

        def iteration(carry):
            q, omega, controls, cost, mu, k, values, _ = carry
            expansion = expand(q, omega, controls)
            ks, gains, decrease, ok = backward(expansion, controls, mu)
            nominal = (q, omega, controls, expansion[-1])

            # Backtracking from α = 1 by halves while the trial is refused, down to the first
            # α ≤ 1e-3. Every trial, the first included, runs in the loop's body: the rollout is
            # then traced and compiled once, not twice (the program is the control's largest).
            def search_cond(state):
                alpha, (_, accept) = state
                return ~accept & (alpha > 1e-3)

            def search_body(state):
                alpha = 0.5 * state[0]
                trial = forward(nominal, ks, gains, alpha)
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
        cost = jnp.where(failed, jnp.inf, self._cost(problem, q, omega, decision, multipliers, penalty))
        values = jnp.full((self.max_steps,), jnp.nan, q0.dtype)
        mu = jnp.asarray(self.regularisation, q0.dtype)
        carry = (q, omega, decision, cost, mu, jnp.array(0), values, jnp.array(False))
        q, omega, controls, _, mu, steps, values, done = lax.while_loop(cond, iteration, carry)
        return controls, values, steps, done & (mu <= 1e10), problem.constraint(q[-1], omega[-1])
