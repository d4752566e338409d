"""Derivatives of fitted parameters by implicit differentiation at the optimum.

With the jumps between segments at zero (the refinement holds them there), the multiple-shooting
trajectory is the single-shooting one, and the fitted unknowns x* (the parameters' unconstrained
values, and the start's chart coordinates with `fit_initial_state`) minimise

    f(x; d) = ½ |h(run(x; d)) − y|²,    d = (y, the known params, q0, ω0),

a single simulation of the window. So ∇ₓf(x*(d); d) = 0, and by the implicit function theorem

    dx*/dd · ḋ = −(∇²ₓₓf)⁻¹ (∇²ₓd f · ḋ),

the Hessian by forward mode over the reverse-mode gradient (p tangents), the mixed term by one
forward-mode derivative of the gradient. The iterations are never differentiated: the fit runs
on values with their derivatives stopped, and only this rule carries tangents (`optimum`).
A fit that failed, did not converge, or ended with jumps left (several segments and no
refinement: the optimum of a penalised loss, not of f) gets NaN tangents, never a wrong one.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._custom_types import Array, Bool, Float
from .._optimisation.chart import chart_to_state, tangent_basis
from .._simulate import simulate_plan


class Inputs(eqx.Module):
    """What the optimum depends on, as differentiated: the data, the known params, the start."""

    observations: Float[Array, "J ..."]
    known: dict
    q0: Float[Array, "n 3"]
    omega0: Float[Array, "n 3"]


def single_shooting_loss(problem, inputs: Inputs, x: Float[Array, " p"]) -> Float[Array, ""]:
    """f(x; d): half the squared data residuals of one run of the window from (q0, ω0), or from the
    start in the chart around it that x's last 4n entries give (`fit_initial_state`)."""
    num_params = sum(int(np.prod(shape)) for shape in problem.shapes)
    params = {**problem.parameters(x[:num_params]), **inputs.known}
    q0, omega0 = inputs.q0, inputs.omega0
    if problem.fit_initial_state:
        a, b = jnp.split(x[num_params:], 2)
        n = q0.shape[0]
        q0, omega0 = chart_to_state(q0, omega0, tangent_basis(q0), a.reshape(n, 2), b.reshape(n, 2))
    run = simulate_plan(problem.plan, q0, omega0, params, dt=problem.dt, num_steps=problem.segments * problem.length)
    at = problem.segment * problem.length + problem.step
    predicted = jax.vmap(problem.observe, in_axes=(0, 0, None))(run.q[at], run.omega[at], params)
    return 0.5 * jnp.sum((predicted - inputs.observations) ** 2)


def _zeros_for_none(primals, tangents):
    """The tangents with each `None` (not differentiated) of an array primal replaced by zeros."""

    def is_none(t):
        return t is None

    leaves, structure = jax.tree_util.tree_flatten(primals, is_leaf=is_none)
    tangent_leaves = jax.tree_util.tree_flatten(tangents, is_leaf=is_none)[0]
    filled = [None if p is None else jnp.zeros_like(p) if t is None else t for p, t in zip(leaves, tangent_leaves)]
    return jax.tree_util.tree_unflatten(structure, filled)


@eqx.filter_custom_jvp
def optimum(inputs: Inputs, x: Float[Array, " p"], valid: Bool[Array, ""], *, problem):
    """x* itself; its derivative in `inputs` by the implicit function theorem (module docstring)."""
    return x


@optimum.def_jvp
def _optimum_jvp(primals, tangents, *, problem):
    inputs, x, valid = primals
    t_inputs = tangents[0]
    if t_inputs is None or all(t is None for t in jax.tree_util.tree_leaves(t_inputs, is_leaf=lambda t: t is None)):
        return x, jnp.zeros_like(x)
    differentiable, static = eqx.partition(inputs, eqx.is_inexact_array)
    t_inputs = _zeros_for_none(differentiable, t_inputs)

    def gradient(x, differentiable):
        return jax.grad(single_shooting_loss, argnums=2)(problem, eqx.combine(differentiable, static), x)

    hessian = jax.jacfwd(gradient)(x, differentiable)
    mixed = jax.jvp(lambda d: gradient(x, d), (differentiable,), (t_inputs,))[1]
    tangent = -jnp.linalg.solve(hessian, mixed)
    return x, jnp.where(valid, tangent, jnp.nan)
