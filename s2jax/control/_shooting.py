"""Direct shooting solvers: the controls (and, for multiple shooting, segment starts) by L-BFGS.

Bounds are kept exactly by the change of variables u = m + r tanh(z) (`squash`): the optimiser
works on unconstrained z, and every iterate's controls lie inside the box.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

from .._optimisation.augmented_lagrangian import augmented_lagrangian
from .._optimisation.chart import tangent_basis
from .._optimisation.optax_loop import optax_minimise
from .._optimisation.parameterisation import squash, unsquash
from .._optimisation.shooting import MultipleShooting as _Segments
from .._results import RESULTS
from ._problem import Problem
from ._solver import AbstractControlSolver


def _to_controls(problem: Problem, z):
    return z if not problem.bounded else squash(z, *problem.bounds(z.shape))


def _from_controls(problem: Problem, u):
    return u if not problem.bounded else unsquash(u, *problem.bounds(u.shape))


def _penalise_failure(value, failed):
    """A failed simulation (its states frozen at the failure) must not look like a good one."""
    return jnp.where(failed, jnp.inf, value)


class SingleShooting(AbstractControlSolver):
    """Minimise J over the controls alone, each cost evaluation one simulation from (q0, ω0).

    Gradients come from reverse mode through the whole simulation (`simulate`'s default adjoint).

    **Arguments:**

    - `optimizer`: an optax transformation (default `optax.lbfgs()`).
    - `max_steps`: iterations per augmented-Lagrangian round.
    - `rtol`, `gtol`: stop when an iterate lowers the objective by at most rtol·|J|, or
      max|∇| ≤ gtol.
    - `penalty`: the initial ρ of the terminal constraint.
    """

    optimizer: optax.GradientTransformation = optax.lbfgs()
    max_steps: int = eqx.field(default=500, static=True)
    rtol: float = 1e-12
    gtol: float = 1e-8
    penalty: float = 10.0

    def init(self, problem, q0, omega0, controls):
        return _from_controls(problem, controls)

    def controls(self, problem, decision):
        return _to_controls(problem, decision)

    def constraints(self, problem, q0, omega0, decision):
        sol = problem.simulate(q0, omega0, self.controls(problem, decision))
        return problem.constraint(sol.q[-1], sol.omega[-1])

    def minimise(self, problem, q0, omega0, decision, multipliers, penalty):
        def objective(z):
            u = self.controls(problem, z)
            sol = problem.simulate(q0, omega0, u)
            value = problem.cost(sol, u) + augmented_lagrangian(
                problem.constraint(sol.q[-1], sol.omega[-1]), multipliers, penalty
            )
            return _penalise_failure(value, sol.result != RESULTS.successful)

        return optax_minimise(objective, decision, self.optimizer, self.max_steps, self.rtol, self.gtol)


class MultipleShootingState(eqx.Module):
    z: jax.Array  # the controls, unconstrained, (N, ...)
    starts: tuple[jax.Array, jax.Array]  # chart coordinates (a, b) of segments 2..S, (S−1, n, 2) each
    base_q: jax.Array  # the chart's base points and tangent bases, (S−1, n, 3), (S−1, n, 3), (S−1, n, 2, 3)
    base_omega: jax.Array
    basis: jax.Array


class MultipleShooting(AbstractControlSolver):
    """Cut the horizon into `num_segments` segments with starts of their own; the jumps between
    segments are constraints of the augmented Lagrangian, driven to zero with the terminal one.

    Each segment's simulation is short, so its cost is close to its linearisation: long or
    unstable horizons (a swing-up over several swings) converge where single shooting's
    objective is a narrow valley. The starts are unknowns in the chart of T(S²)ⁿ of `s2jax.fit`
    (4 numbers per body) around the initial guess's trajectory, so every iterate is exactly a
    point of T(S²)ⁿ. Forces and costs are evaluated with segment-local time (t = 0 at each
    segment's start): the problem's force and running cost must not depend on t.

    **Arguments:** as `SingleShooting`, plus `num_segments`, which must divide `num_steps`.
    """

    num_segments: int = eqx.field(static=True, default=4)
    optimizer: optax.GradientTransformation = optax.lbfgs()
    max_steps: int = eqx.field(default=500, static=True)
    rtol: float = 1e-12
    gtol: float = 1e-8
    penalty: float = 10.0

    def init(self, problem, q0, omega0, controls):
        if problem.num_steps % self.num_segments:
            raise ValueError(f"num_segments = {self.num_segments} must divide num_steps = {problem.num_steps}")
        length = problem.num_steps // self.num_segments
        guess = problem.simulate(q0, omega0, controls)
        base_q = guess.q[length:-1:length]
        base_omega = guess.omega[length:-1:length]
        basis = tangent_basis(base_q)
        zeros = jnp.zeros((self.num_segments - 1, q0.shape[0], 2), q0.dtype)
        return MultipleShootingState(_from_controls(problem, controls), (zeros, zeros), base_q, base_omega, basis)

    def controls(self, problem, decision):
        return _to_controls(problem, decision.z)

    def _run(self, problem, q0, omega0, decision, z, starts):
        u = _to_controls(problem, z)
        by_segment = u.reshape(self.num_segments, -1, *u.shape[1:])
        segments = _Segments(
            problem.plan(q0, omega0), jnp.asarray(problem.dt), problem.num_steps // self.num_segments,
            q0, omega0, decision.base_q, decision.base_omega, decision.basis, False,
        )
        q, omega, jumps, failed = segments.run(problem.params, starts, by_segment)
        return u, q, omega, jumps, failed

    def _constraints(self, problem, u, q, omega, jumps):
        return jnp.concatenate([jnp.ravel(jumps), problem.constraint(q[-1, -1], omega[-1, -1])])

    def constraints(self, problem, q0, omega0, decision):
        u, q, omega, jumps, _ = self._run(problem, q0, omega0, decision, decision.z, decision.starts)
        return self._constraints(problem, u, q, omega, jumps)

    def minimise(self, problem, q0, omega0, decision, multipliers, penalty):
        dt = problem.dt
        length = problem.num_steps // self.num_segments

        def objective(variables):
            z, starts = variables
            u, q, omega, jumps, failed = self._run(problem, q0, omega0, decision, z, starts)
            t = dt * jnp.arange(length, dtype=q.dtype)
            by_segment = u.reshape(self.num_segments, length, *u.shape[1:])
            running_cost = jax.vmap(problem.running, in_axes=(None, 0, 0, 0))
            running = jnp.sum(running_cost(t, q[:, :-1], omega[:, :-1], by_segment))
            value = running + problem.terminal(q[-1, -1], omega[-1, -1])
            value = value + augmented_lagrangian(self._constraints(problem, u, q, omega, jumps), multipliers, penalty)
            return _penalise_failure(value, failed)

        (z, starts), values, steps, converged = optax_minimise(
            objective, (decision.z, decision.starts), self.optimizer, self.max_steps, self.rtol, self.gtol
        )
        return eqx.tree_at(lambda d: (d.z, d.starts), decision, (z, starts)), values, steps, converged
