"""The compiled fit: everything from the guess's run to the covariance, in one program.

`fit_in_graph` is built from the optimisation layer that trajectory optimisation uses too
(`s2jax._optimisation`): the segments of `shooting`, the Levenberg–Marquardt stages and the
refinement of `least_squares`, or an optax optimiser's stages (`optax_loop`). Nothing calls the
host, so it runs under `jax.jit` and `jax.vmap`; `s2jax.fit.fit` checks the inputs before, and
raises or warns after.
"""

import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._custom_types import Array, Bool, Float, Int, Params
from .._jit import filter_jit, stop_gradients
from .._optimisation.chart import tangent_basis
from .._optimisation.least_squares import eliminated_system, penalised_least_squares, penalised_loss
from .._optimisation.optax_loop import optax_minimise
from .._optimisation.parameterisation import AbstractParameterisation
from .._optimisation.shooting import MultipleShooting
from .._plan import Plan
from .._results import RESULTS
from .._simulate import simulate_plan
from ._goodness import against_given_noise, against_radial_noise
from ._implicit import Inputs, optimum
from ._summary import fit_summary


class FitResult(eqx.Module):
    """The output of `fit`.

    **Fields:**

    - `params`: the model's parameters, the free ones replaced by their fitted values.
    - `standard_errors`: for each free key, an array of the shape of `params[key]`: the square
      roots of the diagonal of `covariance`.
    - `covariance`: the Gauss–Newton covariance of the free parameters, shape (p, p), over the
      free values flattened in the order of `free` (each raveled).
    - `noise_std`: the σ behind `covariance`: the one given, or the one estimated.
    - `loss_history`: the loss at each iterate (NaN past the last, so that its shape does not
      depend on the data): the optimiser's, one continuity weight after another (Levenberg–
      Marquardt also records each weight's starting loss), then the Gauss–Newton refinement's.
    - `stage_iterates`: how many entries of `loss_history` each stage wrote (the weights', then
      the refinement's).
    - `converged`: whether the last phase stopped on its tolerance rather than its step count.
    - `result`: `RESULTS.successful`, or why the fit could not run: the simulation from the
      initial guess failed (its code), or `RESULTS.fit_failed`.
    - `segment_times`, `segment_q`, `segment_omega`: the start time and state of each segment,
      shapes (S,), (S, n, 3), (S, n, 3).
    - `predicted`: the model's observations at the observation times, the shape of the data.
    - `continuity_defect`: the largest jump max |q_end − q_start| between the end of a segment
      and the start of the next (0 for a single segment).
    - `reduced_chi_squared`: the goodness of fit, χ²/ν of the residuals against a noise level
      that does not come from them: the `noise_std` given, or else, for observed `Directions`,
      the noise along the radius read from the observations' lengths (see `fit`); ≈ 1 for a
      model that fits its data, NaN when there is no such noise level.
    - `reduced_chi_squared_limit`: its upper 10⁻³ quantile for a model that fits (`fit` warns
      past it); NaN with `reduced_chi_squared`.
    - `continuous_miss`: how far the continuous system runs from the fitted model, the largest
      distance over each segment's run from its fitted start (in q, and in ω in rad/s; see
      `fit`'s `fidelity`); NaN with `fidelity=None`.
    - `substeps`: the integrator's sub-steps per step of the model fitted (1 unless `fit` refined
      it to meet the fidelity); `s2jax.Substeps(integrator, substeps)` runs it.
    """

    params: Params
    standard_errors: dict
    covariance: Float[Array, "p p"]
    noise_std: Float[Array, ""]
    loss_history: Float[Array, " iterations"]
    stage_iterates: Int[Array, " stages"]
    converged: Bool[Array, ""]
    result: RESULTS
    segment_times: Float[Array, " S"]
    segment_q: Float[Array, "S n 3"]
    segment_omega: Float[Array, "S n 3"]
    predicted: Float[Array, "J ..."]
    continuity_defect: Float[Array, ""]
    reduced_chi_squared: Float[Array, ""]
    reduced_chi_squared_limit: Float[Array, ""]
    continuous_miss: Float[Array, ""]
    substeps: int = eqx.field(static=True, default=1)

    def summary(self) -> str:
        """A few lines on what the fit found: the result and convergence, each fitted value with its
        standard error, σ and the goodness of fit, the jumps left and the continuous-time miss. A
        batch (from `jax.vmap`) gives the counts of each result and a line per member (the first
        ten). `print(result.summary())` shows it."""
        return fit_summary(self)


