"""Parameter identification: fit a model's parameters to observations by multiple shooting.

The observation window [0, t_J] is cut into S segments. Segment 1 starts at the given state
(q0, ω0) (or at a fitted one); segments 2..S start at states of their own, fitted together
with the parameters, and the jumps between the end of a segment and the start of the next are
penalised. Over a long window a trajectory depends so sensitively on the parameters that the
single-shooting loss (S = 1) is a narrow valley among plateaus and spurious local minima;
short segments keep each simulation close to its linearisation.

The whole fit (the guess's run, every optimiser stage, the refinement, the covariance and the
goodness of fit) is one compiled program (`_program.fit_in_graph`), so `fit` works under
`jax.jit` and `jax.vmap` (many datasets or many guesses in one call).
"""

import dataclasses
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .._custom_types import ArrayLike, Float, Lagrangian
from .._errors import SimulationError, error_if, raise_for_codes
from .._fidelity import DEFAULT_FIDELITY, MAX_SUBSTEPS, continuous_miss, next_substeps
from .._integrators import AbstractIntegrator, Substeps
from .._integrators.substeps import sub_stepped
from .._jit import filter_jit
from .._optimisation.optax_loop import named_optimizer
from .._optimisation.parameterisation import AbstractParameterisation
from .._plan import LINEARISED, plan
from .._results import RESULTS
from .._simulate import simulate, simulate_plan
from .._validation import check_initial_state
from ._arguments import (
    count,
    floats_as_arrays,
    grid_steps,
    is_concrete,
    observation,
    parameterisations_of,
    positive,
)
from ._observation import Directions
from ._program import FitResult, _fit_program, _FitProblem, _Options
from ._progress import fit_showing_progress


