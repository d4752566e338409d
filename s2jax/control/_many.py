"""Many solves of one `Problem` in one call: a batch of initial states or guesses, and multi-start.

`jax.vmap(solve)` runs the members in lockstep: every member iterates until the slowest has
converged (the batched `while_loop`s), and on a CPU the batched iteration is no cheaper per member
than a single one (XLA's CPU backend does not vectorise these small, odd-shaped kernels across
the batch). Measured on 2 cores (`benchmarks/batched_solves.py`): 16 swing-ups took 85× one solve
under `vmap`, against 16× one solved in turn. `solve_many` therefore maps the members one after
another inside one compiled program (`lax.map`): each runs its own iterations, stops when it
converges, and its result is its single solve's; the batch is split over the available devices
(`jax.shard_map`, as `simulate_batch` does), so several host devices (or GPUs) solve their shares
at once. `batch="vmap"` keeps the lockstep form, for accelerators, where vectorising pays.
"""

import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec

from .._errors import error_if
from .._jit import filter_jit
from .._results import RESULTS
from .._sharding import on_callers_mesh
from .._validation import check_initial_state
from ._problem import ControlSolution, Problem
from ._solve import (
    _raise_if_failed,
    finish_in_graph,
    finishing_problem,
    iterate_in_graph,
    iteration_problem,
    refine,
    solve_once,
    with_count,
)
from ._solver import AbstractControlSolver, as_values

_AXIS = "members"


def solve_many(
    problem: Problem,
    q0,
    omega0,
    *,
    solver: AbstractControlSolver,
    init=None,
    batch: str = "map",
    devices: Sequence[jax.Device] | None = None,
    max_outer_steps: int = 20,
    constraint_tolerance: float = 1e-6,
    throw: bool = True,
) -> ControlSolution:
    """`solve` for each of B members, a member being an initial state, an initial guess, or both.

    **Arguments:**

    - `problem`, `solver`, `max_outer_steps`, `constraint_tolerance`: as for `solve`, shared.
    - `q0`, `omega0`: one initial state, (n, 3), or one per member, (B, n, 3).
    - `init`: the initial guess, one for all, (N, *control_shape), or one per member,
      (B, N, *control_shape); default zeros (moved into the bounds).
    - `batch`: `"map"` (default): the members one after another on each device, each with its own
      iterations, so a member's result is its single solve's; `"vmap"`: in lockstep
      (`jax.vmap`), every member iterating until the slowest converges — for GPUs.
    - `devices`: the devices to split the members over (default `jax.devices()`); B is padded with
      copies of the first member to a multiple of their number, the padding dropped. Members
      already sharded over a mesh of the caller's (`Explicit` axes included) are taken as they
      lie and their solutions put back on it; within a `jax.set_mesh` context the solutions go
      to the context's mesh (docs/batches.md, "Your own sharding").
    - `throw`: raise `SimulationError` naming the first member (batch index) that did not
      converge or failed; with `throw=False` each member's code is in `result`.

    Works under `jax.jit` and `jax.grad` (the optimum's derivatives, as `solve`'s, by implicit
    differentiation); the initial states are checked before compiling when they are concrete.
    `Problem.fidelity` is met as by `solve`: outside a trace, where a member's continuous miss is
    over it, the whole batch is solved again from its controls with the sub-steps that the
    largest such miss needs (`solutions.substeps`).

    **Returns:** a `ControlSolution` whose fields have a leading axis of size B.
    """
    solutions = _solve_members(problem, q0, omega0, solver, init, batch, devices, max_outer_steps, constraint_tolerance)
    if throw:
        codes = solutions.result._value
        if isinstance(codes, jax.core.Tracer):  # under the user's jit or grad: checked in the graph, as `solve` does
            # one answer for the whole batch (`error_if` answers in its first operand's shape)
            failed = jnp.any(codes != RESULTS.successful._value)
            solutions = error_if(solutions, failed, lambda _, codes: _raise_if_failed(codes), failed, codes)
        else:
            _raise_if_failed(np.asarray(codes))
    return solutions


def _solve_members(
    problem, q0, omega0, solver, init, batch, devices, max_outer_steps, constraint_tolerance, *, refined=True
) -> ControlSolution:
    """`solve_many`'s solutions, refined to the fidelity if `refined`, without raising; outside
    any `jax.set_mesh` context, the solutions then put on the caller's mesh or the context's."""
    if batch not in ("map", "vmap"):
        raise ValueError(f"batch must be 'map' or 'vmap'; got {batch!r}")
    run = functools.partial(
        _solve_outside_mesh_context, problem, solver, batch, devices, max_outer_steps, constraint_tolerance, refined
    )
    return on_callers_mesh("solve_many", (q0, omega0, init), run)


