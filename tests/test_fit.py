"""Tests of `s2jax.fit.fit`: recovery of known parameters, uncertainty, multiple shooting, checks.

Every fit here has the same shapes (3 s of the double spherical pendulum, 2 segments), so the
default Levenberg–Marquardt fit, the L-BFGS fit and the Adam fit are each compiled once for the
module.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax.fit import _program as fit_program, fit
from s2jax.models import double_spherical_pendulum as model

DT = 0.01
NUM_STEPS = 300  # 3 s; the notebook fits 10 s
OBSERVED_STEPS = np.arange(5, NUM_STEPS + 1, 5)
FREE = ("l1", "l2", "m2")
TRUTH = model.paper_params()
GUESS = dict(TRUTH, l1=1.08 * TRUTH["l1"], l2=0.93 * TRUTH["l2"], m2=1.1 * TRUTH["m2"])
NOISE = 1e-3


@pytest.fixture(scope="module")
def trajectory():
    q0, omega0 = model.paper_state()
    return q0, omega0, s2.simulate(model.lagrangian, q0, omega0, TRUTH, dt=DT, num_steps=NUM_STEPS)


def _fit(trajectory, observations, **kwargs):
    q0, omega0, _ = trajectory
    return fit(
        model.lagrangian, GUESS, observations, times=OBSERVED_STEPS * DT, bodies=[1], dt=DT,
        q0=q0, omega0=omega0, free=FREE, segments=2, **kwargs,
    )


def _iterates(result):
    """The loss history without its NaN padding (which is all after the last iterate)."""
    history = np.asarray(result.loss_history)
    finite = np.isfinite(history)
    assert np.all(finite[: finite.sum()])
    return history[finite]


@pytest.fixture(scope="module")
def noise_free_fit(trajectory):
    observations = np.asarray(trajectory[2].q[OBSERVED_STEPS][:, [1]])
    return _fit(trajectory, observations, noise_std=NOISE)


@pytest.mark.slow
def test_recovers_parameters_from_noise_free_data(noise_free_fit):
    for key in FREE:
        assert abs(float(noise_free_fit.params[key]) / TRUTH[key] - 1) < 5e-3, key
    assert bool(noise_free_fit.converged) and noise_free_fit.result == s2.RESULTS.successful
    history = _iterates(noise_free_fit)
    assert history[-1] < 1e-6 * history[0]


@pytest.mark.parametrize("optimizer", ["levenberg_marquardt", "adam", "lbfgs"])
@pytest.mark.slow
def test_optimizer_alone_recovers_parameters_from_noise_free_data(trajectory, optimizer):
    observations = np.asarray(trajectory[2].q[OBSERVED_STEPS][:, [1]])
    result = _fit(
        trajectory, observations, optimizer=optimizer, num_iterations=60, refinement_steps=0
    )
    # three continuity weights of at most 60 iterates each (Levenberg–Marquardt also records
    # each weight's starting loss)
    assert 3 <= _iterates(result).size <= 3 * (60 + 1)
    assert np.asarray(result.stage_iterates).size == 3
    for key in FREE:
        assert abs(float(result.params[key]) / TRUTH[key] - 1) < 5e-3, key


@pytest.mark.slow
def test_noisy_fit_is_within_three_standard_errors(trajectory):
    clean = np.asarray(trajectory[2].q[OBSERVED_STEPS][:, [1]])
    noise = NOISE * np.random.default_rng(0).normal(size=clean.shape)
    result = _fit(trajectory, clean + noise)
    for key in FREE:
        error = float(result.standard_errors[key])
        assert np.isfinite(error) and error > 0, key
        assert abs(float(result.params[key]) - TRUTH[key]) < 3 * error, key
    # The estimate of σ from 180 × 3 residuals has a relative spread of about 1/√(2·540) ≈ 3 %.
    assert abs(float(result.noise_std) / NOISE - 1) < 0.15


@pytest.mark.slow
def test_multiple_shooting_joins_segments_and_marginalises_their_starts(trajectory, noise_free_fit):
    q0, omega0, truth = trajectory
    result = noise_free_fit
    middle = int(round(float(result.segment_times[1]) / DT))
    assert middle == NUM_STEPS // 2
    # The start of segment 2 was fitted: it began far from the truth (a simulation with the
    # guessed parameters) and ended on it.
    guess = s2.simulate(
        model.lagrangian, q0, omega0, GUESS, dt=DT, num_steps=NUM_STEPS, save_every=middle
    )
    assert np.max(np.abs(guess.q[1] - truth.q[middle])) > 1e-2
    np.testing.assert_allclose(result.segment_q[1], truth.q[middle], atol=1e-8)
    np.testing.assert_allclose(result.segment_omega[1], truth.omega[middle], atol=1e-8)
    assert result.continuity_defect < 1e-8

    # Eliminating the segment starts gives the Gauss–Newton covariance of single shooting.
    def observed(log_theta):
        params = dict(TRUTH, **dict(zip(FREE, jnp.exp(log_theta))))
        solution = s2.simulate(model.lagrangian, q0, omega0, params, dt=DT, num_steps=NUM_STEPS)
        return solution.q[OBSERVED_STEPS][:, 1].ravel()

    theta = jnp.array([float(result.params[key]) for key in FREE])
    jacobian = jax.jacfwd(observed)(jnp.log(theta))
    single = NOISE**2 * jnp.linalg.inv(jacobian.T @ jacobian) * jnp.outer(theta, theta)
    np.testing.assert_allclose(result.covariance, single, rtol=1e-6)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(observations=np.zeros((60, 2, 3))), r"observations must have shape"),
        (dict(nan_at=7), r"observations\[7\] is not finite"),
        (dict(times=np.r_[OBSERVED_STEPS[:-1], 300.5] * DT), r"times\[59\] .* not a multiple"),
        (dict(times=np.r_[-5, OBSERVED_STEPS[1:]] * DT), r"times\[0\] .* outside the horizon"),
        (dict(times=np.r_[5, 10, 10, OBSERVED_STEPS[3:]] * DT), r"strictly increasing; times\[2\]"),
        (dict(free=("l1", "length")), r"free parameter 'length' is not a key of params"),
        (dict(params=dict(GUESS, l2=-1.0)), r"free parameter 'l2' must be finite and positive"),
        (dict(bodies=[2]), r"bodies must be distinct indices of the 2 bodies of q0; got \(2,\)"),
        (dict(segments=400), r"400 segments need ≥ 400 steps to times\[-1\]: 300"),
        (dict(optimizer="sgd"), r'optimizer must be "levenberg_marquardt", "lbfgs", "adam"'),
    ],
)
def test_rejects_bad_input(trajectory, change, message):
    q0, omega0, _ = trajectory
    arguments = dict(
        params=GUESS, observations=np.zeros((OBSERVED_STEPS.size, 1, 3)), times=OBSERVED_STEPS * DT,
        bodies=[1], free=FREE, segments=2, optimizer="lbfgs",
    )
    nan_at = change.pop("nan_at", None)
    arguments.update(change)
    if nan_at is not None:
        arguments["observations"][nan_at, 0, 1] = np.nan
    params, observations = arguments.pop("params"), arguments.pop("observations")
    with pytest.raises(ValueError, match=message):
        fit(model.lagrangian, params, observations, dt=DT, q0=q0, omega0=omega0, **arguments)


def test_rejects_observations_that_are_not_directions(trajectory):
    q0, omega0, _ = trajectory
    with pytest.raises(ValueError, match=r"observations\[0\] of body 1 has length 0: observations are directions"):
        fit(
            model.lagrangian, GUESS, np.zeros((OBSERVED_STEPS.size, 1, 3)), times=OBSERVED_STEPS * DT, bodies=[1],
            dt=DT, q0=q0, omega0=omega0, free=FREE,
        )


def test_a_failing_initial_simulation_names_fit(trajectory):
    q0, omega0, truth = trajectory
    observations = np.asarray(truth.q[OBSERVED_STEPS][:, [1]])
    with pytest.raises(s2.SimulationError, match=r"s2jax.fit: the simulation from q0.*step 0 → 1") as error:
        fit(
            model.lagrangian, GUESS, observations, times=OBSERVED_STEPS * DT, bodies=[1], dt=DT, q0=q0,
            omega0=omega0, free=FREE, integrator=s2.VariationalIntegrator(newton=s2.NewtonSettings(max_steps=1)),
        )
    assert "throw=False" not in str(error.value)


@pytest.mark.slow
@pytest.mark.parametrize("noise_std", [NOISE, None], ids=["given", "from-lengths"])
def test_a_fit_of_the_right_model_has_reduced_chi_squared_near_one(trajectory, noise_std):
    """Noisy directions of the simulated body: χ²/ν ≈ 1 against the given σ (ν = 177, spread
    ±0.11) or against the noise along the radius read from the observations' lengths (an F ratio,
    ν = 117 over 60, spread ±0.23), below the 10⁻³ limit, and no warning."""
    clean = np.asarray(trajectory[2].q[OBSERVED_STEPS][:, [1]])
    noisy = clean + NOISE * np.random.default_rng(0).normal(size=clean.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = _fit(trajectory, noisy, noise_std=noise_std)
    chi_squared = float(result.reduced_chi_squared)
    assert 0.5 < chi_squared < float(result.reduced_chi_squared_limit) < 2.5
    assert abs(chi_squared - 1) < (0.35 if noise_std else 0.7)


@pytest.mark.slow
def test_data_shuffled_in_time_fail_the_goodness_of_fit_test(trajectory):
    """The same noisy directions in a random order: no parameters fit them, and `fit` says so
    (χ²/ν ~ 10⁵ against the noise in the observations' lengths) instead of returning far-off
    parameters with only a large σ to show for it."""
    clean = np.asarray(trajectory[2].q[OBSERVED_STEPS][:, [1]])
    rng = np.random.default_rng(0)
    noisy = clean + NOISE * rng.normal(size=clean.shape)
    with pytest.warns(UserWarning, match=r"s2jax.fit: the model does not fit the data: .*observations' lengths"):
        result = _fit(trajectory, noisy[rng.permutation(OBSERVED_STEPS.size)])
    assert float(result.reduced_chi_squared) > 100 * float(result.reduced_chi_squared_limit)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(), r"too few observations: 3 numbers for 3 unknowns .* \(or give noise_std\)"),
        (dict(noise_std=NOISE, fit_initial_state=True), r"too few observations: 3 numbers for 11 unknowns"),
    ],
)
def test_too_few_observations_are_refused_before_anything_runs(trajectory, monkeypatch, change, message):
    """One observed direction (3 numbers) cannot determine 3 free values and σ, nor 3 values and
    the 8 numbers of the start: refused before planning or fitting (it came after)."""
    q0, omega0, truth = trajectory

    def not_now(*args, **kwargs):
        raise AssertionError("fit planned or fitted before checking the degrees of freedom")

    monkeypatch.setattr("s2jax.fit._fit.plan", not_now)
    monkeypatch.setattr("s2jax.fit._fit._fit_program", not_now)
    with pytest.raises(ValueError, match=message):
        fit(
            model.lagrangian,
            GUESS,
            np.asarray(truth.q)[5:6, [1]],
            times=[5 * DT],
            bodies=[1],
            dt=DT,
            q0=q0,
            omega0=omega0,
            free=FREE,
            **change,
        )


@pytest.mark.slow
def test_progress_reports_each_stage_on_stderr_without_compiling_again(trajectory, noise_free_fit, capfd):
    """`progress=True` prints a line per stage and the end, and reuses the compiled program of the
    same fit without it (`noise_free_fit`)."""
    observations = np.asarray(trajectory[2].q[OBSERVED_STEPS][:, [1]])
    programs = fit_program._fit_program.cache_size()
    assert programs >= 1
    result = _fit(trajectory, observations, noise_std=NOISE, progress=True)
    lines = capfd.readouterr().err.splitlines()
    assert fit_program._fit_program.cache_size() == programs
    counts = np.asarray(result.stage_iterates)
    assert counts.size == 4 and np.all(counts >= 1)
    for stage, count in zip(("stage 1/4, Levenberg–Marquardt, continuity weight 0.001: ",
                             "stage 3/4, Levenberg–Marquardt, continuity weight 10: ",
                             "stage 4/4, Gauss–Newton with the jumps held at zero: "), counts[[0, 2, 3]]):
        assert any(line.startswith(f"s2jax.fit: {stage}{count} iterates") for line in lines), (stage, lines)
    assert any("the compiled program reused" in line for line in lines), lines
    assert lines[-1].startswith(f"s2jax.fit: done, loss {_iterates(result)[-1]:.6g}, converged")
    np.testing.assert_array_equal(result.loss_history, noise_free_fit.loss_history)