def fit(
    lagrangian: Lagrangian,
    params: Mapping[str, ArrayLike],
    observations: Float[ArrayLike, "J ..."],
    *,
    times: Float[ArrayLike, " J"],
    dt: float,
    q0: Float[ArrayLike, "n 3"],
    omega0: Float[ArrayLike, "n 3"],
    free: Sequence[str] | Mapping[str, AbstractParameterisation],
    bodies: Sequence[int] | None = None,
    observe: Callable | None = None,
    segments: int = 1,
    optimizer: str | optax.GradientTransformation = "levenberg_marquardt",
    learning_rate: float = 1e-2,
    num_iterations: int = 300,
    tolerance: float = 1e-10,
    continuity_weights: float | Sequence[float] = (1e-3, 1e-1, 1e1),
    refinement_steps: int = 10,
    integrator: AbstractIntegrator | None = None,
    noise_std: float | None = None,
    fit_initial_state: bool = False,
    progress: bool = False,
    fidelity: float | None = DEFAULT_FIDELITY,
    throw: bool = True,
) -> FitResult:
    """Fit the parameters `free` of a model to observations of its motion.

    The data are y_j = h(q(t_j), ω(t_j), params) + ε_j, with h the observation function (the
    directions q_i of `bodies`, or `observe`), ε_j independent N(0, σ²) in each component, and
    q(t) the solution of `simulate(lagrangian, q0, omega0, params, dt=dt, ...)`.

    The window [0, t_J] is cut into S = `segments` segments of L = ⌈t_J / (S dt)⌉ steps. The
    starts of segments 2..S are unknowns, initially the states of a simulation from (q0, ω0)
    with the initial `params`. With r the data residuals and d the jumps between segments
    (q_end − q_start and T(ω_end − ω_start), T = L dt), the loss is mean(r²) + w mean(d²). The
    optimiser runs once for each w in `continuity_weights`, warm-started: a small w lets every
    segment fit its own data; larger ones join them. Then Gauss–Newton steps on the problem
    with the jumps held at zero (`s2jax._optimisation.least_squares.eliminated_step`) remove the
    last jumps, and with them the bias of a finite w; a step that raises the loss by more than
    half ends the refinement.

    The covariance is Gauss–Newton, σ²(J_effᵀJ_eff)⁻¹ with the segment starts eliminated: the
    same as for single shooting, whatever S, carried to θ by the parameterisation,
    Cov(θ) = diag(dθ/dx) Cov(x) diag(dθ/dx) (for `Positive`, diag(θ) Cov(log θ) diag(θ)).

    **Arguments:**

    - `lagrangian`: the model, a pure function `L(q, qdot, params) -> scalar` of any regular form,
      or an `s2jax.AbstractSystem`.
    - `params`: a dict of the known parameters and the initial guesses of the free ones.
    - `observations`: the data y_j, shape (J, *shape of one observation).
    - `times`: the observation times, shape (J,): strictly increasing, ≥ 0 and multiples of
      `dt` (no interpolation between steps). Concrete: they fix the program's shapes.
    - `dt`: the step of the integrator.
    - `q0`, `omega0`: the state at t = 0, shape (n, 3) (the initial guess if
      `fit_initial_state`).
    - `free`: the keys of `params` to fit, each positive (fitted as its logarithm), or a dict
      {key: parameterisation}: `s2jax.fit.Positive()`, `Bounded(lower, upper)` or
      `Unconstrained()` (either sign).
    - `bodies`: the indices of the bodies whose directions q_i are observed (shape (J, b, 3)).
    - `observe`: instead of `bodies`, any function `observe(q, omega, params) -> array` of one
      time's state, e.g. `s2jax.fit.Positions(bodies, lengths)`, `s2jax.fit.PolarAngles(bodies)`.
    - `segments`: the number S of shooting segments; 1 is single shooting.
    - `optimizer`: `"levenberg_marquardt"` (the default: its Jacobian is the one the
      refinement and the covariance use, so the program holds it once), `"lbfgs"`, `"adam"`
      (optax, at `learning_rate`) or any optax transformation.
    - `num_iterations`: the cap on the optimiser's iterations per continuity weight.
    - `tolerance`: a stage stops at a step that lowers the loss by at most `tolerance` × loss
      (Levenberg–Marquardt also: that moves no unknown by more than `tolerance`(1 + max|x|));
      the refinement, at a step that moves no unknown by more than that.
    - `continuity_weights`: the weights w of the jump penalty, one optimiser stage each (only
      the last with one segment).
    - `refinement_steps`: the cap on the Gauss–Newton refinement's steps; 0 skips it.
    - `integrator`: the integrator of every simulation; default the plan's for control and fit
      (`AutoIntegrator(linearised=True)`).
    - `noise_std`: σ, if known; else it is estimated from the residuals.
    - `fit_initial_state`: fit (q0, ω0) too (4n more unknowns).
    - `progress`: report on stderr what the call is doing while it runs (tracing, compiling,
      fitting) and, when it returns, each stage's iterates and losses. The compiled program is
      the same with and without it, so toggling it compiles nothing again.
    - `fidelity`: the largest continuous-time miss accepted (default 1e-2; None: no check): the
      distance, over every step of every segment and the bodies, in q and in ω (rad/s), between
      the fitted model's run of each segment and the continuous system's (`RungeKutta4` eight
      times finer, `FitResult.continuous_miss`). Where it is larger, the fit is done again from
      the fitted values with the integrator taking more sub-steps per step (`s2jax.Substeps`,
      the power of two that the O((dt / s)^p) law predicts, at most 64; `FitResult.substeps`):
      parameters fitted on a model that misses the real motion by more than the data's noise
      are biased by it. `fit` warns if 64 sub-steps do not meet it. A fit that did not converge
      is not refined (its miss is reported). Under `jax.jit` or `jax.vmap` the miss is only
      reported.
    - `throw`: raise `SimulationError` if the fit could not run (`FitResult.result`); with
      `throw=False` the code is returned. A fit that did not meet its tolerance is returned
      with `converged` False, not raised.

    **Returns:** a `FitResult`.

    **Transformations.** The fit is one compiled program, so `jax.jit(fit)` and `jax.vmap` over
    the data, the guesses in `params`, the start (q0, ω0) or `noise_std` work: a batch of fits
    runs in one call, each member iterating until its own tolerance (its result is its single
    fit's). `times`, `dt`, the options and the free keys must stay concrete. Under such a
    transformation the input checks that need values (finite data, guesses inside their
    parameterisation's range) are not made, the goodness-of-fit warning is not given (read
    `reduced_chi_squared`), and `throw=True` raises from inside the program.

    **Derivatives.** `jax.grad`, `jax.jvp` and `jax.jacfwd` of `FitResult.params` with respect to
    the observations, the known params and (q0, ω0) differentiate the optimum, not the iterations:
    at the optimum the fitted unknowns x* minimise the single-shooting loss f(x; d) of the window,
    so dx*/dd = −(∇²ₓₓf)⁻¹ ∇²ₓd f (the implicit function theorem; `s2jax/fit/_implicit.py`),
    with the exact Hessian, not the Gauss–Newton one. A fit that failed or did not converge, or
    several segments with `refinement_steps=0` (the optimum of a penalised loss), gives NaN
    derivatives. The other fields of `FitResult` are not differentiated (their tangents are zero).

    **Goodness of fit.** A σ estimated from the residuals makes their χ²/ν = |r|²/(σ² ν) equal to 1
    by construction, whatever the data, so the test needs a noise level from elsewhere. With
    `noise_std` given, `reduced_chi_squared` is |r|²/(σ²(N − p)), χ²_ν/ν-distributed for a model that
    fits. Without it, for observed directions, the noise is read from the observations' lengths:
    q̃ = q + ε is not renormalised, so |q̃| − 1 ≈ q·ε is the noise along the radius, which no model
    on the sphere can fit, and `reduced_chi_squared` compares the residuals across the radius with
    it (F-distributed, ν = 2N/3 − p); observations of unit length (normalised, or noise-free), and
    other observation functions, give no such level, and NaN. Past the upper 10⁻³ quantile
    (`reduced_chi_squared_limit`) `fit` warns (`UserWarning`): data of another body, shuffled in
    time, or a local minimum give χ²/ν of 10² and more; a model that fits passes in 999 fits of
    1000.

    Bad input raises `ValueError` before anything is compiled: shapes, non-finite data, times
    off the step grid or before 0, unknown free parameters or guesses outside their range,
    bodies out of range, fewer numbers observed than unknowns (or as many, with σ to estimate).
    """
    options = dict(locals())  # every argument, passed on to each fit
    fidelity = options.pop("fidelity")
    throw = options.pop("throw")
    if fidelity is not None:
        fidelity = positive(fidelity, "fidelity")
    if options["integrator"] is None:
        options["integrator"] = LINEARISED
    result, the_plan, length, concrete = _fit_once(**options)
    substeps = 1
    while fidelity is not None:
        miss = _segment_miss(the_plan, result, substeps, options["dt"], length)
        result = dataclasses.replace(result, continuous_miss=miss, substeps=substeps)
        if not concrete:  # under the user's jit/vmap: reported, not refined
            break
        miss = float(miss)
        if miss <= fidelity or not bool(result.converged) or result.result != RESULTS.successful:
            break  # an unconverged fit is returned as it is
        if substeps >= MAX_SUBSTEPS:
            warnings.warn(
                f"s2jax.fit: the fitted model misses the continuous system by {miss:.2e} (FitResult.continuous_miss) "
                f"at {substeps} sub-steps per step, more than fidelity = {fidelity:g}: give a smaller dt",
                stacklevel=2,
            )
            break
        substeps = next_substeps(substeps, miss, fidelity, the_plan.integrator.order)
        options["integrator"] = Substeps(the_plan.integrator, substeps)
        options["params"] = {**options["params"], **{key: result.params[key] for key in parameterisations_of(free)}}
        if options["fit_initial_state"]:
            options["q0"], options["omega0"] = result.segment_q[0], result.segment_omega[0]
        result, _, _, _ = _fit_once(**options)
    if throw:
        codes = result.result._value
        if isinstance(codes, jax.core.Tracer):
            result = error_if(result, codes != RESULTS.successful._value, _raise_if_failed, codes)
        else:
            _raise_if_failed(codes)
    return result