class _FitProblem(eqx.Module):
    """What the compiled fit needs besides the guesses: the planned model, the segments, the free
    parameters and how each is parameterised, the observation function and the data."""

    plan: Plan
    dt: Float[Array, ""]
    length: int = eqx.field(static=True)  # steps per segment
    segments: int = eqx.field(static=True)
    fit_initial_state: bool = eqx.field(static=True)
    free: tuple[str, ...] = eqx.field(static=True)
    shapes: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    parameterisations: tuple[AbstractParameterisation, ...]
    known: Params
    observe: Callable
    segment: Int[Array, " J"]
    step: Int[Array, " J"]
    observations: Float[Array, "J ..."]

    def unconstrained(self, guesses: Params) -> Float[Array, " p"]:
        """The optimiser's x of the free parameters' values (raveled in the order of `free`)."""
        parts = [
            p.to_unconstrained(jnp.asarray(guesses[key], float)).ravel()
            for key, p in zip(self.free, self.parameterisations)
        ]
        return jnp.concatenate(parts)

    def _pieces(self, x_theta):
        sizes = [math.prod(shape) for shape in self.shapes]
        return jnp.split(x_theta, np.cumsum(sizes)[:-1])

    def parameters(self, x_theta: Float[Array, " p"]) -> Params:
        values = {
            key: p.to_parameter(piece).reshape(shape)
            for key, p, shape, piece in zip(self.free, self.parameterisations, self.shapes, self._pieces(x_theta))
        }
        return {**self.known, **values}

    def derivative(self, x_theta: Float[Array, " p"]) -> Float[Array, " p"]:
        """dθ/dx of the free values, raveled (each parameterisation is elementwise)."""
        return jnp.concatenate([p.derivative(piece) for p, piece in zip(self.parameterisations, self._pieces(x_theta))])

    def observe_all(self, q, omega, params):
        """The model's observations at the observation times, from every segment's run."""
        at = (self.segment, self.step)
        return jax.vmap(self.observe, in_axes=(0, 0, None))(q[at], omega[at], params)


class _Options(eqx.Module):
    """The static settings of the compiled fit."""

    optimizer: object = eqx.field(static=True)  # "levenberg_marquardt" or an optax transformation
    num_iterations: int = eqx.field(static=True)
    refinement_steps: int = eqx.field(static=True)
    num_unknowns: int = eqx.field(static=True)
    radial_noise: bool = eqx.field(static=True)  # the goodness of fit from the directions' lengths


def _unknown_layout(num_params, num_starts, n, fit_initial_state):
    """Which entries of x = (θ's x, a, b) the refinement holds by the jumps (the starts of segments
    2..S; a and b of shape (F, n, 2) each, F = num_starts)."""
    start = np.ones((num_starts, n, 2), bool)
    start[:1] = not fit_initial_state
    return np.concatenate([np.zeros(num_params, bool), start.ravel(), start.ravel()])


