"""The augmented-Lagrangian loop of trajectory optimisation.

Every solver minimises, over its own decision variables, the augmented objective J(u) + λ·c + ρ/2 |c|²,
where c collects the equality constraints (the terminal constraint c(q_N, ω_N) = 0 and, for multiple
shooting, the jumps between segments). `solve` updates the multipliers between inner solves,
λ ← λ + ρ c, and raises ρ tenfold when |c| has not fallen by 4× (Nocedal & Wright, Algorithm 17.4, in
its simplest form). A round that leaves |c| above the tolerance and lowers neither |c| nor J (by more
than `STALL_FRACTION` of their previous values) makes no progress; one whose inner solve converged, or
two in a row whatever the inner solve did, end the loop, not converged: the constraint cannot be met
from where the solver is (an unreachable target, bounds too tight), and more rounds would only raise
ρ. Everything runs inside one compiled computation, so `jax.vmap` over initial states solves a batch
in one call. See docs/api/control.md.
"""

import jax.numpy as jnp
from jax import lax

from .._custom_types import Array, Float


def augmented_lagrangian(constraint, multipliers, penalty):
    """λ·c + ρ/2 |c|²."""
    return jnp.dot(multipliers, constraint) + 0.5 * penalty * jnp.dot(constraint, constraint)


def violation(constraint) -> Float[Array, ""]:
    return jnp.max(jnp.abs(constraint), initial=0.0)


# A round makes progress when it lowers the violation max|c| or the cost J by more than this fraction
# of the previous round's value. Far below the 4× fall per round that the penalty update asks for
# (a hard swing-up's slowest rounds, before a breakthrough, still lower |c| by 5e-3), and above the
# creep of controls squashed (tanh) against a bound that the target is beyond, 1e-9 to 4e-8 per round.
STALL_FRACTION = 1e-6


def run_augmented_lagrangian(
    solver,
    problem,
    q0,
    omega0,
    decision,
    *,
    max_outer_steps: int,
    tolerance: float,
    penalty: float,
):
    """Inner solves and multiplier updates until the constraints hold to `tolerance`.

    Nothing here calls the host (no callback): the program is the same whatever `solve`'s
    `progress`, and JAX's persistent compilation cache can store it. What `progress` prints
    comes from the per-round records returned here.

    A round after the first that leaves the violation above `tolerance` and lowers neither it nor
    the cost J (the round's last objective less λ·c + ρ/2 |c|²) by more than `STALL_FRACTION` of
    its previous value makes no progress; one whose inner solve converged, or the second in a row,
    stops the loop (`stalled`): with ρ raised tenfold and nothing moving, the constraint cannot be
    met from here. (A round cut off by `max_steps` alone may be on its way to a breakthrough, hence
    the second chance.)

    **Returns:** `(decision, history, iterations, violations, num_outer, converged, multipliers,
    penalty)`: the decision variables, the augmented objective after each inner iteration (NaN past
    the last), the inner iterations of each round (0 past the last) and the violation max|c| after
    each (NaN past the last), both of shape (rounds,), the rounds run, whether the last one met the
    tolerances, and the λ and ρ of the last round's objective (before its update).
    """
    num_constraints = solver.constraints(problem, q0, omega0, decision).size
    max_outer = max_outer_steps if num_constraints else 1
    history0 = jnp.full(((max_outer + 1) * solver.max_steps,), jnp.nan, q0.dtype)

    def cond(carry):
        *_, outer, _, done, stalled, _, _, _, _ = carry
        return (outer < max_outer) & ~done & ~stalled

    def body(carry):
        decision, multipliers, rho, history, iterations, violations, outer, total, *_ = carry
        previous, previous_cost, idle = carry[-4:-1]
        used = (multipliers, rho)
        decision, objective, steps, converged, constraint = solver.minimise_with_constraints(
            problem, q0, omega0, decision, multipliers, rho
        )
        history = lax.dynamic_update_slice(history, objective, (total,))
        size = violation(constraint)
        iterations = iterations.at[outer].set(steps)
        violations = violations.at[outer].set(size)
        last = objective[jnp.maximum(steps - 1, 0)]
        cost = last - augmented_lagrangian(constraint, multipliers, rho)
        lower_violation = size < (1.0 - STALL_FRACTION) * previous
        lower_cost = previous_cost - cost > STALL_FRACTION * jnp.abs(previous_cost)
        multipliers = multipliers + rho * constraint
        rho = jnp.where(size > 0.25 * previous, 10.0 * rho, rho)
        done = converged & (size <= tolerance)
        # The constraint met, only the inner solve is left to converge: that is not a stall.
        no_progress = (outer > 0) & (size > tolerance) & ~lower_violation & ~lower_cost
        stalled = no_progress & (converged | idle)
        return (
            decision, multipliers, rho, history, iterations, violations, outer + 1, total + steps, done, stalled, size,
            cost, no_progress, used,
        )

    initial = violation(solver.constraints(problem, q0, omega0, decision))
    multipliers = jnp.zeros((num_constraints,), q0.dtype)
    rho = jnp.asarray(penalty, q0.dtype)
    carry = (
        decision, multipliers, rho, history0,
        jnp.zeros((max_outer,), int), jnp.full((max_outer,), jnp.nan, q0.dtype), jnp.array(0), jnp.array(0),
        jnp.array(False), jnp.array(False), initial, jnp.asarray(jnp.inf, q0.dtype), jnp.array(False),
        (multipliers, rho),
    )
    decision, _, _, history, iterations, violations, outer, _, done, *_, used = lax.while_loop(cond, body, carry)
    return decision, history[: max_outer * solver.max_steps], iterations, violations, outer, done, *used
