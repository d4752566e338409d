"""`fit(progress=True)`: a heartbeat on stderr while the compiled fit runs, then a line per stage.

The fit is one compiled program, so what it did is read from its result once it returns: the
program is the same with and without progress and holds no callback.
"""

import sys

import jax
import numpy as np

from .._optimisation.progress import Heartbeat
from ._program import FitResult, fit_in_graph


def fit_showing_progress(program, arguments, weights) -> FitResult:
    """The fit with its heartbeat on stderr, then a line per stage (`progress=True`)."""
    problem, *_, options = arguments
    method = "Levenberg–Marquardt" if options.optimizer == "levenberg_marquardt" else "optimiser"
    print(f"s2jax.fit: starting ({method}, {problem.segments} segment(s); a first fit traces and compiles first) …",
          file=sys.stderr, flush=True)
    with Heartbeat("s2jax.fit", fit_in_graph.__name__, running="fitting") as heartbeat:
        heartbeat.phase("tracing")
        programs = program.cache_size()
        result = program(*arguments)
        compiled = program.cache_size() > programs
        heartbeat.phase("fitting")
        jax.block_until_ready(result)
    seconds = heartbeat.durations
    if compiled:
        phases = [f"tracing {seconds['tracing']:.3g} s", f"compiling {seconds.get('compiling', 0.0):.3g} s"]
    else:
        phases = ["the compiled program reused"]
    phases.append(f"fitting {seconds['fitting']:.3g} s")
    lines = [f"s2jax.fit: {sum(seconds.values()):.3g} s: {', '.join(phases)}"]
    history = np.asarray(result.loss_history)
    counts = np.asarray(result.stage_iterates)
    names = [f"{method}, continuity weight {w:g}" for w in weights]
    if counts.size > len(weights):
        names.append("Gauss–Newton with the jumps held at zero")
    start = 0
    for index, (name, count) in enumerate(zip(names, counts)):
        values = history[start : start + count]
        start += count
        span = f"loss {values[0]:.6g} → {values[-1]:.6g}" if count else "no iterate"
        lines.append(f"s2jax.fit: stage {index + 1}/{len(names)}, {name}: {count} iterates, {span}")
    final = history[np.isfinite(history)][-1] if np.any(np.isfinite(history)) else np.nan
    lines.append(f"s2jax.fit: done, loss {final:.6g}, {'converged' if bool(result.converged) else 'not converged'}")
    print("\n".join(lines), file=sys.stderr, flush=True)
    return result
