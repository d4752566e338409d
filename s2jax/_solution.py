"""`Solution`: what `simulate` returns (the saved states, the result code, the failed step)."""

import equinox as eqx

from ._custom_types import Array, Float, Int, Lagrangian, Params
from ._results import RESULTS
from ._summary import solution_repr, summary


class Solution(eqx.Module):
    """The output of `simulate`.

    **Fields:**

    - `t`: the save times, shape (S,), S = num_steps // save_every + 1 (t = 0 included).
    - `q`, `omega`: the states at those times, shape (S, n, 3).
    - `result`: a `RESULTS` code; anything but `RESULTS.successful` means the simulation
      stopped early and the saved states after `failed_step` repeat the last good one, q and ω
      bitwise (for a code found before the first step, the initial state as given).
    - `failed_step`: the index k of the first step k → k + 1 that failed, or −1.
    - `integrator`: the class name of the integrator that ran (static), e.g.
      "VariationalIntegrator" or "GeneralVariationalIntegrator".

    `print(sol.summary())` says in a few lines what happened (`repr(sol)` gives the shapes,
    not the arrays); `s2jax.io.save_solution("run.npz", sol, params=params)` writes it for
    numpy alone to read.
    """

    t: Float[Array, " S"]
    q: Float[Array, "S n 3"]
    omega: Float[Array, "S n 3"]
    result: RESULTS
    failed_step: Int[Array, ""]
    integrator: str = eqx.field(static=True)

    def summary(self, lagrangian: Lagrangian | None = None, params: Params | None = None) -> str:
        """A few lines on what the run did: the bodies, saved states and horizon; per batch
        member (under `jax.vmap` or `simulate_batch`) the result, the first failed step, the
        largest unit-length error max ||q_i| − 1| and tangency error max |q_i·ω_i| over the
        saved states; and, given `lagrangian` and `params` (shared by the batch), the energy
        drift max_k |E_k − E₀| (absolute and relative to |E₀|).

        **Returns:** the text; `print(sol.summary())` shows it.
        """
        return summary(self, lagrangian, params)

    def __repr__(self) -> str:
        return solution_repr(self)
