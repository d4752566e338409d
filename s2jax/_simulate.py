"""`simulate`: one jitted `lax.scan` over the steps of an integrator."""

import math
import numbers
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax import lax

from ._adjoint import _NO_FAILURE, AbstractAdjoint, DirectAdjoint, ReversibleAdjoint
from ._custom_types import Array, ArrayLike, Float, Int, Lagrangian, Params
from ._integrators import (
    AbstractIntegrator,
    AdaptiveRungeKutta45,
    Composition,
    ExplicitVariationalIntegrator,
    VariationalIntegrator,
)
from ._results import RESULTS
from ._system import LagrangianSystem, check_lagrangian_form
from ._validation import INITIAL_STATE_TOLERANCE, validate_initial_state


class SimulationError(RuntimeError):
    """A step could not be taken (raised by `simulate(..., throw=True)`)."""


class Solution(eqx.Module):
    """The output of `simulate`.

    **Fields:**

    - `t`: the save times, shape (S,), S = num_steps // save_every + 1 (t = 0 included).
    - `q`, `omega`: the states at those times, shape (S, n, 3).
    - `result`: a `RESULTS` code; anything but `RESULTS.successful` means the simulation
      stopped early and the saved states after `failed_step` repeat the last good one.
    - `failed_step`: the index k of the first step k → k + 1 that failed, or −1.
    """

    t: Float[Array, " S"]
    q: Float[Array, "S n 3"]
    omega: Float[Array, "S n 3"]
    result: RESULTS
    failed_step: Int[Array, ""]


