"""A trajectory optimisation problem on T(S²)ⁿ and what its solvers return.

The dynamics are a forced simulation (`s2jax.simulate` with `force` and open-loop `controls`) of the
plan that `simulate` makes (`_plan.py`): by default the discrete Lagrange–d'Alembert integrator of the
system's kind. The cost of controls u_0 … u_{N−1} from (q_0, ω_0) is

    J(u) = Σ_{k<N} h ℓ(t_k, q_k, ω_k, u_k) + Φ(q_N, ω_N),

the controls are held over each step (zero-order hold), may be boxed, lower ≤ u_k ≤ upper, and the
final state may be pinned by a terminal constraint c(q_N, ω_N) = 0. Why: docs/api/control.md.
"""

import dataclasses
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import _fidelity
from .._adjoint import DirectAdjoint
from .._by_value import by_value
from .._custom_types import Array, Float, Int, Lagrangian, Params
from .._force import AbstractForce
from .._integrators import AbstractIntegrator, AutoIntegrator
from .._integrators.substeps import sub_stepped
from .._plan import LINEARISED, Plan, plan
from .._results import RESULTS, _names
from .._simulate import simulate, simulate_plan
from .._solution import Solution
from .._stepper import step_once
from .._summary import solution_repr
from .._system import AbstractSystem
from .._validation import trace_floats


