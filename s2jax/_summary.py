"""The text of `Solution.summary()` and `repr(Solution)`: what a run did, without its arrays."""

import dataclasses

import jax
import numpy as np

from ._diagnostics import energy, tangency_error, unit_length_error
from ._results import RESULTS, _names, _results_repr

# A batch prints one line per member up to this many; beyond, the first ones and a count.
_MAX_MEMBER_LINES = 10


def _short(value) -> str:
    """An array as `f64[1001,2,3]` (its values only when it has at most 8), a result code as
    `RESULTS.successful` (`_results_repr`); others by repr."""
    if isinstance(value, RESULTS):
        return _results_repr(value)
    if isinstance(value, jax.core.Tracer):
        return f"traced {value.aval.str_short()}"
    if isinstance(value, (np.ndarray, jax.Array)):
        value = np.asarray(value)
        if value.size <= 8 and value.dtype.kind in "iub":
            return repr(value.tolist())
        kind = {"f": "f", "i": "i", "u": "u", "b": "bool", "c": "c"}.get(value.dtype.kind, value.dtype.name)
        bits = "" if kind == "bool" else str(8 * value.dtype.itemsize)
        return f"{kind}{bits}[{','.join(map(str, value.shape))}]"
    return repr(value)


def solution_repr(solution) -> str:
    """`Solution(t=f64[1001], q=f64[1001,2,3], …, result=RESULTS.successful, failed_step=-1)`."""
    fields = (f"{f.name}={_short(getattr(solution, f.name))}" for f in dataclasses.fields(solution))
    return f"{type(solution).__name__}({', '.join(fields)})"


def _member_line(name, failed_step, unit, tangent, drift, relative) -> str:
    text = f"RESULTS.{name}"
    if name != "successful":
        text += f" (first failed step {failed_step} → {failed_step + 1}; later states repeat the last good one)"
    text += f"; max ||q_i| − 1| = {unit:.2e}, max |q_i·ω_i| = {tangent:.2e}"
    if drift is not None:
        text += f"; max |E − E₀| = {drift:.3e} (relative {relative:.2e})"
    return text


def summary(solution, lagrangian=None, params=None) -> str:
    """See `Solution.summary`."""
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(solution)):
        raise ValueError("Solution.summary() needs concrete arrays; call it outside jax.jit / jax.vmap")
    if (lagrangian is None) != (params is None):
        raise ValueError("pass both `lagrangian` and `params` for the energy drift, or neither")
    t = np.asarray(solution.t)
    q = np.asarray(solution.q)
    omega = np.asarray(solution.omega)
    codes = np.asarray(solution.result._value)
    failed = np.asarray(solution.failed_step)
    batch_shape = codes.shape
    num_saves, n = q.shape[-3], q.shape[-2]
    rows = t.reshape(-1, t.shape[-1])
    if np.all(rows == rows[0]):
        spacing = f", every {rows[0, 1] - rows[0, 0]:.6g}" if num_saves > 1 else ""
        times = f"t = {rows[0, 0]:.6g} … {rows[0, -1]:.6g}{spacing}"
    else:  # a batch over the step size
        times = f"t = {rows[0, 0]:.6g} … between {rows[:, -1].min():.6g} and {rows[:, -1].max():.6g}"
    shape = f" {batch_shape}" if len(batch_shape) > 1 else ""
    batch = f"a batch of {codes.size}{shape}, " if batch_shape else ""
    lines = [
        f"Solution: {batch}{n} bod{'y' if n == 1 else 'ies'}, {num_saves} saved states"
        f"{' each' if batch_shape else ''}, {times}"
    ]
    lines.append(f"  integrator: {solution.integrator}")
    unit = np.asarray(unit_length_error(q)).max(axis=-1)
    tangent = np.asarray(tangency_error(q, omega)).max(axis=-1)
    if lagrangian is not None:
        e = np.asarray(energy(lagrangian, q, omega, params))
        drift = np.abs(e - e[..., :1]).max(axis=-1)
        relative = drift / np.maximum(np.abs(e[..., 0]), np.finfo(e.dtype).tiny)
    else:
        drift = relative = np.full(batch_shape, None)
    names = _names(codes)
    if not batch_shape:
        lines.append("  " + _member_line(names.item(), int(failed), unit, tangent, drift.item(), relative.item()))
        if lagrangian is not None:
            lines.append(f"  E₀ = {float(e[0]):.10g}")
        return "\n".join(lines)
    ok = int(np.sum(names == "successful"))
    lines.append(f"  {ok} of {codes.size} successful")
    indices = list(np.ndindex(batch_shape))
    for index in indices[:_MAX_MEMBER_LINES]:
        label = index[0] if len(index) == 1 else index
        lines.append(
            f"  [{label}] "
            + _member_line(names[index], int(failed[index]), unit[index], tangent[index], drift[index], relative[index])
        )
    if len(indices) > _MAX_MEMBER_LINES:
        lines.append(f"  … {len(indices) - _MAX_MEMBER_LINES} more; over all members: "
                     f"max ||q_i| − 1| = {unit.max():.2e}, max |q_i·ω_i| = {tangent.max():.2e}")
        bad = [(i, str(names[i])) for i in indices if names[i] != "successful"]
        if bad:
            lines.append(f"  failed members: {', '.join(f'{i}: {name}' for i, name in bad[:20])}")
    return "\n".join(lines)
