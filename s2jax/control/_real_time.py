"""Real-time iterations: model predictive control at one iLQR iteration per control step.

Diehl, Bock & Schlöder's real-time iteration (2005) takes, at each control step, one Gauss–Newton
step of the optimal control problem from the new measured state, linearised around the previous
solution shifted by the steps applied, instead of solving to convergence. In iLQR's terms
(`_ilqr.py`) one iteration is:

1. *preparation*, which needs no measurement: `expand` around the shifted prediction (q̄, ω̄, ū) —
   A_k, B_k and the costs' derivatives — and the Riccati recursion `backward`, giving k_k, K_k;
2. *feedback*: `forward` from the measured state (q, ω) with the full step,
   u_k = ū_k + k_k + K_k δx_k, δx_k the chart of the state reached around (q̄_k, ω̄_k): its first
   controls are applied, its trajectory is the new prediction.

More iterations per step re-expand around that rollout (ordinary undamped iLQR iterations from the
measured state). An iteration whose Q_uu is not positive definite (μ I is added, raised ×10 on each
refusal and lowered ÷10 on each success, as in `ILQR`) or whose rollout fails is refused: the
prediction is kept and its controls applied (`RESULTS.real_time_iteration_refused`). After the
iteration the prediction is shifted by the s steps applied; its tail is extended by s steps of the
model with the last control held.

A terminal constraint enters as the last augmented-Lagrangian term of the first, converged solve,
λ·c + ρ/2 |c|² with its λ and ρ kept (a soft terminal constraint over the receding horizon).
"""


import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .._custom_types import Array, Float, Int
from .._jit import compiler_options, filter_jit
from .._results import RESULTS
from .._validation import check_initial_state, check_state_arguments, initial_state_is_valid, positive_int
from ._ilqr import ILQR, backward, expand, forward
from ._problem import Problem
from ._solve import _prepare, _raise_if_failed, solve_in_graph
from ._solver import as_values


class RealTimeState(eqx.Module):
    """The prediction a real-time iteration starts from: the trajectory (q̄, ω̄) of the controls ū
    (shifted by the steps applied since it was made), the augmented-Lagrangian λ and ρ of the
    terminal constraint, and the regularisation μ."""

    q: Float[Array, "N+1 n 3"]
    omega: Float[Array, "N+1 n 3"]
    controls: Float[Array, "N ..."]
    multipliers: Float[Array, " c"]
    penalty: Float[Array, ""]
    mu: Float[Array, ""]


def first_state(problem: Problem, solver, q0, omega0, init, max_outer_steps, tolerance, regularisation):
    """`(state, solution)`: the converged solve from (q0, ω0) that the iterations start from.

    Like `receding_horizon`'s solves it does not estimate its continuous-time miss (NaN) nor hold
    it to `Problem.fidelity`: the loop is closed, and the iterations re-plan from measured states.
    """
    solution = solve_in_graph(problem, solver, q0, omega0, init, max_outer_steps, tolerance, estimate_miss=False)
    mu = jnp.asarray(regularisation, q0.dtype)
    state = RealTimeState(solution.q, solution.omega, solution.controls, solution.multipliers, solution.penalty, mu)
    return state, solution


def real_time_step(
    problem: Problem, state: RealTimeState, q, omega, *, iterations: int, steps: int, regularisation
) -> tuple[Float[Array, "s ..."], RealTimeState, RESULTS, Int[Array, ""]]:
    """`iterations` real-time iterations from the measured (q, ω), then the shift by `steps`.

    **Returns:** `(controls, state, result, accepted)`: the controls to apply over the next
    `steps` steps, the shifted prediction, `RESULTS.successful` or why not
    (`real_time_iteration_refused`, or `invalid_initial_state` for a measured state that is not a
    finite point of T(S²)ⁿ, after which the prediction's controls are applied), and the number of
    iterations accepted.
    """
    valid = initial_state_is_valid(q, omega, jnp.asarray(problem.dt, q.dtype))

    def iteration(_, carry):
        state, accepted = carry
        expansion = expand(problem, state.q, state.omega, state.controls, state.multipliers, state.penalty)
        ks, gains, _, ok = backward(problem, expansion, state.controls, state.mu)
        nominal = (state.q, state.omega, state.controls, expansion.basis)
        q1, omega1, controls1, failed = forward(problem, nominal, q, omega, ks, gains, jnp.ones((), q.dtype))
        accept = valid & ok & ~failed
        previous = (state.q, state.omega, state.controls)
        q1, omega1, controls1 = jax.tree.map(
            lambda new, old: jnp.where(accept, new, old), (q1, omega1, controls1), previous
        )
        mu = jnp.where(accept, jnp.maximum(state.mu / 10, regularisation), 10 * state.mu)
        state = RealTimeState(q1, omega1, controls1, state.multipliers, state.penalty, mu)
        return state, accepted + accept.astype(int)

    state, accepted = lax.fori_loop(0, iterations, iteration, (state, jnp.array(0)))
    result = RESULTS.where(accepted == iterations, RESULTS.successful, RESULTS.real_time_iteration_refused)
    result = RESULTS.where(valid, result, RESULTS.invalid_initial_state)
    return state.controls[:steps], shifted(problem, state, steps), result, accepted