def fit_in_graph(problem: _FitProblem, q0, omega0, guesses: Params, weights, tolerance, noise_std, options: _Options):
    """The guess's run, the optimiser's stages, the refinement, the covariance and the goodness of
    fit (see `s2jax.fit.fit`). The iterations run with every derivative stopped; the fitted params
    carry the derivatives of the optimum (`_implicit.optimum`)."""
    inputs = Inputs(problem.observations, problem.known, q0, omega0)
    problem, q0, omega0, guesses = stop_gradients((problem, q0, omega0, guesses))
    x_theta = problem.unconstrained(guesses)
    num_params = x_theta.size
    guess = simulate_plan(
        problem.plan, q0, omega0, problem.parameters(x_theta), dt=problem.dt,
        num_steps=problem.segments * problem.length, save_every=problem.length,
    )
    first = 0 if problem.fit_initial_state else 1
    base_q, base_omega = guess.q[first:-1], guess.omega[first:-1]
    shooting = MultipleShooting(
        problem.plan, problem.dt, problem.length, q0, omega0, base_q, base_omega, tangent_basis(base_q),
        problem.fit_initial_state,
    )
    num_starts, n = base_q.shape[:2]

    def split(x):
        a, b = jnp.split(x[num_params:], 2)
        return x[:num_params], (a.reshape(num_starts, n, 2), b.reshape(num_starts, n, 2))

    def residuals(x):
        x_theta, coordinates = split(x)
        params = problem.parameters(x_theta)
        q, omega, jumps, failed = shooting.run(params, coordinates)
        predicted = problem.observe_all(q, omega, params)
        return (predicted - problem.observations).ravel(), jumps.ravel(), failed

    x0 = jnp.concatenate([x_theta, jnp.zeros(4 * num_starts * n, x_theta.dtype)])
    dependent = _unknown_layout(num_params, num_starts, n, problem.fit_initial_state)
    settings = dict(max_steps=options.num_iterations, refinement_steps=options.refinement_steps, rtol=tolerance)
    if options.optimizer == "levenberg_marquardt":
        solution = penalised_least_squares(residuals, x0, weights, damped=True, dependent=dependent, **settings)
        history, stage_iterates, converged = solution.history, solution.stage_values, solution.converged
    else:

        def stage(x, weight):
            def loss(x):
                data, jumps, failed = residuals(x)
                return jnp.where(failed, jnp.inf, penalised_loss(data, jumps, weight))

            x, values, steps, done = optax_minimise(loss, x, options.optimizer, options.num_iterations, tolerance, 0.0)
            return x, (values, steps, done)

        x, (values, steps, stage_converged) = lax.scan(stage, x0, weights)
        solution = penalised_least_squares(residuals, x, weights, damped=False, dependent=dependent, **settings)
        # The stages' values one after another, then the refinement's, then NaN.
        count = jnp.arange(options.num_iterations)
        index = jnp.where(
            count[None, :] < steps[:, None], (jnp.cumsum(steps) - steps)[:, None] + count[None, :], values.size
        )
        history = jnp.full((values.size + solution.history.size,), jnp.nan, values.dtype)
        history = history.at[index.ravel()].set(values.ravel(), mode="drop")
        history = history.at[jnp.sum(steps) + jnp.arange(solution.history.size)].set(solution.history)
        stage_iterates = jnp.concatenate([steps, solution.stage_values])
        converged = solution.converged if options.refinement_steps else stage_converged[-1]

    point = solution.point
    x_theta, coordinates = split(solution.x)
    failed = point.failed | solution.failed_start
    # Only the optimum of f (no jumps left) is differentiated; a failed or unconverged fit has none.
    optimal = (problem.segments == 1 or options.refinement_steps > 0) & converged & ~failed
    independent = np.flatnonzero(~dependent)
    x_star = optimum(inputs, solution.x[independent], optimal & (guess.result == RESULTS.successful), problem=problem)
    params = {**problem.parameters(x_star[:num_params]), **inputs.known}
    data = point.data.reshape(problem.observations.shape)
    predicted = data + problem.observations
    result = RESULTS.where(guess.result != RESULTS.successful, guess.result, RESULTS.successful)
    result = RESULTS.where((result == RESULTS.successful) & failed, RESULTS.fit_failed, result)

    residual_dof = data.size - options.num_unknowns
    if noise_std is None:  # ν > 0: checked before compiling
        sigma = jnp.sqrt(jnp.sum(data**2) / residual_dof)
    else:
        sigma = jnp.asarray(noise_std, data.dtype)
    effective = eliminated_system(point, dependent)[0]
    covariance_x = sigma**2 * jnp.linalg.inv(effective.T @ effective)
    slope = problem.derivative(x_theta)
    covariance = slope[:, None] * covariance_x[:num_params, :num_params] * slope[None, :]
    errors = jnp.split(jnp.sqrt(jnp.diag(covariance)), np.cumsum([math.prod(s) for s in problem.shapes])[:-1])
    if noise_std is not None:
        chi_squared, limit = against_given_noise(data, sigma, options.num_unknowns)
    elif options.radial_noise:
        chi_squared, limit = against_radial_noise(data, predicted, problem.observations, options.num_unknowns)
    else:
        chi_squared, limit = jnp.asarray(jnp.nan), math.nan
    segment_q, segment_omega = shooting.starts(coordinates)
    jumps = point.constraint.reshape(problem.segments - 1, 2, n, 3)
    return FitResult(
        params=params,
        standard_errors={key: e.reshape(shape) for key, e, shape in zip(problem.free, errors, problem.shapes)},
        covariance=covariance,
        noise_std=sigma,
        loss_history=history,
        stage_iterates=stage_iterates,
        converged=converged,
        result=result,
        segment_times=problem.dt * problem.length * jnp.arange(problem.segments, dtype=data.dtype),
        segment_q=segment_q,
        segment_omega=segment_omega,
        predicted=predicted,
        continuity_defect=jnp.max(jnp.abs(jumps[:, 0]), initial=0.0),
        reduced_chi_squared=jnp.asarray(chi_squared, data.dtype),
        reduced_chi_squared_limit=jnp.asarray(limit, data.dtype),
        continuous_miss=jnp.asarray(jnp.nan, data.dtype),
    )


_fit_program = filter_jit(fit_in_graph)
