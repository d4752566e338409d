"""Errors raised from inside compiled computations, in a way compilation cannot remove."""

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax import lax

from ._results import RESULTS


class SimulationError(RuntimeError):
    """A simulation, or its gradient, could not be computed as asked (`throw=True`).

    Raised as it is when `simulate` runs eagerly. Inside `jax.jit`, `jax.vmap` or `jax.grad`
    the check runs on the host during the computation, and JAX re-raises the error as a
    `jax.errors.JaxRuntimeError` whose message ends with this one.
    """


def error_if(tree, failed, check: Callable[..., None], *operands):
    """`tree`, after `check(*operands)` has run on the host wherever `failed` holds.

    `failed` (a boolean array, computed in the graph) says whether `check` would raise; `check`
    raises to report the error. The host is called only then: a `lax.cond` on `jnp.any(failed)`
    holds the callback, so a run that succeeds pays no host round trip (its cost, measured: see
    docs/performance.md, "Host checks"). Under `jax.vmap` the
    condition is batched, JAX then runs both branches as a select, and the host sees the whole
    batch (`vmap_method="broadcast_all"`), so a message can name the batch index.

    In the branch that calls the host, every leaf of `tree` is selected on the callback's answer
    (which is always "fine": the callback raises otherwise), so compilation cannot remove the
    check as dead code: an unused callback result, or one tied to the outputs only by an
    optimisation barrier, is deleted by XLA. The operands are not differentiated.
    """
    operands = lax.stop_gradient(operands)
    shape = jnp.shape(operands[0])  # the answer has the shape of the first operand
    host = _host(check)

    def checked(tree, operands):
        fine = jax.pure_callback(host, jax.ShapeDtypeStruct(shape, jnp.bool_), *operands, vmap_method="broadcast_all")
        return jtu.tree_map(lambda x: jnp.where(fine, x, _poison(x)), tree)

    try:
        return lax.cond(jnp.any(lax.stop_gradient(failed)), checked, lambda tree, _: tree, tree, operands)
    except (ValueError, TypeError) as error:  # JAX's words where it cannot batch the callback (JAX 0.10.2)
        if "is not found in mesh" not in str(error) and "into SdyArray" not in str(error):
            raise
        raise ValueError(
            "s2jax checks for failures on the host (throw=True), which JAX cannot batch under a jax.vmap over "
            "an array sharded on a mesh's Explicit axis, or inside a jax.set_mesh context. Pass throw=False and "
            "read the solution's `result` (docs/batches.md, 'Your own sharding')."
        ) from error


@functools.lru_cache(maxsize=256)
def _host(check: Callable[..., None]) -> Callable:
    """The host side of `error_if` for `check`: one function per `check`, for JAX keys the
    callback's program by it (outside `jax.jit`, under `jax.vmap`, it is compiled on its own:
    a new function per call compiled it again at every call)."""

    def host(*operands):
        check(*operands)
        return np.ones(np.shape(operands[0]), np.bool_)

    return host


@functools.lru_cache(maxsize=256)
def failure_check(integrator: str) -> Callable[..., None]:
    """`raise_if_failed` for the named integrator: one function per name (`_host`)."""
    return functools.partial(raise_if_failed, integrator=integrator)


def _poison(x):
    """What an output would be replaced with if the check could fail: NaN, the largest int, or False."""
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.full_like(x, jnp.nan)
    if x.dtype == jnp.bool_:
        return jnp.zeros_like(x)
    return jnp.full_like(x, jnp.iinfo(x.dtype).max)


# Why a step of each integrator is too large (`RESULTS.step_too_large`): each has its own condition.
_STEP_TOO_LARGE = {
    "ExplicitVariationalIntegrator": (
        "1 − |a_i|² < 0 in (3.17) of Lee–Leok–McClamroch 2009, |a_i| = |h ω_i − h²/(2 M_ii) q_i × ∂V/∂q_i|: "
        "no rotation of q_i moves it by a_i × q_i"
    ),
    "VariationalIntegrator": (
        "no rotation solves the Cayley equation (3.16) of Lee–Leok–McClamroch 2009: it asks some q_i for a "
        "tangential displacement |t_i| ≥ 1 (for one body, |d| > M in 2M f/(1 + |f|²) = d)"
    ),
    "Rattle": (
        "RATTLE's position constraints |q_{i,k+1}|² = 1 have no root for this h (for a diagonal M, the "
        "quadratic of some body has a negative discriminant), or their root turns a body by a right angle "
        "or more in one step (q_{i,k+1}·q_i ≤ 0)"
    ),
    "StormerVerlet": (
        "the quadratic (h²/4)|x_n|² s² − (1 + h c·x_n) s + |c|² = 0 for s = |v_{n+1/2}|² (004, after (26)) "
        "has no real root, or β = 1 + h c·x_n ≤ 0"
    ),
}


