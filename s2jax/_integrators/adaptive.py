"""An adaptive Dormand–Prince 4(5) baseline (diffrax `Dopri5` with a PID controller).

002 compares its variational integrator with 'a 4(5)-th order variable step size Runge–Kutta
method' (MATLAB's ode45). That method has no fixed step, so `simulate` calls `solve` once for
the whole horizon and reads the solution at the save times from its dense output.

diffrax is an optional dependency (the `baselines` extra), imported when `solve` first runs:
`import s2jax` and constructing `AdaptiveRungeKutta45` work without it. See
docs/integrators/runge_kutta.md.
"""

from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from .._results import RESULTS
from .._system import AbstractSystem
from .._validation import positive_int
from .base import AbstractAdaptiveIntegrator, check_finite


def _diffrax():
    """diffrax, or an ImportError that says which extra installs it."""
    try:
        import diffrax
    except ImportError as error:
        kind = ModuleNotFoundError if isinstance(error, ModuleNotFoundError) else ImportError
        raise kind(
            "AdaptiveRungeKutta45 needs diffrax: pip install 's2jax[baselines]'", name=error.name
        ) from error
    return diffrax


def _max_norm(tree):
    """The componentwise max norm with which MATLAB's ode45 tests its error estimate."""
    return jnp.max(jnp.stack([jnp.max(jnp.abs(x)) for x in jax.tree_util.tree_leaves(tree)]))


class AdaptiveRungeKutta45(AbstractAdaptiveIntegrator):
    """Dormand–Prince 4(5) with step-size control on (2.9)–(2.11); no projection.

    The error estimate is tested componentwise in the max norm, as MATLAB's `ode45` does
    (diffrax's default RMS norm is looser). The defaults rtol = 1e-3, atol = 1e-6 are
    `ode45`'s; 002 states no tolerance, and its RK45 figures for Example 1 are matched by
    rtol = 3e-5, atol = 3e-8 (see `python -m s2jax double-pendulum`).

    If the solve stops early (too many steps, a step size underflow, a non-finite state), the
    save times it did not reach repeat the last state it reached, as a failed fixed step does.

    Runs on diffrax, an optional dependency: `pip install 's2jax[baselines]'`.
    """

    rtol: float = 1e-3
    atol: float = 1e-6
    max_steps: int = 1_000_000

    system_type: ClassVar[type[AbstractSystem]] = AbstractSystem
    order: ClassVar[int] = 5
    is_symmetric: ClassVar[bool] = False
    requires_diagonal_inertia: ClassVar[bool] = False
    velocity_dependent_forces: ClassVar[bool] = True

    def __check_init__(self):
        positive_int(self.max_steps, "AdaptiveRungeKutta45(max_steps)")
        tolerances = {"rtol": self.rtol, "atol": self.atol}
        if any(isinstance(x, jax.core.Tracer) for x in tolerances.values()):
            return  # traced tolerances: diffrax takes them as they are
        for name, value in tolerances.items():
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"AdaptiveRungeKutta45: {name} must be finite and ≥ 0; got {value}")
        if self.rtol == 0 and self.atol == 0:
            raise ValueError("AdaptiveRungeKutta45: rtol and atol are both 0; no step could meet them")

    def solve(self, system, ts, y0, args):
        diffrax = _diffrax()

        def vector_field(t, y, _):
            return system.vector_field(t, *y, args)

        solution = diffrax.diffeqsolve(
            diffrax.ODETerm(vector_field),
            diffrax.Dopri5(),
            t0=ts[0],
            t1=ts[-1],
            dt0=None,
            y0=y0,
            saveat=diffrax.SaveAt(ts=ts),
            stepsize_controller=diffrax.PIDController(rtol=self.rtol, atol=self.atol, norm=_max_norm),
            max_steps=self.max_steps,
            throw=False,
        )
        q, omega = solution.ys
        # diffrax fills the save times after a failure with inf; so does a state that blew up.
        reached = jnp.all(jnp.isfinite(q), axis=(1, 2)) & jnp.all(jnp.isfinite(omega), axis=(1, 2))
        last = jnp.cumsum(reached) - 1  # index of the last save reached, up to each save time
        failed_save = jnp.where(jnp.all(reached), -1, jnp.argmin(reached))
        q, omega = q[jnp.maximum(last, 0)], omega[jnp.maximum(last, 0)]
        ok = solution.result == diffrax.RESULTS.successful
        result = RESULTS.where(ok, RESULTS.successful, RESULTS.adaptive_solver_failed)
        result = check_finite(result, q, omega)
        result = RESULTS.where(jnp.all(reached), result, RESULTS.adaptive_solver_failed)
        return (q, omega), result, failed_save, solution.stats["num_steps"]