class Problem(eqx.Module):
    """An optimal control problem: dynamics, costs, bounds and a terminal constraint.

    **Fields:**

    - `lagrangian`, `params`: the model, as for `simulate`: a Lagrangian of any form, or an
      `s2jax.AbstractSystem` (e.g. a `HamiltonianSystem`), which takes this problem's `force`.
    - `force`: an `s2jax.AbstractForce` that reads the control u (e.g.
      `s2jax.forces.PivotTorque(0)`); it may also hold known loads (a disturbance).
    - `dt`, `num_steps`: the step h and the number of steps N (horizon N h).
    - `running_cost`: ℓ(t, q, ω, u) -> scalar, integrated as Σ h ℓ. Like `terminal_cost` and
      `terminal_constraint`, compared by value: a Problem rebuilt from functions of the same code,
      defaults, closure values and globals read is equal to the first, so `solve` reuses its
      compiled program.
    - `terminal_cost`: Φ(q_N, ω_N) -> scalar (default 0).
    - `terminal_constraint`: c(q_N, ω_N) -> vector, to be driven to zero (default none).
    - `lower`, `upper`: box bounds on each u_k, arrays of shape `control_shape` (default none).
    - `control_shape`: the shape of one u_k (default (3,), a torque).
    - `integrator`: the integrator of the dynamics; None (default) is
      `s2jax.AutoIntegrator(linearised=True)`: for a Lagrangian of (2.2) the explicit VI where M
      is diagonal, `Rattle` (002's map by multipliers, cheaper to linearise) for a coupled M of
      up to 8 bodies without a force that depends on ω, else `VariationalIntegrator`;
      `GeneralVariationalIntegrator` for any other L, `HamiltonianRattle` for a Hamiltonian.
    - `substeps`: integrator steps of h / substeps per control step (default 1): the controls
      stay held over each step of h, the dynamics' error falls by substeps^p (`s2jax.Substeps`).
    - `fidelity`: the largest continuous-time miss accepted (default 1e-2; None: no check). The
      miss is the distance, over the control instants t_0 … t_N and the bodies, between the
      model's trajectory and the continuous system driven by the same held controls, in q (a
      unit vector) and in ω (rad/s): `ControlSolution.continuous_miss`. `solve` refines
      `substeps` until the miss of its solution is below it (see `solve`).
    - `planned_checks`: set by `planned`, for the solvers (leave it None).
    - `runtime_substeps`: set by `with_runtime_substeps`, for the solvers (leave it None): the
      sub-step count as a value of the compiled program (`substeps` is then 1).

    `solve` and `receding_horizon` make the plan once, before compiling (`planned`), so that
    every step the solver linearises is the step `simulate` runs.
    """

    lagrangian: Lagrangian | AbstractSystem
    params: Params
    force: AbstractForce
    dt: float
    num_steps: int = eqx.field(static=True)
    # Compared by value (`_by_value`): a Problem rebuilt with equal new lambdas (a notebook cell
    # run again) is equal to the old one, and its solve is not compiled again.
    running_cost: Callable = eqx.field(converter=by_value)
    terminal_cost: Callable | None = eqx.field(default=None, converter=by_value)
    terminal_constraint: Callable | None = eqx.field(default=None, converter=by_value)
    lower: Float[Array, "..."] | None = None
    upper: Float[Array, "..."] | None = None
    control_shape: tuple[int, ...] = eqx.field(static=True, default=(3,))
    integrator: AbstractIntegrator | AutoIntegrator | None = None
    substeps: int = eqx.field(static=True, default=1)
    # A value, not static: `planned` makes it an array (∞ for None), so that problems differing
    # only in their fidelity share one compiled solve.
    fidelity: float | Float[Array, ""] | None = _fidelity.DEFAULT_FIDELITY
    # Set by `planned`: the in-graph checks of its plan (`Plan.check_form`, `Plan.check_inertia`),
    # so that `plan` returns the plan it made instead of planning again (None: not planned).
    planned_checks: tuple[bool, bool] | None = eqx.field(static=True, default=None)
    # Set by `with_runtime_substeps`, for the solvers (leave it None): the sub-steps as a value.
    runtime_substeps: Int[Array, ""] | None = None

    def __check_init__(self):
        if (self.lower is None) != (self.upper is None):
            raise ValueError("give both `lower` and `upper` bounds, or neither")
        if not isinstance(self.force, AbstractForce):
            raise TypeError(f"`force` must be an s2jax.AbstractForce that reads the control; got {self.force!r}")
        if self.dt <= 0 or self.num_steps < 1:
            raise ValueError(f"need dt > 0 and num_steps ≥ 1; got dt = {self.dt}, num_steps = {self.num_steps}")
        if self.bounded:
            _check_bounds(self.lower, self.upper, self.control_shape)
        if isinstance(self.substeps, bool) or not isinstance(self.substeps, int) or self.substeps < 1:
            raise ValueError(f"`substeps` must be an int ≥ 1; got {self.substeps!r}")
        given = self.fidelity
        if not (given is None or isinstance(given, jax.Array) or (_is_real(given) and given > 0)):
            raise ValueError(f"`fidelity` must be a positive float or None; got {given!r}")

    @property
    def bounded(self) -> bool:
        return self.lower is not None

    def clip(self, controls: Float[Array, "N ..."]) -> Float[Array, "N ..."]:
        """The controls moved into the box (unchanged without bounds)."""
        if not self.bounded:
            return controls
        return jnp.clip(controls, *self.bounds(controls.shape))

    def bounds(self, shape) -> tuple[Array, Array]:
        """`lower` and `upper` broadcast to `shape` (e.g. that of all the controls)."""
        return jnp.broadcast_to(self.lower, shape), jnp.broadcast_to(self.upper, shape)

    def plan(self, q0, omega0) -> Plan:
        """The plan of the dynamics (`simulate`'s): the system, with this problem's force, and the
        integrator (in `Substeps` for `substeps` > 1). The plan of a `planned` problem is the plan
        it holds, not made again: inside a compiled solve, where the params are traced, planning
        again would compile the form check of (2.2) into the program, though `planned` checked
        these params before compiling (measured: 17 plans per solve of the swing-up, 2.1 s of
        its 12 s first call)."""
        integrator = LINEARISED if self.integrator is None else self.integrator
        if isinstance(self.lagrangian, AbstractSystem):  # as a planned problem's is
            system = dataclasses.replace(self.lagrangian, force=self.force)
            if self.planned_checks is not None:
                the_plan = Plan(system, integrator, *self.planned_checks)
            else:
                the_plan = plan(system, q0, omega0, self.params, integrator=integrator)
        else:
            the_plan = plan(self.lagrangian, q0, omega0, self.params, integrator=integrator, force=self.force)
        return the_plan._replace(integrator=sub_stepped(the_plan.integrator, self.substep_count))

    @property
    def substep_count(self) -> int | Int[Array, ""]:
        """The sub-steps per control step: `substeps`, or the value `with_runtime_substeps` made."""
        return self.substeps if self.runtime_substeps is None else self.runtime_substeps

    def with_runtime_substeps(self) -> "Problem":
        """This problem with its sub-steps a value of the compiled program, not of its shape
        (`RuntimeSubsteps`, the same steps): the problems of every `substeps` then share one
        program. For a solver whose iterations differentiate the dynamics in forward mode only
        (`AbstractControlSolver.forward_mode_only`: iLQR): `solve` iterates on it, so that
        refining the sub-steps to meet the fidelity does not compile the iterations again."""
        if self.runtime_substeps is not None:
            return self
        return dataclasses.replace(self, substeps=1, runtime_substeps=jax.device_put(np.asarray(self.substeps)))

    def with_substeps(self, substeps: int) -> "Problem":
        """This problem with `substeps` sub-steps per control step: e.g.
        `problem.with_substeps(solution.substeps)`, the dynamics a solution is optimal for
        (`solve` may refine them to meet `fidelity`), to replay or simulate its controls."""
        return dataclasses.replace(self, substeps=substeps)

    def planned(self, q0, omega0) -> "Problem":
        """This problem with its plan made: `lagrangian` the planned system and `integrator` the
        chosen one (without the sub-steps, which `plan` adds), and its float params as arrays (new
        values then do not recompile). Made eagerly (concrete params) it holds what the form
        check of (2.2) found, which inside a compiled solve, where the params are traced, could
        not be found."""
        the_plan = self.plan(q0, omega0)
        # What `simulate` refuses before compiling (an integrator that cannot hold controls, or
        # cannot take the force), refused here: a planned problem runs without `simulate`'s checks.
        the_plan.check_options(adjoint=DirectAdjoint(), controls=(), policy=None)
        integrator = the_plan.integrator.integrator if self.substeps > 1 else the_plan.integrator
        # Float leaves as arrays, as `simulate` does: traced, so new values do not recompile.
        params = jax.tree_util.tree_map(trace_floats, self.params)
        fidelity = self.fidelity
        if not isinstance(fidelity, jax.Array):
            fidelity = jnp.asarray(jnp.inf if fidelity is None else fidelity, dtype=float)
        return dataclasses.replace(
            self, lagrangian=the_plan.system, integrator=integrator, params=params, fidelity=fidelity,
            planned_checks=(the_plan.check_form, the_plan.check_inertia),
        )

    def simulate(self, q0, omega0, controls, *, throw: bool = False, **kwargs) -> Solution:
        """The trajectory of `controls` from (q0, ω0): every step saved. A `planned` problem runs
        the plan it holds (`simulate_plan`): inside a solver's program, without a second plan."""
        the_plan = self.plan(q0, omega0)
        if self.planned_checks is not None and not kwargs:
            return simulate_plan(
                the_plan, q0, omega0, self.params, dt=self.dt, num_steps=self.num_steps, controls=controls, throw=throw
            )
        return simulate(
            the_plan.system, q0, omega0, self.params, dt=self.dt, num_steps=self.num_steps,
            integrator=the_plan.integrator, controls=controls, throw=throw, **kwargs,
        )

    def step(self, t, q, omega, u):
        """One step of the dynamics from (q, ω) at t with u held: `((q_next, ω_next), result)`.

        The step `simulate` takes, of the same plan (the integrator's state is initialised
        afresh, which changes only Newton's starting point, not the solution).
        """
        the_plan = self.plan(q, omega)
        dt = jnp.asarray(self.dt, q.dtype)
        return step_once(the_plan.system, the_plan.integrator, t, dt, q, omega, u, self.params)

    def running(self, t, q, omega, controls) -> Float[Array, ""]:
        """Σ_k h ℓ(t_k, q_k, ω_k, u_k) over states 0 … N − 1."""
        return self.dt * jnp.sum(jax.vmap(self.running_cost)(t, q, omega, controls))

    def terminal(self, q, omega) -> Float[Array, ""]:
        return jnp.zeros((), q.dtype) if self.terminal_cost is None else self.terminal_cost(q, omega)

    def constraint(self, q, omega) -> Float[Array, " c"]:
        """c(q_N, ω_N), flattened (empty without a terminal constraint)."""
        if self.terminal_constraint is None:
            return jnp.zeros((0,), q.dtype)
        return jnp.ravel(self.terminal_constraint(q, omega))

    def cost(self, solution: Solution, controls) -> Float[Array, ""]:
        """J of a simulated trajectory (saved at every step)."""
        return self.running(solution.t[:-1], solution.q[:-1], solution.omega[:-1], controls) + self.terminal(
            solution.q[-1], solution.omega[-1]
        )