def shifted(problem: Problem, state: RealTimeState, steps: int) -> RealTimeState:
    """The prediction `steps` steps later: ū_s … ū_{N−1} then ū_{N−1} held, and their trajectory,
    extended past q̄_N by `steps` steps of the model (the last state held if one fails)."""

    def extend(y, k):
        (q1, omega1), result = problem.step(k * problem.dt, *y, state.controls[-1])
        y1 = jax.tree.map(lambda new, old: jnp.where(result == RESULTS.successful, new, old), (q1, omega1), y)
        return y1, y1

    ks = jnp.arange(problem.num_steps, problem.num_steps + steps, dtype=state.q.dtype)
    _, (q_tail, omega_tail) = lax.scan(extend, (state.q[-1], state.omega[-1]), ks)
    controls = jnp.concatenate([state.controls[steps:], jnp.repeat(state.controls[-1:], steps, axis=0)])
    q = jnp.concatenate([state.q[steps:], q_tail])
    omega = jnp.concatenate([state.omega[steps:], omega_tail])
    return RealTimeState(q, omega, controls, state.multipliers, state.penalty, state.mu)


class RealTimeController:
    """Model predictive control by real-time iterations, for a plant outside s2jax (hardware, another
    simulator): `controls = controller(q, omega)` at each control step.

    Construction solves `problem` from (q0, ω0) to convergence (compiled once, with `solve`'s
    checks); each call then takes `iterations` real-time iterations (`receding_horizon`'s
    `real_time_iterations`, `_real_time.py`) from the measured state and returns the controls to
    apply over the next `steps_per_solve` steps of h = `problem.dt`. Each call is one compiled
    function of the state (JAX's C++ dispatch, nothing re-planned or re-checked on the host), so
    measured states never recompile. The program is shared by every controller of an equal
    problem (costs compared by value, the params' and bounds' values passed in), so a controller
    rebuilt with new params or from a re-run notebook cell does not compile it again; nor do new
    float settings of the solver (`regularisation`, `rtol`, ...) or a new `constraint_tolerance`.

    **Arguments:**

    - `problem`, `q0`, `omega0`: the optimal control problem over the horizon and the state the
      first solve starts from (checked as `solve` checks it).
    - `solver`: an `ILQR` (default `ILQR()`), for the first solve; its `regularisation` is the
      iterations' smallest μ.
    - `init`: the first solve's initial guess (default zeros, moved into the bounds).
    - `iterations`: real-time iterations per call (default 1).
    - `steps_per_solve`: controls returned per call, s (1 ≤ s ≤ num_steps).
    - `max_outer_steps`, `constraint_tolerance`: the first solve's, as for `solve`.

    **Calling** `controller(q, omega)`: the controls for the next s steps from the measured state,
    shape (s, *control_shape). Raises `ValueError` naming the body if (q, ω) is not a finite point
    of T(S²)ⁿ (the code is read back each call: a device-to-host copy of one integer). A refused
    iteration (Q_uu not positive definite, or its rollout failed) still returns the prediction's
    controls; `result` says so and `refused` counts them.

    `reset(q, omega)` solves again from a new state, reusing the compiled programs.

    **Attributes:** `solution`, the first solve's `ControlSolution`; `state`, the prediction the
    next call starts from (a `RealTimeState`); `result`, the last call's `RESULTS`; `refused`, the
    calls with a refused iteration so far.
    """

    def __init__(
        self,
        problem: Problem,
        q0,
        omega0,
        *,
        solver=None,
        init=None,
        iterations: int = 1,
        steps_per_solve: int = 1,
        max_outer_steps: int = 20,
        constraint_tolerance: float = 1e-6,
    ):
        solver = ILQR() if solver is None else solver
        if not isinstance(solver, ILQR):
            raise ValueError(f"real-time iterations are iLQR iterations: pass an s2jax.control.ILQR; got {solver!r}")
        positive_int(iterations, "RealTimeController(iterations)")
        if not isinstance(problem, Problem):
            raise TypeError(f"`problem` must be an s2jax.control.Problem; got {type(problem).__name__}")
        if not 1 <= steps_per_solve <= problem.num_steps:
            raise ValueError(f"steps_per_solve must be in 1..{problem.num_steps}; got {steps_per_solve}")
        q0, omega0, dt = check_state_arguments(q0, omega0, problem.dt)
        check_initial_state(q0, omega0, dt)
        self.problem, _ = _prepare(problem, q0, omega0, None)
        self.dt, self._solver, self._outer = dt, solver, (max_outer_steps, constraint_tolerance)
        self.reset(q0, omega0, init=init)
        self._values, self._step = _compiled_step(self.problem, iterations, steps_per_solve, solver.regularisation)

    def reset(self, q, omega, *, init=None) -> None:
        """Solve again to convergence from (q, ω) (a new start, e.g. after a hand-over from another
        controller) and iterate from that solution; the compiled programs are reused. `init` is
        the solve's guess (default zeros, moved into the bounds). Raises as construction does."""
        q, omega, _ = check_state_arguments(q, omega, self.dt)
        check_initial_state(q, omega, self.dt)
        if hasattr(self, "state") and q.shape != self.state.q.shape[1:]:
            bodies = self.state.q.shape[1]
            raise ValueError(f"reset: the controller's system has {bodies} bodies; got q of shape {q.shape}")
        _, init = _prepare(self.problem, q, omega, init)
        max_outer_steps, tolerance = self._outer
        solver, tolerance = as_values(self._solver, tolerance, q.dtype)  # new values: no new program
        self.state, self.solution = _first_state(
            self.problem, solver, q, omega, init, max_outer_steps, tolerance, solver.regularisation
        )
        _raise_if_failed(self.solution.result._value)
        self.result, self.refused = RESULTS.successful, 0

    def __call__(self, q, omega) -> Float[Array, "s ..."]:
        controls, state, code = self._step(self._values, self.state, q, omega)
        code = code.item()  # on the host: `item` is the cheapest read of a scalar (the Stepper's too)
        if code == RESULTS.invalid_initial_state._value:
            check_initial_state(q, omega, self.dt)  # names the body
            raise ValueError("RealTimeController: the measured state is not a finite point of T(S²)ⁿ")
        self.state = state
        self.result = RESULTS.successful if code == RESULTS.successful._value else RESULTS.real_time_iteration_refused
        self.refused += int(code != RESULTS.successful._value)
        return controls

    def __repr__(self) -> str:
        return f"RealTimeController({self.problem.num_steps} steps of h = {float(self.dt)}, refused {self.refused})"


