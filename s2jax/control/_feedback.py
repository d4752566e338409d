"""The feedback policy of an optimal trajectory: u = ū_k + K_k δx_k, K_k from iLQR's backward pass.

At a solution (q̄, ω̄, ū) of a `Problem`, the Riccati recursion of iLQR (`_ilqr.backward`) on the
local LQR problem around it (`_ilqr.expand`: the linearised step in the chart of `s2jax._chart`,
the costs to second order, the terminal constraint as the last round's λ·c + ρ/2 |c|²) gives gains
K_k such that δu_k = K_k δx_k is the LQR answer to a deviation δx_k of the state from q̄_k, ω̄_k.
At a converged solve that is the backward pass iLQR's last iteration ran (at the same trajectory to
the solver's tolerance), whichever solver found the optimum. The policy is the time-varying LQR
tracking controller of the plan: run by `simulate(..., controls=policy)`, it reproduces the plan
from the plan's initial state and corrects a perturbed one.
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from .._custom_types import Array, Float
from .._jit import filter_jit
from .._optimisation.chart import state_to_chart
from ._ilqr import _flat_bounds, _to_vector, backward, expand
from ._problem import ControlSolution, Problem


class FeedbackPolicy(eqx.Module):
    """u(t, q, ω) = clip(ū_k + K_k δx_k), k = round((t − t₀)/h), δx_k the chart coordinates of
    (q, ω) around the plan's (q̄_k, ω̄_k) (`s2jax._chart.state_to_chart`, 4n numbers).

    A feedback policy `simulate` runs: `s2.simulate(..., controls=policy)` calls it at the start
    of each step as `policy(t_k, q_k, ω_k, params)`. Past the plan's last step (t ≥ t₀ + N h) the
    last step's law u = ū_{N−1} + K_{N−1} δx is held.

    **Fields:** `t0`, `dt`: the plan's start and step; `q`, `omega`: its trajectory, (N + 1, n, 3);
    `controls`: ū, (N, *control_shape); `gains`: K, (N, m, 4n), m the size of one control;
    `basis`: the chart's tangent bases along the plan, (N + 1, n, 2, 3); `lower`, `upper`: the
    bounds, flattened (None without bounds).
    """

    t0: Float[Array, ""]
    dt: Float[Array, ""]
    q: Float[Array, "N+1 n 3"]
    omega: Float[Array, "N+1 n 3"]
    controls: Float[Array, "N ..."]
    gains: Float[Array, "N m 4n"]
    basis: Float[Array, "N+1 n 2 3"]
    lower: Float[Array, " m"] | None
    upper: Float[Array, " m"] | None

    def __call__(self, t, q, omega, params=None):
        num_steps = self.controls.shape[0]
        k = jnp.clip(jnp.round((t - self.t0) / self.dt).astype(int), 0, num_steps - 1)
        dx = _to_vector(*state_to_chart(self.q[k], self.omega[k], self.basis[k], q, omega))
        u = self.controls[k].ravel() + self.gains[k] @ dx
        if self.lower is not None:
            u = jnp.clip(u, self.lower, self.upper)
        return u.reshape(self.controls.shape[1:])


def feedback_policy(problem: Problem, solution: ControlSolution, *, penalty=None) -> FeedbackPolicy:
    """The time-varying LQR policy around `solution`, the optimum of `problem`.

    The gains are those of iLQR's backward pass (Tassa, Erez & Todorov 2012, without
    regularisation) at the solution's trajectory: the linearised step δx_{k+1} = A_k δx_k + B_k δu_k
    in tangent coordinates of T(S²)ⁿ, the running cost h ℓ and the terminal objective
    Φ + λ·c + ρ/2 |c|² (the solution's last-round `multipliers` and `penalty`) to second order.
    A terminal constraint therefore acts through ρ: the policy steers a deviation back towards
    the target as a terminal cost of weight ρ would. A control held at a bound (the gradient
    pushing against it) gets no feedback, and every control is clipped into the bounds.

    A hard constraint ends its solve at a large ρ (the pendubot swing-up's at one sub-step per
    control step: 10⁵), and the gains of the last steps then grow with it (|K| up to 3·10⁴ there):
    on a plant that differs from the model, with u held over each step, they overshoot. A
    moderate `penalty` gives a gentler law that tracks better: on that plan flown on the
    continuous equations, the hand-over to upright is 1.2e-3 away with ρ = 10, 5e-2 with ρ = 10⁵
    (0.03 open-loop). With the plan at 8 sub-steps (within the default fidelity) and ρ = 10 it is
    1.1e-5 (notebooks/closed_loop_pendubot.ipynb).

    **Arguments:**

    - `problem`: the `Problem` that was solved.
    - `solution`: the `ControlSolution` of `s2jax.control.solve` (any solver).
    - `penalty`: the ρ of the terminal constraint's term ρ/2 |c|² in the expansion; default the
      solve's own (`solution.penalty`). Ignored without a terminal constraint.

    **Returns:** a `FeedbackPolicy`, to pass as `controls=` to `simulate` (from the plan's initial
    state it gives ū exactly) or to call at a measured state.

    Raises `ValueError` if the backward pass finds a Q_uu that is not positive definite (the
    trajectory is not a minimum of the local problem, e.g. an unconverged solve).
    """
    if not isinstance(problem, Problem):
        raise TypeError(f"`problem` must be the s2jax.control.Problem solved; got {type(problem).__name__}")
    if not isinstance(solution, ControlSolution):
        raise TypeError(f"`solution` must be an s2jax.control.ControlSolution; got {type(solution).__name__}")
    if solution.q.ndim != 3:
        raise ValueError("feedback_policy takes one solution; for a batch, jax.vmap it over the solutions")
    # the dynamics the solution is optimal for: with the sub-steps `solve` may have refined to
    planned = problem.with_substeps(solution.substeps).planned(solution.q[0], solution.omega[0])
    penalty = solution.penalty if penalty is None else jnp.asarray(penalty, solution.q.dtype)
    gains, basis, ok = _gains(planned, solution.q, solution.omega, solution.controls, solution.multipliers, penalty)
    if not isinstance(ok, jax.core.Tracer) and not bool(ok):
        raise ValueError(
            "feedback_policy: the backward pass met a Q_uu that is not positive definite: the solution is not a "
            "minimum of its local LQR problem (did the solve converge? solution.result says)"
        )
    lower, upper = _flat_bounds(planned, solution.controls.shape[1:])
    dt = jnp.asarray(problem.dt, solution.q.dtype)
    return FeedbackPolicy(solution.t[0], dt, solution.q, solution.omega, solution.controls, gains, basis, lower, upper)


@filter_jit
def _gains(problem, q, omega, controls, multipliers, penalty):
    expansion = expand(problem, q, omega, controls, multipliers, penalty)
    _, gains, _, ok = backward(problem, expansion, controls, jnp.zeros((), q.dtype))
    return gains, expansion.basis, ok