# The implicit equations whose Newton iterations failed (`RESULTS.newton_failed`), where the
# generic message's "for VariationalIntegrator, (3.16)" would name the wrong ones.
_NEWTON_FAILED = {
    "VariationalIntegrator": "the Cayley equation (3.16) of Lee–Leok–McClamroch 2009",
    "Rattle": "RATTLE's position constraints |q_{i,k+1}|² = 1 in its n multipliers",
}


def _reason(code, integrator) -> str:
    """The message of `code`; for `step_too_large` and `newton_failed`, said of `integrator` (a
    class name): its own condition, its own equations."""
    if integrator is None:
        return RESULTS._index_to_message[int(code)]
    if code == RESULTS.newton_failed._value:
        equations = _NEWTON_FAILED.get(integrator, "its implicit step equations")
        return (
            f"Newton's method did not solve {equations} for a {integrator} step within its iteration cap; "
            "try a smaller step"
        )
    if code != RESULTS.step_too_large._value:
        return RESULTS._index_to_message[int(code)]
    condition = _STEP_TOO_LARGE.get(integrator, "its step equations have no solution at this step size")
    return f"the step is too large for {integrator}: {condition}; try a smaller step"


def failure_message(code, failed_step, dt, batch_index=None, integrator: str | None = None) -> str:
    """What `SimulationError` says of a run that failed with `code` at `failed_step`.

    `integrator`, the class name of the integrator that ran (`Solution.integrator`), picks the
    condition that `RESULTS.step_too_large` stands for; without it the generic message is used.
    """
    where = "" if batch_index is None else f" (batch index {batch_index})"
    step = int(failed_step)
    before_first_step = (
        RESULTS.invalid_initial_state, RESULTS.invalid_parameters, RESULTS.invalid_controls,
        RESULTS.not_lagrangian_form, RESULTS.inertia_not_positive_definite,
        RESULTS.inertia_not_diagonal,
    )
    if any(code == c._value for c in before_first_step):
        message = f"s2jax.simulate{where}: before the first step: {RESULTS._index_to_message[int(code)]}"
        if code == RESULTS.not_lagrangian_form._value:
            message += (
                ". To integrate a Lagrangian of any form with traced params, pass "
                "s2jax.GeneralLagrangianSystem(lagrangian) or integrator=s2jax.GeneralVariationalIntegrator()"
            )
        return message
    return (
        f"s2jax.simulate{where}: step {step} → {step + 1} (t = {step * float(dt):.6g}) "
        f"failed: {_reason(code, integrator)}. Pass throw=False to get the "
        "trajectory up to that step and the result code."
    )


def raise_if_failed(codes, failed_steps, dt, integrator: str | None = None):
    """Raise `SimulationError` (`failure_message`) for the first code that is not successful."""
    codes = np.asarray(codes)
    failed_steps = np.asarray(failed_steps)
    bad = np.argwhere(np.atleast_1d(codes != RESULTS.successful._value))
    if bad.size:
        index = tuple(int(i) for i in bad[0]) if codes.ndim else ()
        batch_index = index if codes.ndim else None
        raise SimulationError(
            failure_message(codes[index], failed_steps[index], np.asarray(dt).reshape(-1)[0], batch_index, integrator)
        )


def raise_for_codes(codes, caller: str, *, named: bool = False, hints: dict | None = None) -> None:
    """Raise `SimulationError` for the first code in `codes` (one, or a batch) that is not
    `RESULTS.successful`: "`caller` (batch index (i,)): message", the code's name first if
    `named`, then `hints[code]` if given, and how to get the result instead (throw=False).
    The solvers' `throw=True` (`control.solve`, `fit`), eagerly or from `error_if`."""
    codes = np.asarray(codes)
    bad = np.argwhere(np.atleast_1d(codes != RESULTS.successful._value))
    if not bad.size:
        return
    index = tuple(int(i) for i in bad[0]) if codes.ndim else ()
    where = f" (batch index {index})" if codes.ndim else ""
    code = int(codes[index])
    name = f"RESULTS.{next(n for n, item in RESULTS._name_to_item.items() if item._value == code)}: " if named else ""
    hint = (hints or {}).get(code, "")
    raise SimulationError(
        f"{caller}{where}: {name}{RESULTS._index_to_message[code]}{hint}. Pass throw=False to get the result with "
        "its code."
    )