def simulate(
    lagrangian: Lagrangian,
    q0: Float[ArrayLike, "n 3"],
    omega0: Float[ArrayLike, "n 3"],
    params: Params,
    *,
    dt: float | Float[ArrayLike, ""],
    num_steps: int,
    integrator: AbstractIntegrator | AdaptiveRungeKutta45 = VariationalIntegrator(),
    save_every: int = 1,
    adjoint: AbstractAdjoint = DirectAdjoint(),
    throw: bool = True,
    progress: bool = False,
) -> Solution:
    """Simulate the system of `lagrangian` from (q0, ω0) for `num_steps` steps of size `dt`.

    The state is (q, ω) ∈ T(S²)ⁿ with q̇_i = ω_i × q_i and ω_i ⊥ q_i (002 (2.1)). The default
    integrator is the variational integrator (3.10)–(3.13) of Lee–Leok–McClamroch 2009.

    **Arguments:**

    - `lagrangian`: a pure function `L(q, qdot, params) -> scalar`, q and q̇ of shape (n, 3),
      of the form (2.2) ½ Σ M_ij q̇_i·q̇_j − V(q).
    - `q0`, `omega0`: the initial state, shape (n, 3); |q_i| = 1 and q_i·ω_i = 0 to 1e-12
      (use `s2jax.project_tangent` on rounded data).
    - `params`: any PyTree. Float and array leaves are traced (new values do not
      recompile); other leaves (ints, strings, tuples of ints) are static.
    - `dt`: the step h > 0 (for `AdaptiveRungeKutta45`, the spacing of the output grid).
    - `num_steps`: the number of steps; the horizon is num_steps · dt.
    - `integrator`: a `VariationalIntegrator` (default), `ExplicitVariationalIntegrator`,
      a Runge–Kutta baseline, or `AdaptiveRungeKutta45`.
    - `save_every`: save every k-th state; must divide `num_steps`.
    - `adjoint`: how reverse-mode differentiation stores the trajectory: `DirectAdjoint()`
      (default; every step), `CheckpointedAdjoint(block_size)` or `ReversibleAdjoint()`
      (memory independent of the number of steps; symmetric integrators only).
    - `throw`: raise `SimulationError` (naming the step and, under `jax.vmap`, the batch
      index) if a step fails; with `throw=False` the failure is reported in `result`.
    - `progress`: show a progress bar on stderr (updated at most ~50 times, from the device).

    Bad input raises `ValueError` before anything is compiled: wrong shapes, non-finite
    values, |q_i| ≠ 1 or q_i·ω_i ≠ 0 beyond 1e-12 (naming the body), dt ≤ 0, a Lagrangian not
    of the form (2.2), or a non-diagonal M for `ExplicitVariationalIntegrator`. Values that
    are traced (under `jax.jit` or `jax.vmap`) are checked inside the computation instead:
    a bad initial state gives `RESULTS.invalid_initial_state`.

    **Returns:** a `Solution`.
    """
    if not isinstance(adjoint, AbstractAdjoint):
        raise TypeError(f"`adjoint` must be an s2jax adjoint, got {adjoint!r}")
    if isinstance(adjoint, ReversibleAdjoint) and not _is_symmetric(integrator):
        raise ValueError(
            f"ReversibleAdjoint needs a symmetric integrator (a step with −h undoing a step with "
            f"h); {type(integrator).__name__} is not. Use DirectAdjoint or CheckpointedAdjoint."
        )
    if not isinstance(integrator, (AbstractIntegrator, AdaptiveRungeKutta45)):
        raise TypeError(f"`integrator` must be an s2jax integrator, got {integrator!r}")
    if not callable(lagrangian):
        raise TypeError("`lagrangian` must be a function L(q, qdot, params) -> scalar")
    num_steps = _positive_int(num_steps, "num_steps")
    save_every = _positive_int(save_every, "save_every")
    if num_steps % save_every:
        raise ValueError(f"save_every = {save_every} must divide num_steps = {num_steps}")
    q0 = jnp.asarray(q0)
    omega0 = jnp.asarray(omega0)
    if q0.ndim != 2 or q0.shape[-1] != 3:
        raise ValueError(f"q0 must have shape (n, 3), one unit vector per body; got {q0.shape}")
    if omega0.shape != q0.shape:
        raise ValueError(f"omega0 must have the shape of q0, {q0.shape}; got {omega0.shape}")
    if not jnp.issubdtype(q0.dtype, jnp.floating):
        q0 = q0.astype(float)
    omega0 = omega0.astype(q0.dtype)
    dt = jnp.asarray(dt, dtype=q0.dtype)
    if dt.shape != ():
        raise ValueError(f"dt must be a scalar; got shape {dt.shape}")
    params = jtu.tree_map(_trace_floats, params)

    concrete = not any(isinstance(x, jax.core.Tracer) for x in (q0, omega0, dt))
    if concrete:
        validate_initial_state(q0, omega0)
        if not bool(dt > 0) or not bool(jnp.isfinite(dt)):
            raise ValueError(f"dt must be a finite positive number; got {dt}")
        if not any(isinstance(x, jax.core.Tracer) for x in jtu.tree_leaves(params)):
            inertia = check_lagrangian_form(lagrangian, q0, omega0, params)
            if _requires_diagonal_inertia(integrator):
                off = inertia - np.diag(np.diag(inertia))
                if np.any(off != 0):
                    i, j = np.argwhere(off != 0)[0]
                    raise ValueError(
                        f"{type(integrator).__name__} needs a diagonal inertia matrix, but "
                        f"M[{i}, {j}] = {inertia[i, j]}; use VariationalIntegrator."
                    )

    solution = _integrate(
        lagrangian, integrator, adjoint, q0, omega0, params, dt, num_steps, save_every, progress
    )
    if throw:
        if concrete and not isinstance(solution.result._value, jax.core.Tracer):
            _raise_if_failed(solution.result._value, solution.failed_step, dt)
        else:
            solution = _error_if_failed(solution, dt)
    return solution


def _is_symmetric(integrator) -> bool:
    if isinstance(integrator, Composition):
        return _is_symmetric(integrator.integrator)
    return isinstance(integrator, (VariationalIntegrator, ExplicitVariationalIntegrator))


def _requires_diagonal_inertia(integrator) -> bool:
    base = getattr(integrator, "integrator", None)  # a `Composition` asks its base method
    if base is not None:
        return _requires_diagonal_inertia(base)
    return getattr(integrator, "requires_diagonal_inertia", False)


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive Python int; got {value!r}")
    return int(value)


def _trace_floats(leaf):
    if isinstance(leaf, (float, np.ndarray, np.floating, jax.Array)) and not isinstance(leaf, bool):
        return jnp.asarray(leaf)
    return leaf


