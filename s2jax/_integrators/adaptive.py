"""An adaptive Dormand–Prince 4(5) baseline (diffrax `Dopri5` with a PID controller).

002 compares its variational integrator with 'a 4(5)-th order variable step size Runge–Kutta
method' (MATLAB's ode45). That method has no fixed step, so `simulate` calls `solve` once for
the whole horizon and reads the solution at the save times from its dense output.
"""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp

from .._custom_types import Array, Float
from .._results import RESULTS
from .._system import LagrangianSystem
from .base import check_finite


def _max_norm(tree):
    """The componentwise max norm with which MATLAB's ode45 tests its error estimate."""
    return jnp.max(jnp.stack([jnp.max(jnp.abs(x)) for x in jax.tree_util.tree_leaves(tree)]))


class AdaptiveRungeKutta45(eqx.Module):
    """Dormand–Prince 4(5) with step-size control on (2.9)–(2.11); no projection.

    The error estimate is tested componentwise in the max norm, as MATLAB's `ode45` does
    (diffrax's default RMS norm is looser). The defaults rtol = 1e-3, atol = 1e-6 are
    `ode45`'s; 002 states no tolerance, and its RK45 figures for Example 1 are matched by
    rtol = 3e-5, atol = 3e-8 (see `python -m s2jax double-pendulum`).
    """

    rtol: float = 1e-3
    atol: float = 1e-6
    max_steps: int = 1_000_000

    def solve(
        self,
        system: LagrangianSystem,
        q0: Float[Array, "n 3"],
        omega0: Float[Array, "n 3"],
        params,
        ts: Float[Array, " S"],
    ):
        """Integrate from ts[0] to ts[-1]; return (q, ω) at ts, a `RESULTS` code, the step count."""
        inertia = system.inertia(q0, params)

        def vector_field(t, y, args):
            return system.vector_field(*y, params, inertia)

        solution = diffrax.diffeqsolve(
            diffrax.ODETerm(vector_field),
            diffrax.Dopri5(),
            t0=ts[0],
            t1=ts[-1],
            dt0=None,
            y0=(q0, omega0),
            saveat=diffrax.SaveAt(ts=ts),
            stepsize_controller=diffrax.PIDController(rtol=self.rtol, atol=self.atol, norm=_max_norm),
            max_steps=self.max_steps,
            throw=False,
        )
        q, omega = solution.ys
        ok = solution.result == diffrax.RESULTS.successful
        result = RESULTS.where(ok, RESULTS.successful, RESULTS.adaptive_solver_failed)
        return q, omega, check_finite(result, q, omega), solution.stats["num_steps"]
