"""`newton_root`'s derivatives: the implicit-function theorem, to second order, inside `lax.scan`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from s2jax._newton import newton_root

THETA = 2.0
# x³ = θ componentwise: x = θ^{1/3}, x' = θ^{−2/3}/3, x'' = −(2/9) θ^{−5/3}.
EXACT = (THETA ** (1 / 3), THETA ** (-2 / 3) / 3, -2 / 9 * THETA ** (-5 / 3))
GUESS = jnp.ones((2, 3))


def _root(theta, path):
    """x with x³ = θ by `newton_root` on one of its paths; the mean of the six components."""
    def residual(x):
        return x**3 - theta

    options = {
        "jacfwd": {},
        "jacobian_solve": {"jacobian_solve": lambda x, r: r / (3.0 * x**2)},
        # The chord's fixed inverse at the guess, 1/3: stopped, as `newton_root` requires.
        "chord": {"approximate_inverse": lambda r: r / 3.0, "jacobian_solve": lambda x, r: r / (3.0 * x**2)},
    }[path]
    x, _, converged = newton_root(residual, GUESS, rtol=1e-14, atol=1e-14, max_steps=60, **options)
    return jnp.where(converged, jnp.mean(x), jnp.nan)


def _in_scan(fn):
    """fn applied once inside a `lax.scan`, as every simulation applies its steps."""
    return lambda theta: lax.scan(lambda carry, _: (fn(carry * theta), None), jnp.asarray(1.0), None, length=1)[0]


@pytest.mark.slow
@pytest.mark.parametrize("path", ["jacfwd", "jacobian_solve", "chord"])
@pytest.mark.parametrize("scanned", [False, True])
def test_first_and_second_derivatives_of_the_root(path, scanned):
    """Every order of forward and reverse mode, alone and inside `lax.scan`, against the closed
    form. Inside a scan, reverse mode used to give a second derivative of 0 (JAX drops nested
    custom_jvp rules there): the rule now writes x's dependence on θ as a Newton step."""
    fn = lambda theta: _root(theta, path)  # noqa: E731
    fn = _in_scan(fn) if scanned else fn
    value, first = jax.jvp(fn, (THETA,), (1.0,))
    np.testing.assert_allclose(value, EXACT[0], rtol=1e-14)
    np.testing.assert_allclose(first, EXACT[1], rtol=1e-13)
    np.testing.assert_allclose(jax.grad(fn)(THETA), EXACT[1], rtol=1e-13)
    for second in (
        jax.grad(jax.grad(fn)), jax.jacfwd(jax.grad(fn)), jax.jacfwd(jax.jacfwd(fn)), jax.grad(jax.jacfwd(fn)),
        jax.jit(jax.hessian(fn)),
    ):
        np.testing.assert_allclose(second(THETA), EXACT[2], rtol=1e-12)


def test_the_derivative_does_not_change_the_root():
    """The Newton step of the derivative rule is added as G − stop_gradient(G): the value of a
    differentiated root is bitwise the undifferentiated one."""
    fn = lambda theta: _root(theta, "jacobian_solve")  # noqa: E731
    value, _ = jax.value_and_grad(fn)(THETA)
    assert value == fn(THETA)


def test_a_stalled_chord_hands_over_to_newton():
    """x³ = θ by chord iterations with the fixed inverse 1/3, far from the Jacobian at the root
    (3x² = 4.76: the chord contracts by θ ≈ 0.59 per iteration, ~60 iterations to round-off).
    Once its update shrinks by less than `CHORD_STALL`, Newton's steps finish, within a cap of 12
    iterations in all; with a "Newton step" that is the chord's again, the same cap is not enough."""

    def residual(x):
        return x**3 - THETA

    def solve(jacobian_solve):
        return newton_root(
            residual, GUESS, rtol=1e-14, atol=1e-14, max_steps=12,
            approximate_inverse=lambda r: r / 3.0, jacobian_solve=jacobian_solve,
        )

    x, steps, converged = solve(lambda x, r: r / (3.0 * x**2))
    # Measured: 6 iterations (the chord alone, uncapped: 57).
    assert bool(converged) and int(steps) <= 8, int(steps)
    np.testing.assert_allclose(x, EXACT[0], rtol=1e-14)
    _, steps, converged = solve(lambda x, r: r / 3.0)
    assert not bool(converged) and int(steps) == 12