_first_state = filter_jit(first_state)
_STEPS = {}  # (the problem's structure and non-array leaves, options) -> its jitted controller step
_MAX_STEPS = 32  # the oldest entry goes beyond this (with it, its compiled programs)


def _compiled_step(problem: Problem, iterations: int, steps: int, regularisation):
    """`(values, step)`: the problem's arrays with the regularisation floor μ, and `step(values,
    state, q, ω)`, one `jax.jit` function for every problem with the same structure and non-array
    leaves (equal costs compare equal by value), so that equal problems, whatever their μ, share
    its compiled program. Not `eqx.filter_jit`: its dispatch costs ~70 µs a call, `jax.jit`'s a few."""
    arrays, static = eqx.partition(problem, eqx.is_array)
    leaves, treedef = jax.tree_util.tree_flatten(static)
    key = (treedef, tuple(leaves), iterations, steps)
    try:
        step = _STEPS.get(key)
    except TypeError:  # a leaf that cannot be hashed: a program of its own
        key, step = None, None
    if step is None:
        options = {"iterations": iterations, "steps": steps}

        def step(values, state, q, omega):
            arrays, regularisation = values
            return _controller_step(
                eqx.combine(arrays, static), state, q, omega, regularisation=regularisation, **options
            )

        step = jax.jit(step, compiler_options=compiler_options() or None)
        if key is not None:
            if len(_STEPS) >= _MAX_STEPS:
                del _STEPS[next(iter(_STEPS))]
            _STEPS[key] = step
    return (arrays, jnp.asarray(regularisation, float)), step


def _controller_step(problem, state, q, omega, *, iterations, steps, regularisation):
    q, omega = jnp.asarray(q, state.q.dtype), jnp.asarray(omega, state.q.dtype)
    controls, new_state, result, _ = real_time_step(
        problem, state, q, omega, iterations=iterations, steps=steps, regularisation=regularisation
    )
    # a measured state that is not one leaves the prediction as it was
    keep = result == RESULTS.invalid_initial_state
    new_state = jax.tree.map(lambda old, new: jnp.where(keep, old, new), state, new_state)
    return controls, new_state, result._value