def _is_real(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_bounds(lower, upper, control_shape) -> None:
    """`lower` and `upper` broadcast to one control's shape and lower ≤ upper, or a `ValueError`."""
    bounds = {"lower": lower, "upper": upper}
    if any(isinstance(x, jax.core.Tracer) for x in bounds.values()):
        return
    bounds = {name: np.asarray(x) for name, x in bounds.items()}
    for name, x in bounds.items():
        if _broadcast_shape(x.shape, control_shape) != tuple(control_shape):
            raise ValueError(
                f"`{name}` must have the shape of one control, control_shape = {tuple(control_shape)} (or "
                f"broadcast to it); got {x.shape}"
            )
    lower, upper = (np.broadcast_to(x, control_shape) for x in bounds.values())
    crossed = ~(lower <= upper)
    if np.any(crossed):
        index = tuple(int(i) for i in np.argwhere(crossed)[0])
        raise ValueError(f"`lower` must be ≤ `upper`; at {index}: lower = {lower[index]} > upper = {upper[index]}")


def _broadcast_shape(shape, control_shape) -> tuple[int, ...] | None:
    try:
        return np.broadcast_shapes(shape, tuple(control_shape))
    except ValueError:
        return None


def continuous_miss(problem: Problem, q, omega, controls) -> Float[Array, ""]:
    """How far the continuous system, driven by `controls`, runs from the model's trajectory `q`,
    `omega` (N + 1, n, 3): `s2jax._fidelity.continuous_miss` for the problem's plan, sub-steps and
    step. Controls optimal for the discrete model (a swing-up that ends upright to 1e-7 in it)
    drive the continuous system elsewhere by the integrator's error, O((h / substeps)²) for the
    variational integrators (1e-2 and more for the ready examples at one sub-step)."""
    the_plan = problem.plan(q[0], omega[0])
    return _fidelity.continuous_miss(
        the_plan.system, problem.params, problem.dt, problem.substep_count, q, omega, controls
    )


class ControlSolution(eqx.Module):
    """What `s2jax.control.solve` returns.

    **Fields:**

    - `controls`: the optimal u_0 … u_{N−1}, shape (N, *control_shape), inside the bounds.
    - `t`, `q`, `omega`: the trajectory they produce (re-simulated from them), (N + 1, …).
    - `cost`: J of that trajectory; `cost_history`: the objective after each inner iteration,
      round after round (NaN past the last one), shape (rounds × max_steps,): J itself without a
      terminal constraint, else the augmented J + λ·c + ρ/2 |c|² of the iteration's round.
    - `constraint_violation`: max |c(q_N, ω_N)| of the returned trajectory; 0 without constraints.
    - `result`: `RESULTS.successful`, or why not (`RESULTS.optimisation_not_converged`, a
      simulation failure).
    - `num_iterations`: inner iterations in all; `num_outer_iterations`: augmented-Lagrangian
      rounds (inner solves followed by a multiplier update).
    - `round_iterations`: the inner iterations of each round (0 past the last), shape (rounds,),
      rounds = `max_outer_steps` with constraints, else 1; `round_violation`: max|c| of all the
      solver's constraints (for `MultipleShooting`, the segment jumps too) after each round (NaN
      past the last), same shape.
    - `multipliers`, `penalty`: the augmented-Lagrangian λ (one per constraint of the solver) and ρ
      of the last round's objective J + λ·c + ρ/2 |c|² (λ empty and ρ the solver's initial one
      without constraints); `feedback_policy` expands that objective.

    - `continuous_miss`: how far the continuous system, driven by these controls (held over each
      step), runs from `q`, `omega` (which are the discrete model's): the largest distance over
      t_0 … t_N and the bodies, in q and in ω (`continuous_miss`, a re-simulation with
      `RungeKutta4` 8 times finer than the model's step). `constraint_violation` is the model's,
      this is how far the real system is from the model.
    - `substeps`: the `Problem.substeps` of the dynamics these controls are optimal for: the
      problem's own, or more where `solve` refined them to meet `Problem.fidelity`; functions
      that take the problem and a solution (`feedback_policy`) use it.

    `print(solution.summary(problem))` says in a few lines what the solve did; `repr` gives
    the shapes, not the arrays.
    """

    controls: Float[Array, "N ..."]
    t: Float[Array, " N+1"]
    q: Float[Array, "N+1 n 3"]
    omega: Float[Array, "N+1 n 3"]
    cost: Float[Array, ""]
    cost_history: Float[Array, " iterations"]
    constraint_violation: Float[Array, ""]
    result: RESULTS
    num_iterations: Int[Array, ""]
    num_outer_iterations: Int[Array, ""]
    round_iterations: Int[Array, " rounds"]
    round_violation: Float[Array, " rounds"]
    multipliers: Float[Array, " c"]
    penalty: Float[Array, ""]
    continuous_miss: Float[Array, ""]
    substeps: int = eqx.field(static=True, default=1)

    def summary(self, problem: Problem | None = None) -> str:
        """A few lines on what the solve did: the result and what it means, the cost J, the
        constraint violation, the inner iterations and augmented-Lagrangian rounds (with the
        violation after each), and the range of the controls. Given the `problem` solved (shared
        by a batch), also J's running and terminal parts Σ h ℓ and Φ(q_N, ω_N), the norm
        |c(q_N, ω_N)| of the terminal constraint (the final state's distance to its target when
        c is the state less a target), and the fraction of control components at a bound (within
        10⁻⁶ of the box's width). A batch (from `jax.vmap`) gives the counts of each result and
        a line per member (the first ten).

        **Arguments:**

        - `problem`: the `Problem` that was solved, or None.

        **Returns:** the text; `print(solution.summary(problem))` shows it.
        """
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(self)):
            raise ValueError("ControlSolution.summary() needs concrete arrays; call it outside jax.jit / jax.vmap")
        if problem is not None and not isinstance(problem, Problem):
            raise TypeError(f"`problem` must be the s2jax.control.Problem solved; got {type(problem).__name__}")
        codes = np.asarray(self.result._value)
        extras = _problem_extras(self, problem, codes.shape) if problem is not None else None
        return (_batch_summary if codes.shape else _single_summary)(self, codes, extras)

    def __repr__(self) -> str:
        return solution_repr(self)