def _raise_if_failed(codes):
    raise_for_codes(codes, "s2jax.fit", named=True)


@filter_jit
def _segment_miss(the_plan, result, substeps, dt, length):
    """`continuous_miss` of every segment's run of `length` steps from its fitted start, the
    largest. `the_plan` is the fit's (its integrator without sub-steps): the runs do not plan
    again inside the program."""
    model = the_plan._replace(integrator=sub_stepped(the_plan.integrator, substeps))

    def one(q0, omega0):
        run = simulate_plan(model, q0, omega0, result.params, dt=dt, num_steps=length)
        miss = continuous_miss(the_plan.system, result.params, dt, substeps, run.q, run.omega)
        return jnp.where(run.result == RESULTS.successful, miss, jnp.nan)

    return jnp.max(jax.vmap(one)(result.segment_q, result.segment_omega))


def _fit_once(
    lagrangian, params, observations, *, times, dt, q0, omega0, free, bodies, observe, segments, optimizer,
    learning_rate, num_iterations, tolerance, continuity_weights, refinement_steps, integrator, noise_std,
    fit_initial_state, progress,
):
    """One fit of `fit`'s arguments (the integrator as given): `(result, plan, length, concrete)`,
    the plan of the runs, the steps per segment, and whether every input was concrete."""
    dt = positive(dt, "dt")
    q0, omega0 = jnp.asarray(q0, dtype=float), jnp.asarray(omega0, dtype=float)
    if q0.ndim != 2 or q0.shape[-1] != 3 or omega0.shape != q0.shape:
        raise ValueError(f"q0 and omega0 must have shape (n, 3); got {q0.shape} and {omega0.shape}")
    n = q0.shape[0]
    observe = observation(bodies, observe, n)
    steps = grid_steps(times, dt)
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a dict, to name the free parameters; got {type(params)}")
    parameterisations = parameterisations_of(free)
    free = tuple(parameterisations)
    observations = jnp.asarray(observations, dtype=float)
    concrete = is_concrete((params, observations, q0, omega0, noise_std))
    for key, p in parameterisations.items():
        if key not in params:
            raise ValueError(f"free parameter {key!r} is not a key of params: {sorted(params)}")
        if is_concrete(params[key]):
            value = np.asarray(params[key])
            if not np.issubdtype(value.dtype, np.number) or not np.all(p.admits(value)):
                raise ValueError(f"free parameter {key!r} must be {p.describe()}; got {value}")
    one = jax.eval_shape(lambda q, omega, params: observe(q, omega, params), q0, omega0, params)
    if observations.shape != (steps.size, *one.shape):
        what = f"(J, len(bodies), 3) = {(steps.size, *one.shape)}" if isinstance(observe, Directions) else (
            f"(J, *observe's shape) = {(steps.size, *one.shape)}"
        )
        raise ValueError(f"observations must have shape {what}; got {observations.shape}")
    if concrete and not np.all(np.isfinite(observations)):
        j = int(np.argwhere(~np.isfinite(np.asarray(observations)))[0, 0])
        raise ValueError(f"observations[{j}] is not finite: {np.asarray(observations)[j]}")
    if concrete:
        check_initial_state(q0, omega0, dt)
    segments = count(segments, "segments", 1)
    if steps[-1] < segments:
        raise ValueError(f"{segments} segments need ≥ {segments} steps to times[-1]: {steps[-1]}")
    num_iterations = count(num_iterations, "num_iterations", 0)
    refinement_steps = count(refinement_steps, "refinement_steps", 0)
    tolerance = positive(tolerance, "tolerance")
    weights = [positive(w, "continuity_weights") for w in np.atleast_1d(continuity_weights)]
    if not weights:
        raise ValueError("continuity_weights must hold at least one weight")
    weights = weights if segments > 1 else weights[-1:]
    if noise_std is not None and is_concrete(noise_std):
        noise_std = positive(noise_std, "noise_std")
    # The unknowns that the data must determine; the starts of segments 2..S are not among them
    # (each is pinned by its jump). Checked here, before anything is compiled or optimised.
    num_unknowns = sum(int(np.size(params[key])) for key in free) + (4 * n if fit_initial_state else 0)
    if observations.size < num_unknowns + (noise_std is None):
        unknowns = f"{num_unknowns} unknowns (the free values{', and 4n of the start' if fit_initial_state else ''})"
        if observations.size < num_unknowns:
            needed = "to determine them"
        else:
            needed = "to determine them and estimate the noise σ from the residuals (or give noise_std)"
        raise ValueError(f"too few observations: {observations.size} numbers for {unknowns}; more are needed {needed}")
    if isinstance(optimizer, str) and optimizer != "levenberg_marquardt":
        optimizer = named_optimizer(optimizer, positive(learning_rate, "learning_rate"))
    elif not isinstance(optimizer, (str, optax.GradientTransformation)):
        raise TypeError(f"optimizer must be a name or an optax transformation; got {optimizer!r}")
    if optimizer == "levenberg_marquardt" and num_iterations == 0 and refinement_steps == 0:
        raise ValueError("num_iterations and refinement_steps are both 0: nothing to fit")
    directions = isinstance(observe, Directions)
    if directions and concrete:
        lengths = np.linalg.norm(np.asarray(observations), axis=-1)
        if np.any(np.abs(lengths - 1.0) > 0.5):
            j, k = np.argwhere(np.abs(lengths - 1.0) > 0.5)[0]
            raise ValueError(
                f"observations[{j}] of body {observe.bodies[k]} has length {lengths[j, k]:.3g}: observations are "
                "directions q̃ = q + noise of bodies on the unit sphere (length ≈ 1)"
            )

    length = -(-int(steps[-1]) // segments)  # ⌈K / S⌉ steps per segment
    # The plan of every run: made here, from the initial params (concrete where they are).
    the_plan = plan(lagrangian, q0, omega0, params, integrator=integrator)
    segment = np.minimum(steps // length, segments - 1)
    known = {key: value for key, value in params.items() if key not in free}
    known = jax.tree.map(floats_as_arrays, known)  # new values of known floats reuse the program
    # The guesses of the free params are not in `problem`: new guesses do not recompile.
    problem = _FitProblem(
        the_plan, jnp.asarray(dt), length, segments, fit_initial_state, free,
        tuple(np.shape(params[key]) for key in free), tuple(parameterisations.values()), known, observe,
        jnp.asarray(segment), jnp.asarray(steps - segment * length), observations,
    )
    settings = _Options(optimizer, num_iterations, refinement_steps, num_unknowns, directions and noise_std is None)
    # Values as arrays, static settings apart: new guesses, data or σ reuse the program.
    guesses = {key: jnp.asarray(params[key], float) for key in free}
    sigma = None if noise_std is None else jnp.asarray(noise_std, float)
    arguments = (problem, q0, omega0, guesses, jnp.asarray(weights), jnp.asarray(tolerance), sigma, settings)
    if progress and concrete:
        result = fit_showing_progress(_fit_program, arguments, weights)
    else:
        if progress:
            print("s2jax.fit: progress=True reports nothing inside jax.jit or jax.vmap (traced inputs)",
                  file=sys.stderr, flush=True)
        result = _fit_program(*arguments)
    if concrete:
        _check_after(result, lagrangian, q0, omega0, params, observations, dt, segments * length, integrator, length,
                     noise_std, num_unknowns)
    return result, the_plan, length, concrete


def _check_after(result, lagrangian, q0, omega0, params, observations, dt, num_steps, integrator, length, noise_std,
                 num_unknowns):
    """On the host, after a concrete fit: say why the guess's run failed; warn of a model that
    does not fit."""
    if result.result != RESULTS.successful and int(result.result._value) != RESULTS.fit_failed._value:
        try:  # the guess's run failed: `simulate` names the step and the body
            simulate(lagrangian, q0, omega0, params, dt=dt, num_steps=num_steps, integrator=integrator,
                     save_every=length)
        except SimulationError as error:
            reason = str(error).split(" Pass throw=False")[0]
            raise SimulationError(
                f"s2jax.fit: the simulation from q0, omega0 with the initial params fails, so there is "
                f"nothing to start from ({reason}). Start from a better guess or a smaller dt."
            ) from None
    chi_squared, limit = float(result.reduced_chi_squared), float(result.reduced_chi_squared_limit)
    if chi_squared > limit:
        data = result.predicted.size
        if noise_std is not None:
            origin, dof = f"the given noise_std = {noise_std:.3g}", data - num_unknowns
        else:
            radial = np.sqrt(np.mean((np.linalg.norm(np.asarray(observations), axis=-1) - 1.0) ** 2))
            origin = f"the noise along the radius, {radial:.3g}, read from the observations' lengths"
            dof = 2 * data // 3 - num_unknowns
        warnings.warn(
            f"s2jax.fit: the model does not fit the data: χ²/ν = {chi_squared:.3g} (ν = {dof}) of the residuals "
            f"against {origin}, where a model that fits stays below {limit:.3g} in 999 fits of 1000 "
            "(FitResult.reduced_chi_squared). The fitted params and their standard errors are not to be trusted: "
            "check the observed bodies, the times and the model, or, if this is a local minimum, start from a "
            "better guess or use more segments.",
            stacklevel=4,
        )
