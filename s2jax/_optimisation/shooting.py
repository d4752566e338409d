"""Multiple shooting on T(S²)ⁿ: one trajectory cut into segments, each simulated from a start of its own.

A window of S·L steps is cut into S segments of L steps. Segment 1 starts at a given state
(or a fitted one); the starts of the others are unknowns, held in the chart of `chart.py`, and
the jumps between the end of a segment and the start of the next are driven to zero by the
problem built on top (a penalty in `s2jax.fit`, constraints in trajectory optimisation). Over
a long window a trajectory depends so sensitively on its parameters or controls that a single
simulation's loss is a narrow valley among plateaus; short segments keep each simulation close
to its linearisation.
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from .._custom_types import Array, Bool, Float, Params
from .._plan import Plan
from .._results import RESULTS
from .._simulate import simulate_plan
from .chart import chart_to_state


class MultipleShooting(eqx.Module):
    """S segments of `steps_per_segment` steps with starts in a chart of T(S²)ⁿ.

    **Fields:**

    - `plan`: the planned system (its force included) and integrator (`s2jax._plan.plan`, made
      before compiling), so every segment runs the step that `simulate` runs.
    - `dt`: the step h.
    - `steps_per_segment`: L.
    - `q0`, `omega0`: the start of segment 1 when it is not an unknown.
    - `base_q`, `base_omega`, `basis`: the chart's base points and tangent bases of the unknown
      starts: segments 1..S if `free_first_start`, else 2..S (`chart.tangent_basis`).
    - `free_first_start`: whether segment 1's start is an unknown too.
    """

    plan: Plan
    dt: Float[Array, ""]
    steps_per_segment: int = eqx.field(static=True)
    q0: Float[Array, "n 3"]
    omega0: Float[Array, "n 3"]
    base_q: Float[Array, "F n 3"]
    base_omega: Float[Array, "F n 3"]
    basis: Float[Array, "F n 2 3"]
    free_first_start: bool = eqx.field(static=True)

    def starts(self, coordinates) -> tuple[Float[Array, "S n 3"], Float[Array, "S n 3"]]:
        """The start of every segment, from the chart coordinates (a, b) of the unknown ones."""
        q, omega = chart_to_state(self.base_q, self.base_omega, self.basis, *coordinates)
        if not self.free_first_start:
            q = jnp.concatenate([self.q0[None], q])
            omega = jnp.concatenate([self.omega0[None], omega])
        return q, omega

    def run(
        self, params: Params, coordinates, controls: Array | None = None
    ) -> tuple[Float[Array, "S L+1 n 3"], Float[Array, "S L+1 n 3"], Float[Array, "S-1 2 n 3"], Bool[Array, ""]]:
        """Simulate every segment (vmapped) with `params`, the system's force driven by `controls`,
        shape (S, L, …): the controls of each segment's steps (None without controls).

        **Returns:** `(q, omega, jumps, failed)`: the states of each segment, shape
        (S, L + 1, n, 3); the jumps (q_end − q_start, T(ω_end − ω_start)) between consecutive
        segments, T = L h, so that ω-jumps are angles (δω moves q by ~T δω); and whether a
        step of any segment failed.
        """
        q_start, omega_start = self.starts(coordinates)

        def run(q, omega, u):
            solution = simulate_plan(
                self.plan, q, omega, params, dt=self.dt, num_steps=self.steps_per_segment, controls=u
            )
            return solution.q, solution.omega, solution.result != RESULTS.successful

        q, omega, failed = jax.vmap(run)(q_start, omega_start, controls)
        duration = self.dt * self.steps_per_segment
        jumps = jnp.stack([q[:-1, -1] - q_start[1:], duration * (omega[:-1, -1] - omega_start[1:])], axis=1)
        return q, omega, jumps, jnp.any(failed)