def _solve_outside_mesh_context(
    problem, solver, batch, devices, max_outer_steps, constraint_tolerance, refined, q0, omega0, init
) -> ControlSolution:
    q0, omega0, init, size = _members(problem, q0, omega0, init)
    if not any(isinstance(x, jax.core.Tracer) for x in (q0, omega0)):  # else checked in the graph
        for b in range(size):
            try:
                check_initial_state(q0[b], omega0[b], problem.dt)
            except ValueError as error:
                raise ValueError(f"solve_many, member {b}: {error}") from None
    devices = jax.devices() if devices is None else list(devices)
    mesh = Mesh(np.array(devices), (_AXIS,))

    def run(problem, init):
        planned = problem.planned(q0[0], omega0[0])
        values, tolerance = as_values(solver, constraint_tolerance, q0.dtype)
        iterated = _iterate_many(
            iteration_problem(planned, solver), values, q0, omega0, init, max_outer_steps, tolerance, mesh, batch
        )
        finishing = finishing_problem(planned, (q0, omega0, init))
        return with_count(_finish_many(finishing, q0, omega0, iterated, mesh, batch), planned)

    solutions = run(problem, init)
    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((problem, q0, omega0, init)))
    if refined and not traced:
        # one count of sub-steps for the batch: the one its largest miss needs
        solutions = refine(run, problem, q0[0], omega0[0], solutions)
    return solutions


def multi_start(
    problem: Problem,
    q0,
    omega0,
    inits,
    *,
    solver: AbstractControlSolver,
    devices: Sequence[jax.Device] | None = None,
    max_outer_steps: int = 20,
    constraint_tolerance: float = 1e-6,
    throw: bool = True,
) -> tuple[ControlSolution, ControlSolution]:
    """Solve `problem` from one initial state and several initial guesses, and keep the best.

    iLQR and the shooting methods find a local optimum near their initial guess; the ready
    pendubot swing-up, for one, has several. The starts are solved by `solve_many` (one call,
    each start its own iterations, the starts split over the devices) at the problem's own
    sub-steps; only the best is then refined, as `solve` refines, to meet `Problem.fidelity`
    (solved again from its controls, which may move it to a nearby optimum).

    **Arguments:**

    - `problem`, `q0`, `omega0`, `solver`, `devices`, `max_outer_steps`, `constraint_tolerance`:
      as for `solve_many`, with one initial state.
    - `inits`: the guesses, shape (S, N, *control_shape).
    - `throw`: raise `SimulationError` if no start converged, or the best one's refined solve did
      not (or did not meet the fidelity within `MAX_SUBSTEPS`).

    **Returns:** `(best, all)`: the converged solution of least cost J (if none converged, the
    start of least J, with its code), refined, and every start's solution (leading axis S; a
    converged start whose miss is over the fidelity has the code
    `RESULTS.continuous_miss_above_fidelity`).
    """
    inits = jnp.asarray(inits, dtype=float)
    if inits.ndim != len(problem.control_shape) + 2:
        raise ValueError(
            f"inits must have shape (S, num_steps, *control_shape) = (S, {problem.num_steps}, "
            f"{', '.join(map(str, problem.control_shape))}); got {inits.shape}"
        )
    solutions = _solve_members(
        problem, q0, omega0, solver, inits, "map", devices, max_outer_steps, constraint_tolerance, refined=False
    )
    codes = np.asarray(solutions.result._value)
    converged = (codes == RESULTS.successful._value) | (codes == RESULTS.continuous_miss_above_fidelity._value)
    costs = np.where(converged | ~converged.any(), np.asarray(solutions.cost), np.inf)
    best = jtu.tree_map(lambda x: x[int(np.argmin(costs))], solutions)
    if converged.any():
        q0, omega0 = jnp.asarray(q0, dtype=float), jnp.asarray(omega0, dtype=float)

        def run(problem, init):
            return solve_once(problem, solver, q0, omega0, init, max_outer_steps, constraint_tolerance)

        best = refine(run, problem, q0, omega0, best)
    if throw:
        _raise_if_failed(np.asarray(best.result._value))
    return best, solutions


