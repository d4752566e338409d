"""`simulate`: one jitted `lax.scan` over the steps of an integrator."""

import numbers

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax import lax

from ._custom_types import Array, ArrayLike, Float, Int, Lagrangian, Params
from ._integrators import AbstractIntegrator, AdaptiveRungeKutta45, VariationalIntegrator
from ._results import RESULTS
from ._system import LagrangianSystem, check_lagrangian_form
from ._validation import INITIAL_STATE_TOLERANCE, validate_initial_state

_NO_FAILURE = -1


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
    throw: bool = True,
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
    - `throw`: raise `SimulationError` (naming the step and, under `jax.vmap`, the batch
      index) if a step fails; with `throw=False` the failure is reported in `result`.

    Bad input raises `ValueError` before anything is compiled: wrong shapes, non-finite
    values, |q_i| ≠ 1 or q_i·ω_i ≠ 0 beyond 1e-12 (naming the body), dt ≤ 0, a Lagrangian not
    of the form (2.2), or a non-diagonal M for `ExplicitVariationalIntegrator`. Values that
    are traced (under `jax.jit` or `jax.vmap`) are checked inside the computation instead:
    a bad initial state gives `RESULTS.invalid_initial_state`.

    **Returns:** a `Solution`.
    """
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
                        f"{type(integrator).__name__} needs a diagonal inertia matrix "
                        f"((3.17)–(3.18) of Lee–Leok–McClamroch 2009), but M[{i}, {j}] = "
                        f"{inertia[i, j]}; use VariationalIntegrator."
                    )

    solution = _integrate(lagrangian, integrator, q0, omega0, params, dt, num_steps, save_every)
    if throw:
        if concrete and not isinstance(solution.result._value, jax.core.Tracer):
            _raise_if_failed(solution.result._value, solution.failed_step, dt)
        else:
            solution = _error_if_failed(solution, dt)
    return solution


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
def _integrate(lagrangian, integrator, q0, omega0, params, dt, num_steps, save_every):
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
    failed0 = jnp.where(valid, _NO_FAILURE, 0)

    if isinstance(integrator, AdaptiveRungeKutta45):
        q, omega, result, _ = integrator.solve(system, q0, omega0, params, t)
        result = RESULTS.where(valid, result, RESULTS.invalid_initial_state)
        failed = jnp.where(result == RESULTS.successful, _NO_FAILURE, 0)
        return Solution(t, q, omega, result, failed)

    state0 = integrator.init(system, q0, omega0, params, dt)

    def step(carry, _):
        q, omega, state, result, failed_step, k = carry
        q1, omega1, state1, step_result = integrator.step(system, q, omega, params, dt, state)
        running = result == RESULTS.successful
        accept = running & (step_result == RESULTS.successful)
        q, omega, state = jtu.tree_map(
            lambda new, old: jnp.where(accept, new, old), (q1, omega1, state1), (q, omega, state)
        )
        failed_step = jnp.where(running & ~accept, k, failed_step)
        result = RESULTS.where(running, step_result, result)
        return (q, omega, state, result, failed_step, k + 1), None

    def save(carry, _):
        carry, _ = lax.scan(step, carry, length=save_every)
        return carry, (carry[0], carry[1])

    carry0 = (q0, omega0, state0, result0, failed0, jnp.array(0))
    (_, _, _, result, failed_step, _), (qs, omegas) = lax.scan(save, carry0, length=num_saves)
    q = jnp.concatenate([q0[None], qs])
    omega = jnp.concatenate([omega0[None], omegas])
    return Solution(t, q, omega, result, failed_step)


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
        codes,
        solution.failed_step,
        dt,
        vmap_method="broadcast_all",
    )
    _, solution = lax.optimization_barrier((token, solution))
    return solution