# Members listed one per line in the summary of a batch; past these, a count and the ranges.
_MAX_MEMBER_LINES = 10
# A control component counts as at a bound within this fraction of the box's width (the shooting
# solvers' tanh keeps controls strictly inside the box).
_AT_BOUND = 1e-6


def _meaning(name: str, rounds: int, max_rounds: int) -> str:
    """What a result means, for a solve that ran `rounds` of at most `max_rounds` rounds."""
    if name == "successful":
        return "converged: the inner solve met its tolerance and max|c| ≤ constraint_tolerance"
    if name != "optimisation_not_converged":
        return RESULTS._index_to_message[int(RESULTS._name_to_item[name]._value)]
    if rounds < max_rounds:
        return (
            f"stopped after round {rounds} of at most {max_rounds}: it lowered neither the constraint violation "
            "nor the cost, so the terminal constraint looks unreachable from there"
        )
    if max_rounds > 1:
        return (
            f"max_outer_steps = {max_rounds} rounds ran without meeting both tolerances (inner convergence and "
            "max|c| ≤ constraint_tolerance)"
        )
    return "after its only round, the inner solve had not converged within max_steps, or max|c| > constraint_tolerance"


def _problem_extras(solution: ControlSolution, problem: Problem, batch_shape) -> dict[str, np.ndarray]:
    """The numbers of the summary that need the problem, each of shape `batch_shape`."""
    size = int(np.prod(batch_shape, dtype=int))
    arrays = (solution.controls, solution.t, solution.q, solution.omega)
    controls, t, q, omega = (jnp.reshape(x, (size, *x.shape[len(batch_shape) :])) for x in arrays)

    def member(controls, t, q, omega):
        running = problem.running(t[:-1], q[:-1], omega[:-1], controls)
        c = problem.constraint(q[-1], omega[-1])
        return running, problem.terminal(q[-1], omega[-1]), jnp.sqrt(jnp.sum(c**2))

    running, terminal, distance = jax.vmap(member)(controls, t, q, omega)
    extras = {"running": running, "terminal": terminal, "distance": distance}
    if problem.bounded:
        lower, upper = problem.bounds(controls.shape)
        tolerance = _AT_BOUND * (upper - lower)
        at = (controls - lower <= tolerance) | (upper - controls <= tolerance)
        extras["at_bound"] = jnp.mean(jnp.reshape(at, (size, -1)), axis=1, dtype=controls.dtype)
    return {name: np.asarray(value).reshape(batch_shape) for name, value in extras.items()}