def _members(problem, q0, omega0, init):
    """(q0, ω0, init) each with a leading member axis of the batch's size B, and B."""
    q0, omega0 = jnp.asarray(q0, dtype=float), jnp.asarray(omega0, dtype=float)
    shape = (problem.num_steps, *problem.control_shape)
    init = None if init is None else jnp.asarray(init, dtype=q0.dtype)
    sizes = {}
    for name, x, single in (("q0", q0, 2), ("omega0", omega0, 2), ("init", init, len(shape))):
        if x is not None and x.ndim == single + 1:
            sizes[name] = x.shape[0]
        elif x is not None and x.ndim != single:
            raise ValueError(f"{name} must have {single} dimensions, or {single + 1} with a member axis; got {x.shape}")
    if not sizes:
        raise ValueError("solve_many needs a member axis on q0, omega0 or init; for one problem call solve")
    if len(set(sizes.values())) > 1:
        raise ValueError(f"the member axes disagree: {sizes}")
    size = next(iter(sizes.values()))
    if size == 0:
        raise ValueError("solve_many got no members (a member axis of size 0)")

    def spread(x, single):
        return x if x.ndim == single + 1 else jnp.broadcast_to(x, (size, *x.shape))

    q0, omega0 = spread(q0, 2), spread(omega0, 2)
    if omega0.shape[1:] != q0.shape[1:]:
        raise ValueError(f"omega0 must have the shape of q0 per member, {q0.shape[1:]}; got {omega0.shape[1:]}")
    if init is None:
        init = problem.clip(jnp.zeros(shape, q0.dtype))
    init = spread(init, len(shape))
    if init.shape[1:] != shape:
        raise ValueError(f"`init` must have shape (num_steps, *control_shape) = {shape} per member; got {init.shape}")
    return q0, omega0, init, size


def _over_members(function, members: tuple, mesh: Mesh, batch: str):
    """`function(*member)` for each member (the leading axis of every leaf of `members`), the
    members split over the mesh's devices (B padded with copies of the first member to a
    multiple of their number, the padding dropped), one after another (`lax.map`) or in
    lockstep (`jax.vmap`) on each."""
    size = jtu.tree_leaves(members)[0].shape[0]
    padded = math.ceil(size / mesh.size) * mesh.size

    def pad(x):
        return jnp.concatenate([x, jnp.broadcast_to(x[:1], (padded - size, *x.shape[1:]))])

    def local(*members):
        if batch == "vmap":
            return jax.vmap(function)(*members)
        return lax.map(lambda member: function(*member), members)

    spec = PartitionSpec(_AXIS)
    # check_vma=False as in `simulate_batch`: no collectives, and the solver's loops start their
    # carries from constants that become per-member values
    results = jax.shard_map(local, mesh=mesh, in_specs=(spec,) * len(members), out_specs=spec, check_vma=False)(
        *jtu.tree_map(pad, members)
    )
    return jtu.tree_map(lambda x: x[:size], results)


@filter_jit
def _iterate_many(problem, solver, q0, omega0, init, max_outer_steps, tolerance, mesh, batch):
    """Each member's `iterate_in_graph` (as `solve_once`'s iterations: one program for every
    `substeps` of an iLQR solve)."""

    def one(q0, omega0, init):
        return iterate_in_graph(problem, solver, q0, omega0, init, max_outer_steps, tolerance)

    return _over_members(one, (q0, omega0, init), mesh, batch)


@filter_jit
def _finish_many(problem, q0, omega0, iterated, mesh, batch):
    """Each member's `finish_in_graph`: its solution from the controls its iterations found.

    Rematerialised (`jax.checkpoint`): differentiated, the members' loop keeps only each member's
    inputs, and the backward pass re-simulates the member before pulling back through it. Without
    it the linearised loop carried every member's residuals, and XLA compiled that loop whole with
    its simulations inside (`xla_cpu_small_while_loop_byte_threshold`, docs/performance.md):
    `jax.grad` of two 20-step swing-ups (`tests/test_solve_many.py::test_under_grad`) compiled
    it for 21.2 s, against 0.8 s (and 4.0 s for the backward pass) rematerialised, the same
    gradient bit for bit (`benchmarks/compile_times.py`'s `control_gradient`: first call 31.0 →
    11.2 s). Undifferentiated, it is the same computation."""
    finish = jax.checkpoint(lambda *member: finish_in_graph(problem, *member))
    return _over_members(finish, (q0, omega0, iterated), mesh, batch)
