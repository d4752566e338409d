"""`fit` on the optimisation layer: parameterisations (`Positive`, `Bounded`, `Unconstrained`),
observation functions (`Positions`, `PolarAngles`, any function), and `jax.jit` / `jax.vmap` over
data, guesses and starts, each member its single fit's.

The model is a spherical pendulum of length r in a field g⃗ = (g_x, 0, −g) that is not vertical:
g_x has either sign, r is bounded. 2 s at h = 0.01, observed every 5 steps.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax.fit import Bounded, PolarAngles, Positions, Unconstrained, _program as fit_program, fit

DT = 0.01
NUM_STEPS = 200
OBSERVED = np.arange(5, NUM_STEPS + 1, 5)
TRUTH = {"r": 1.2, "gx": -0.7, "g": 9.81}
GUESS = {"r": 0.9, "gx": 0.3, "g": 9.81}
FREE = {"r": Bounded(0.5, 2.0), "gx": Unconstrained()}
NOISE = 1e-3


def lagrangian(q, qdot, params):
    """½ r²|q̇|² − V, V = −r g⃗·q (unit mass)."""
    field = jnp.stack([params["gx"], jnp.zeros_like(params["gx"]), -params["g"]])
    return 0.5 * params["r"] ** 2 * jnp.sum(qdot**2) + params["r"] * jnp.sum(q[0] * field)


Q0 = np.array([[np.sin(0.6), 0.0, -np.cos(0.6)]])
OMEGA0 = np.cross(Q0, np.array([[0.0, 0.0, 0.8]]))


@pytest.fixture(scope="module")
def truth():
    return s2.simulate(lagrangian, Q0, OMEGA0, TRUTH, dt=DT, num_steps=NUM_STEPS)


def _fit(observations, params=GUESS, **kwargs):
    options = dict(times=OBSERVED * DT, dt=DT, q0=Q0, omega0=OMEGA0, free=FREE, segments=2, fidelity=None)
    options.update(kwargs)
    if "observe" not in options:
        options["bodies"] = [0]
    return fit(lagrangian, params, observations, **options)


def _single_shooting_covariance(observe, noise_std):
    """σ²(J_θᵀJ_θ)⁻¹ with J_θ the derivative of the observations in θ = (r, g_x) themselves, by
    forward mode through one simulation: independent of the fit's chart, segments and
    parameterisations."""

    def observed(theta):
        params = dict(TRUTH, r=theta[0], gx=theta[1])
        run = s2.simulate(lagrangian, Q0, OMEGA0, params, dt=DT, num_steps=NUM_STEPS)
        return jax.vmap(observe, in_axes=(0, 0, None))(run.q[OBSERVED], run.omega[OBSERVED], params).ravel()

    jacobian = jax.jacfwd(observed)(jnp.array([TRUTH["r"], TRUTH["gx"]]))
    return noise_std**2 * jnp.linalg.inv(jacobian.T @ jacobian)


@pytest.mark.slow
def test_bounded_and_signed_parameters_are_recovered_with_their_covariance(truth):
    """g_x starts with the wrong sign and r inside its bounds: both are recovered from noise-free
    directions, and the covariance carried through dθ/dx of each parameterisation is the single-
    shooting covariance in θ computed directly."""
    result = _fit(np.asarray(truth.q[OBSERVED]), noise_std=NOISE)
    assert result.result == s2.RESULTS.successful and bool(result.converged)
    assert abs(float(result.params["r"]) - TRUTH["r"]) < 1e-9
    assert abs(float(result.params["gx"]) - TRUTH["gx"]) < 1e-9
    expected = _single_shooting_covariance(lambda q, w, p: q[np.array([0])], NOISE)
    np.testing.assert_allclose(result.covariance, expected, rtol=1e-6)
    np.testing.assert_allclose(
        [float(result.standard_errors["r"]), float(result.standard_errors["gx"])], np.sqrt(np.diag(expected)),
        rtol=1e-6,
    )
    lines = result.summary().splitlines()
    assert lines[0].startswith("s2jax.fit: RESULTS.successful, converged")
    assert f"r = {float(result.params['r']):.6g} ± {float(result.standard_errors['r']):.2g}" in lines[1]
    assert "χ²/ν" in lines[2] and "continuous-time miss not checked" in lines[3]


@pytest.mark.slow
@pytest.mark.parametrize(
    "observe, free",
    [
        (Positions([0], lengths=("r",)), FREE),
        (PolarAngles([0]), {"r": Bounded(0.5, 2.0)}),
        (lambda q, omega, params: params["r"] * q[0, :2], FREE),  # any function: the horizontal position
    ],
    ids=["positions", "polar-angles", "function"],
)
def test_observation_functions_recover_the_parameters(truth, observe, free):
    """Noise-free data of each kind, made by the same function from the true run; the fit recovers
    what it determines (polar angles alone leave g_x's sign to the azimuth: r only)."""
    params = dict(TRUTH, r=GUESS["r"]) if "gx" not in free else GUESS
    data = jax.vmap(observe, in_axes=(0, 0, None))(truth.q[OBSERVED], truth.omega[OBSERVED], TRUTH)
    result = _fit(np.asarray(data), params=params, observe=observe, free=free, noise_std=NOISE)
    assert result.result == s2.RESULTS.successful and bool(result.converged)
    for key in free:
        assert abs(float(result.params[key]) - TRUTH[key]) < 1e-8, key
    assert result.predicted.shape == data.shape
    # Only directions carry a noise level in their lengths; here it is given.
    assert np.isfinite(float(result.reduced_chi_squared))


def test_new_values_and_an_equal_function_rebuilt_do_not_compile_again(truth):
    """A lambda made again (a notebook cell run twice) is compared by value; new guesses, data and
    σ are values of the same program."""
    data = np.asarray(truth.q[OBSERVED][:, 0, :2])

    def run(guess, data, noise_std):
        return _fit(data, params=guess, observe=lambda q, omega, params: q[0, :2], num_iterations=2,
                    refinement_steps=0, noise_std=noise_std)

    run(GUESS, data, NOISE)
    programs = fit_program._fit_program.cache_size()
    run(dict(GUESS, r=1.0, gx=-0.2), data + 1e-3, 2 * NOISE)
    assert fit_program._fit_program.cache_size() == programs


def test_observations_of_the_wrong_shape_name_the_function_shape(truth):
    with pytest.raises(ValueError, match=r"observations must have shape \(J, \*observe's shape\) = \(40, 1\)"):
        _fit(np.zeros((OBSERVED.size, 3)), observe=PolarAngles([0]))
    with pytest.raises(ValueError, match="give either bodies .* or observe"):
        _fit(np.zeros((OBSERVED.size, 1)), observe=PolarAngles([0]), bodies=[0])
    with pytest.raises(ValueError, match=r"free parameter 'r' must be strictly between 0.5 and 2.0"):
        _fit(np.asarray(truth.q[OBSERVED]), params=dict(GUESS, r=2.5))
    with pytest.raises(ValueError, match="Bounded needs finite lower < upper"):
        Bounded(1.0, 1.0)


@pytest.fixture(scope="module")
def noisy(truth):
    clean = np.asarray(truth.q[OBSERVED])
    return clean + NOISE * np.random.default_rng(0).normal(size=(3, *clean.shape))


@pytest.mark.slow
def test_vmap_over_datasets_and_guesses_gives_each_members_single_fit(noisy):
    """Three noisy datasets in one `jax.vmap`, then three guesses of one dataset (multi-start):
    each member equals its own eager fit (which a member that finishes first must not disturb)."""
    batch = jax.vmap(lambda data: _fit(data))(jnp.asarray(noisy))
    guesses = {"r": jnp.array([0.9, 1.5, 1.1]), "gx": jnp.array([0.3, -1.5, 0.0]), "g": jnp.full(3, 9.81)}
    starts = jax.vmap(lambda params: _fit(noisy[0], params=params))(guesses)
    for i in range(3):
        alone = _fit(noisy[i])
        from_guess = _fit(noisy[0], params=jax.tree.map(lambda x: float(x[i]), guesses))
        for key in FREE:
            np.testing.assert_allclose(batch.params[key][i], alone.params[key], rtol=1e-12)
            np.testing.assert_allclose(batch.standard_errors[key][i], alone.standard_errors[key], rtol=1e-9)
            np.testing.assert_allclose(starts.params[key][i], from_guess.params[key], rtol=1e-12)
        assert int(jnp.sum(jnp.isfinite(batch.loss_history[i]))) == int(jnp.sum(jnp.isfinite(alone.loss_history)))
        np.testing.assert_allclose(batch.reduced_chi_squared[i], alone.reduced_chi_squared, rtol=1e-9)
    # every guess of the same data finds the same minimum, within its standard error
    spread = np.ptp(np.asarray(starts.params["gx"]))
    assert spread < 1e-3 * float(starts.standard_errors["gx"][0])


@pytest.mark.slow
def test_jit_of_fit_equals_the_eager_fit_and_a_bad_member_is_named(noisy):
    """`jax.jit(fit)` over the data runs the same program; in a batch, data that are not finite
    give `RESULTS.fit_failed` for that member alone (throw=False), or an error naming its index."""
    eager = _fit(noisy[0])
    jitted = jax.jit(lambda data: _fit(data))(jnp.asarray(noisy[0]))
    for key in FREE:
        np.testing.assert_allclose(jitted.params[key], eager.params[key], rtol=1e-13)
    bad = noisy.copy()
    bad[1, 4, 0, 2] = np.nan
    batch = jax.vmap(lambda data: _fit(data, throw=False))(jnp.asarray(bad))
    assert [str(name) for name in s2._results._names(np.asarray(batch.result._value))] == [
        "successful", "fit_failed", "successful"
    ]
    np.testing.assert_allclose(batch.params["r"][0], eager.params["r"], rtol=1e-12)
    summary = batch.summary()
    assert summary.startswith("s2jax.fit: a batch of 3: 2 RESULTS.successful, 1 RESULTS.fit_failed")
    assert f"r = {float(batch.params['r'][0]):.6g} ± " in summary.splitlines()[1]
    assert summary.splitlines()[2].startswith("  [1] NOT converged")
    with pytest.raises(Exception, match=r"s2jax.fit \(batch index \(1,\)\): RESULTS.fit_failed"):
        jax.block_until_ready(jax.vmap(lambda data: _fit(data))(jnp.asarray(bad)))


@pytest.mark.slow
def test_fitted_params_are_differentiated_at_the_optimum(noisy):
    """The dynamics depend on g⃗/r alone, so the fit of (r, g_x) at known g scales with g:
    dr*/dg = r*/g and dg_x*/dg = g_x*/g exactly, noise or not (a closed form for the implicit
    derivative, on noisy data, where the Gauss–Newton Hessian would be off). The derivative in
    the data along a random direction matches central differences of converged re-fits."""

    def fitted(g):
        result = _fit(noisy[0], params=dict(GUESS, g=g))
        return jnp.stack([result.params["r"], result.params["gx"]])

    at = fitted(9.81)
    np.testing.assert_allclose(jax.jacfwd(fitted)(9.81), at / 9.81, rtol=1e-7)

    direction = np.random.default_rng(1).normal(size=noisy[0].shape)

    def gx(data):
        return _fit(data).params["gx"]

    derivative = jax.jvp(gx, (jnp.asarray(noisy[0]),), (jnp.asarray(direction),))[1]
    step = 1e-5
    central = (float(gx(noisy[0] + step * direction)) - float(gx(noisy[0] - step * direction))) / (2 * step)
    # the re-fits converge to ~1e-12 in g_x: central differences at this step are good to ~1e-6
    np.testing.assert_allclose(float(derivative), central, rtol=1e-5)
    gradient = jax.grad(gx)(jnp.asarray(noisy[0]))
    np.testing.assert_allclose(float(jnp.sum(gradient * direction)), float(derivative), rtol=1e-10)


# 7 s: kept out of the fast tier (README, 'Tests')
@pytest.mark.slow
def test_an_unconverged_fit_has_nan_derivatives(noisy):
    """Two iterations per weight and no refinement: not the optimum, so no derivative of one."""

    def fitted(g):
        result = _fit(noisy[0], params=dict(GUESS, g=g), num_iterations=2, refinement_steps=0)
        return result.params["r"], result.converged

    (r, converged), (dr, _) = jax.jvp(fitted, (9.81,), (1.0,))
    assert not bool(converged) and np.isfinite(float(r)) and np.isnan(float(dr))