def _rounds(iterations, violations, outer) -> str:
    """"32 inner in 8 augmented-Lagrangian rounds; max|c| after each: …" (the first and last few)."""
    text = f"{iterations} inner in {outer} augmented-Lagrangian round{'s' if outer != 1 else ''}"
    if outer > 1:
        shown = [f"{v:.1e}" for v in violations[:outer]]
        if len(shown) > 6:
            shown = [*shown[:3], "…", *shown[-2:]]
        text += f"; max|c| after each: {', '.join(shown)}"
    return text


def _single_summary(solution: ControlSolution, codes, extras) -> str:
    name = _names(codes).item()
    controls = np.asarray(solution.controls)
    norms = np.sqrt(np.sum(controls.reshape(controls.shape[0], -1) ** 2, axis=1))
    outer = int(solution.num_outer_iterations)
    lines = [
        f"ControlSolution: RESULTS.{name} ({_meaning(name, outer, solution.round_violation.shape[-1])})",
        f"  cost J = {float(solution.cost):.10g}; constraint violation max|c| = "
        f"{float(solution.constraint_violation):.2e}",
        "  iterations: " + _rounds(int(solution.num_iterations), np.asarray(solution.round_violation), outer),
        f"  controls: {controls.shape[0]} steps of shape {controls.shape[1:]}, components from {controls.min():.4g} "
        f"to {controls.max():.4g}, max |u_k| = {norms.max():.4g}",
        f"  continuous-time miss {_miss(solution.continuous_miss)} (the continuous system driven by these controls, "
        f"against the model at {solution.substeps} sub-step{'s' if solution.substeps != 1 else ''} per step)",
    ]
    if extras is not None:
        lines.append(
            f"  J = running Σ h ℓ {float(extras['running']):.6g} + terminal Φ {float(extras['terminal']):.6g}; "
            f"terminal constraint |c(q_N, ω_N)| = {float(extras['distance']):.2e}"
        )
        if "at_bound" in extras:
            lines.append(f"  {100 * float(extras['at_bound']):.1f} % of the control components at a bound")
    return "\n".join(lines)


