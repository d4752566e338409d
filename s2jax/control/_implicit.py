"""Derivatives of an optimum: the implicit function theorem on its KKT conditions.

A solver's iterations are never differentiated. At the controls u* it returns, the first-order
conditions of the problem of `_problem.py` (single-shooting form, whichever solver found u*) hold:

    ∇_u J(u*; θ) + C(u*; θ)ᵀ λ* = 0   on the controls strictly inside the box,
    u*_k,i = lower_i or upper_i          on the active bounds,
    c(u*; θ) = 0                         for a terminal constraint c(q_N, ω_N) = 0,

with C = ∂c/∂u and θ everything the problem is built of (model params, force and cost arrays,
bounds, q₀, ω₀). Writing them F(z; θ) = 0 with z = (u, λ), the optimum moves with θ as
dz*/dθ = −(∂F/∂z)⁻¹ ∂F/∂θ, so a cotangent ū of u* pulls back to θ̄ = −(∂F/∂θ)ᵀ w with
(∂F/∂z)ᵀ w = (ū, 0): one dense solve of the KKT matrix ∂F/∂z, built by forward-over-reverse
differentiation through the simulation (its size is N·m plus the constraint's; small for the
problems `solve` takes). λ* is the least-squares solution of the first line at u* (it does not
depend on the solver's bookkeeping of multipliers).

The optimal cost then has the derivative the envelope theorem gives, ∂J/∂θ + λ*ᵀ ∂c/∂θ, without
being special-cased: `solve` re-simulates u* differentiably and J, the trajectory and the
controls all carry their derivatives through u*(θ). A bound counts as active where u* is on it
to `ACTIVE_BOUND_RTOL`; at a weakly active bound (on it with a zero gradient) the optimum is not
differentiable, and the derivative returned is the one that keeps the bound active.

An unconverged or failed solve has no optimum to differentiate: its cotangents are NaN (with its
result code), never a silently wrong gradient. Reverse mode only (`jax.grad`, `jax.vjp`): a
`custom_vjp`, so `jax.jvp` of a solve raises JAX's error for custom_vjp functions.
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jax.sharding import PartitionSpec

from .._custom_types import Array, Bool, Float
from ._problem import Problem

ACTIVE_BOUND_RTOL = 1e-6
"""u*_k,i is on a bound when |u*_k,i − bound| ≤ this × (1 + |bound|): `SingleShooting` reaches a
face only to ~1e-9 (its tanh reparametrisation, `s2jax._optimisation.parameterisation.squash`), iLQR's
box QP exactly."""


def closure_converted(problem: Problem, q0, omega0) -> Problem:
    """`problem` with its cost and constraint functions closure-converted
    (`equinox.filter_closure_convert`): arrays they close over, traced by an outer `jax.grad` (a
    cost weight), become leaves of the problem, so that the solver's iterations see them with
    their derivatives stopped and `optimal_controls` differentiates with respect to them. Called
    inside the compiled solve, so the converted functions never enter a cache key."""
    t, u = jnp.zeros((), q0.dtype), jnp.zeros(problem.control_shape, q0.dtype)
    t, q0, omega0, u = _typed_as_called((t, q0, omega0, u))
    converted = {"running_cost": eqx.filter_closure_convert(problem.running_cost, t, q0, omega0, u)}
    for name in ("terminal_cost", "terminal_constraint"):
        function = getattr(problem, name)
        if function is not None:
            converted[name] = eqx.filter_closure_convert(function, q0, omega0)
    return dataclasses.replace(problem, **converted)


def _typed_as_called(examples):
    """The example arguments of `closure_converted`, typed as the solver's calls will pass them:
    within a `jax.set_mesh` context JAX types every value of the compiled solve with the context's
    mesh (replicated), a constant included, and equinox compares those types on each call. (Not
    inside `jax.shard_map`, `control.solve_many`'s, where the examples were always typed alike.)"""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.manual_axes:
        return examples
    return jtu.tree_map(lambda x: jax.sharding.reshard(jnp.asarray(x), PartitionSpec()), examples)


@eqx.filter_custom_vjp
def optimal_controls(theta, controls: Float[Array, "N ..."], converged: Bool[Array, ""]) -> Float[Array, "N ..."]:
    """The controls u* a solver found, as a function of θ = (problem, q₀, ω₀) for autodiff.

    The value is `controls` itself; its derivatives are those of the optimum (module docstring).
    `converged` says whether `controls` is an optimum: if not, cotangents become NaN.
    """
    del theta, converged
    return controls


@optimal_controls.def_fwd
def _forward(perturbed, theta, controls, converged):
    del perturbed, theta, converged
    return controls, None


@optimal_controls.def_bwd
def _backward(residuals, cotangent, perturbed, theta, controls, converged):
    del residuals
    controls = jax.lax.stop_gradient(controls)
    active, at_upper = _active_bounds(theta[0], controls)
    multipliers = _multipliers(theta, controls, active)
    z = jnp.concatenate([controls.ravel(), multipliers])

    def residual(z, theta):
        return _kkt_residual(z, theta, controls.shape, active, at_upper)

    kkt = jax.jacfwd(residual)(z, theta)
    w = jnp.linalg.solve(kkt.T, jnp.concatenate([jnp.ravel(cotangent), jnp.zeros_like(multipliers)]))
    _, pull_back = eqx.filter_vjp(lambda theta: residual(z, theta), theta)
    (grads,) = pull_back(-w)

    def keep(gradient, differentiated):
        return jnp.where(converged, gradient, jnp.nan) if differentiated and gradient is not None else None

    return jtu.tree_map(keep, grads, perturbed, is_leaf=lambda x: x is None)


def _cost_and_constraint(controls, theta) -> tuple[Float[Array, ""], Float[Array, " c"]]:
    problem, q0, omega0 = theta
    solution = problem.simulate(q0, omega0, controls)
    return problem.cost(solution, controls), problem.constraint(solution.q[-1], solution.omega[-1])


def _active_bounds(problem: Problem, controls) -> tuple[Bool[Array, "N ..."], Bool[Array, "N ..."]]:
    """Which controls sit on a bound, and which of those on the upper one."""
    if not problem.bounded:
        return jnp.zeros(controls.shape, bool), jnp.zeros(controls.shape, bool)
    lower, upper = problem.bounds(controls.shape)
    on = lambda bound: jnp.abs(controls - bound) <= ACTIVE_BOUND_RTOL * (1 + jnp.abs(bound))  # noqa: E731
    return on(lower) | on(upper), on(upper)


def _multipliers(theta, controls, active) -> Float[Array, " c"]:
    """λ* minimising |∇_u J + Cᵀ λ| on the free controls (empty without a terminal constraint)."""
    problem = theta[0]
    if problem.terminal_constraint is None:
        return jnp.zeros((0,), controls.dtype)
    gradient = jax.grad(lambda u: _cost_and_constraint(u, theta)[0])(controls)
    jacobian = jax.jacrev(lambda u: _cost_and_constraint(u, theta)[1])(controls)
    free = ~active
    jacobian = jnp.where(free, jacobian, 0.0).reshape(jacobian.shape[0], -1)
    return -jnp.linalg.lstsq(jacobian.T, jnp.where(free, gradient, 0.0).ravel())[0]


def _kkt_residual(z, theta, shape, active, at_upper) -> Float[Array, " d"]:
    """F(z; θ) of the module docstring, z = (u flattened, λ)."""
    problem = theta[0]
    controls, multipliers = z[: active.size].reshape(shape), z[active.size :]

    def lagrangian(u):
        cost, constraint = _cost_and_constraint(u, theta)
        return cost + jnp.dot(multipliers, constraint), constraint

    stationarity, constraint = jax.grad(lagrangian, has_aux=True)(controls)
    if problem.bounded:
        lower, upper = problem.bounds(shape)
        stationarity = jnp.where(active, controls - jnp.where(at_upper, upper, lower), stationarity)
    return jnp.concatenate([stationarity.ravel(), constraint])