@eqx.filter_jit
def _integrate(lagrangian, integrator, adjoint, q0, omega0, params, dt, num_steps, save_every, progress):
    system = LagrangianSystem(lagrangian)
    num_saves = num_steps // save_every
    t = dt * save_every * jnp.arange(num_saves + 1, dtype=dt.dtype)
    valid = (
        jnp.all(jnp.abs(jnp.linalg.norm(q0, axis=-1) - 1) <= INITIAL_STATE_TOLERANCE)
        & jnp.all(jnp.abs(jnp.sum(q0 * omega0, axis=-1)) <= INITIAL_STATE_TOLERANCE)
        & jnp.all(jnp.isfinite(q0))
        & jnp.all(jnp.isfinite(omega0))
        & (dt > 0)
    )
    result0 = RESULTS.where(valid, RESULTS.successful, RESULTS.invalid_initial_state)

    if isinstance(integrator, AdaptiveRungeKutta45):
        q, omega, result, _ = integrator.solve(system, q0, omega0, params, t)
        result = RESULTS.where(valid, result, RESULTS.invalid_initial_state)
        failed = jnp.where(result == RESULTS.successful, _NO_FAILURE, 0)
        return Solution(t, q, omega, result, failed)

    dynamic, static = eqx.partition(params, eqx.is_inexact_array)

    def init(q, omega, dynamic, dt):
        return integrator.init(system, q, omega, eqx.combine(dynamic, static), dt)

    def step(q, omega, state, dynamic, dt):
        return integrator.step(system, q, omega, eqx.combine(dynamic, static), dt, state)

    on_save = None if not progress else _progress_hook(num_saves, save_every)
    qs, omegas, result, failed_step = adjoint.loop(
        init, step, (q0, omega0, dynamic, dt), result0, num_saves, save_every, on_save
    )
    q = jnp.concatenate([q0[None], qs])
    omega = jnp.concatenate([omega0[None], omegas])
    return Solution(t, q, omega, result, failed_step)


def _progress_hook(num_saves: int, save_every: int):
    """A text progress bar, updated from the device at most every few hundred steps.

    The update is a `jax.debug.callback` inside a `lax.cond` on the save index, so the
    host is called at most ~50 times per simulation, never once per step.
    """
    total = num_saves * save_every
    every = max(math.ceil(200 / save_every), math.ceil(num_saves / 50))

    def show(index):
        done = (int(index) + 1) * save_every
        filled = round(30 * done / total)
        end = "\n" if done >= total else ""
        print(f"\r  [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} steps", end=end,
              file=sys.stderr, flush=True)

    def on_save(index):
        update = ((index + 1) % every == 0) | (index == num_saves - 1)
        lax.cond(update, lambda: jax.debug.callback(show, index), lambda: None)

    return on_save


def _failure_message(code, failed_step, dt, batch_index=None) -> str:
    where = "" if batch_index is None else f" (batch index {batch_index})"
    step = int(failed_step)
    if code == RESULTS.invalid_initial_state._value:
        return f"s2jax.simulate{where}: {RESULTS._index_to_message[int(code)]}"
    return (
        f"s2jax.simulate{where}: step {step} → {step + 1} (t = {step * float(dt):.6g}) "
        f"failed: {RESULTS._index_to_message[int(code)]}. Pass throw=False to get the "
        "trajectory up to that step and the result code."
    )


def _raise_if_failed(codes, failed_steps, dt):
    codes = np.asarray(codes)
    failed_steps = np.asarray(failed_steps)
    bad = np.argwhere(np.atleast_1d(codes != RESULTS.successful._value))
    if bad.size:
        index = tuple(int(i) for i in bad[0]) if codes.ndim else ()
        batch_index = index if codes.ndim else None
        raise SimulationError(
            _failure_message(codes[index], failed_steps[index], np.asarray(dt).reshape(-1)[0], batch_index)
        )


def _error_if_failed(solution: Solution, dt) -> Solution:
    """The in-graph version of `_raise_if_failed`, for traced inputs (jit, vmap).

    The check is one host callback after the scan, never one per step. Under `jax.vmap`
    the callback sees the whole batch (`vmap_method="broadcast_all"`), so it can name the
    failing batch index. An optimisation barrier ties the outputs to the check so it is
    not dead-code eliminated.
    """
    codes = solution.result._value

    def check(codes, failed_steps, dt):
        _raise_if_failed(codes, failed_steps, dt)
        return np.zeros(np.shape(codes), np.int32)

    token = jax.pure_callback(
        check,
        jax.ShapeDtypeStruct(codes.shape, jnp.int32),
        *lax.stop_gradient((codes, solution.failed_step, dt)),
        vmap_method="broadcast_all",
    )
    _, solution = lax.optimization_barrier((token, solution))
    return solution