def _miss(miss) -> str:
    """The continuous-time miss as the summary writes it ("not estimated" for NaN: MPC's solves)."""
    return "not estimated" if np.isnan(miss) else f"{float(miss):.2e}"


def _member_line(solution: ControlSolution, name: str, index, extras) -> str:
    controls = np.asarray(solution.controls[index])
    text = (
        f"RESULTS.{name}; J = {float(solution.cost[index]):.6g}, max|c| = "
        f"{float(solution.constraint_violation[index]):.2e}, miss {_miss(solution.continuous_miss[index])}, "
        f"{int(solution.num_iterations[index])} iterations in "
        f"{int(solution.num_outer_iterations[index])} rounds, u from {controls.min():.4g} to {controls.max():.4g}"
    )
    if extras is not None:
        text += f"; |c(q_N, ω_N)| = {float(extras['distance'][index]):.2e}"
        if "at_bound" in extras:
            text += f", {100 * float(extras['at_bound'][index]):.1f} % at a bound"
    return text


def _batch_summary(solution: ControlSolution, codes, extras) -> str:
    names = _names(codes)
    shape = f" {codes.shape}" if codes.ndim > 1 else ""
    counts = dict(zip(*np.unique(names, return_counts=True)))
    others = ", ".join(f"{name}: {count}" for name, count in counts.items() if name != "successful")
    lines = [
        f"ControlSolution: a batch of {codes.size}{shape}, {solution.controls.shape[codes.ndim]} steps of controls of "
        f"shape {solution.controls.shape[codes.ndim + 1:]} each, the model at {solution.substeps} sub-step"
        f"{'s' if solution.substeps != 1 else ''} per step",
        f"  {counts.get('successful', 0)} of {codes.size} successful" + (f" ({others})" if others else ""),
    ]
    indices = list(np.ndindex(codes.shape))
    for index in indices[:_MAX_MEMBER_LINES]:
        label = index[0] if len(index) == 1 else index
        lines.append(f"  [{label}] " + _member_line(solution, names[index], index, extras))
    if len(indices) > _MAX_MEMBER_LINES:
        cost = np.asarray(solution.cost)
        iterations = np.asarray(solution.num_iterations)
        lines.append(
            f"  … {len(indices) - _MAX_MEMBER_LINES} more; over all members: J from {cost.min():.6g} to "
            f"{cost.max():.6g}, max|c| ≤ {np.asarray(solution.constraint_violation).max():.2e}, "
            f"{iterations.min()} to {iterations.max()} iterations"
        )
    return "\n".join(lines)
