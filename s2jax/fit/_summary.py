"""`FitResult.summary()`: what a fit found, in a few lines (one per member of a batch)."""

import jax
import numpy as np

from .._results import _names

# Members listed one per line in the summary of a batch.
_MAX_MEMBER_LINES = 10


def _values(params, errors, index=()) -> str:
    """"key = value ± error" for each fitted key (each entry of an array-valued one)."""
    parts = []
    for key, error in errors.items():
        value, error = np.asarray(params[key])[index], np.asarray(error)[index]
        for entry in np.ndindex(value.shape):
            label = key + (str(list(entry)) if value.shape else "")
            parts.append(f"{label} = {value[entry]:.6g} ± {error[entry]:.2g}")
    return ", ".join(parts)


def _goodness(chi_squared, limit) -> str:
    if not np.isfinite(chi_squared):
        return "χ²/ν not tested (no noise level apart from the residuals: give noise_std)"
    verdict = "fits" if chi_squared <= limit else "does NOT fit"
    return f"χ²/ν = {chi_squared:.3g} (limit {limit:.3g}: the model {verdict})"


def fit_summary(result) -> str:
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(result)):
        raise ValueError("FitResult.summary() needs concrete arrays; call it outside jax.jit / jax.vmap")
    names = _names(np.asarray(result.result._value))
    converged = np.asarray(result.converged)
    iterates = np.sum(np.isfinite(np.asarray(result.loss_history)), axis=-1)
    if names.ndim == 0:
        stages = ", ".join(str(int(c)) for c in np.asarray(result.stage_iterates))
        miss = float(result.continuous_miss)
        fidelity = (
            f"continuous-time miss {miss:.2e} at {result.substeps} sub-step(s) per step" if np.isfinite(miss)
            else "continuous-time miss not checked (fidelity=None)"
        )
        return "\n".join([
            f"s2jax.fit: RESULTS.{names.item()}, {'converged' if converged else 'NOT converged'} "
            f"({int(iterates)} loss values; per stage: {stages})",
            f"  {_values(result.params, result.standard_errors)}",
            f"  noise σ = {float(result.noise_std):.3g}; "
            f"{_goodness(float(result.reduced_chi_squared), float(result.reduced_chi_squared_limit))}",
            f"  largest jump between segments {float(result.continuity_defect):.1e}; {fidelity}",
        ])
    order = sorted(np.unique(names), key=lambda name: (name != "successful", name))
    counts = {name: int(np.sum(names == name)) for name in order}
    lines = [
        f"s2jax.fit: a batch of {names.size}: "
        + ", ".join(f"{count} RESULTS.{name}" for name, count in counts.items())
        + f"; {int(np.sum(converged))} converged"
    ]
    for flat in range(min(names.size, _MAX_MEMBER_LINES)):
        index = np.unravel_index(flat, names.shape)
        chi = float(np.asarray(result.reduced_chi_squared)[index])
        lines.append(
            f"  [{', '.join(map(str, index))}] {'converged' if converged[index] else 'NOT converged'}: "
            f"{_values(result.params, result.standard_errors, index)}; χ²/ν {chi:.3g}"
        )
    if names.size > _MAX_MEMBER_LINES:
        lines.append(f"  … and {names.size - _MAX_MEMBER_LINES} more")
    return "\n".join(lines)
