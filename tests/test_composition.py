"""Yoshida compositions of the variational integrators (002 §3.4)."""

import numpy as np
import pytest
from double_pendulum_reference import solve as reference_solve

import s2jax as s2
from s2jax._integrators.composition import kahan_li_weights, triple_jump_weights

dsp = s2.models.double_spherical_pendulum


def test_weights_are_consistent():
    for order in (4, 6):
        weights = np.array(triple_jump_weights(order))
        assert weights.size == 3 ** (order // 2 - 1)
        np.testing.assert_allclose(weights.sum(), 1.0, rtol=0, atol=1e-15)
        # The order conditions of a symmetric composition of a second-order method.
        np.testing.assert_allclose(np.sum(weights**3), 0.0, atol=1e-14)
    np.testing.assert_allclose(np.sum(np.array(triple_jump_weights(6)) ** 5), 0.0, atol=1e-13)


@pytest.mark.parametrize("order, stages", [(6, 9), (8, 17)])
def test_kahan_li_weights_are_palindromes_that_meet_the_odd_power_conditions(order, stages):
    """Σγ = 1 and Σγ^k = 0 for odd 3 ≤ k < order: necessary conditions (those of the commuting
    case) on the printed digits; the order itself is measured in `test_order_against_dop853`."""
    weights = np.array(kahan_li_weights(order))
    assert weights.size == stages
    np.testing.assert_array_equal(weights, weights[::-1])
    np.testing.assert_allclose(weights.sum(), 1.0, rtol=0, atol=1e-15)
    for k in range(3, order, 2):
        np.testing.assert_allclose(np.sum(weights**k), 0.0, atol=1e-14)


@pytest.mark.parametrize(
    "order, method, steps",
    [
        (4, "triple_jump", [10, 20, 40, 80]),
        (6, "triple_jump", [20, 30, 45, 68]),
        (6, "kahan_li", [8, 12, 18, 27]),
        (8, "kahan_li", [8, 10, 12, 14]),
    ],
)
@pytest.mark.slow
def test_order_against_dop853(order, method, steps):
    q0, omega0 = dsp.paper_state()
    params = dsp.paper_params()
    q_ref, omega_ref = reference_solve(q0, omega0, params, 1.0, rtol=1e-13, atol=1e-13)
    errors = []
    for n in steps:
        sol = s2.simulate(
            dsp.lagrangian, q0, omega0, params, dt=1.0 / n, num_steps=n, save_every=n,
            integrator=s2.Composition(s2.VariationalIntegrator(), order=order, method=method),
        )
        errors.append(max(np.max(np.abs(sol.q[-1] - q_ref)), np.max(np.abs(sol.omega[-1] - omega_ref))))
    slope = np.polyfit(np.log(1.0 / np.array(steps)), np.log(errors), 1)[0]
    assert abs(slope - order) <= 0.25, (slope, errors)
    assert errors[-1] > 1e-11  # still far above the reference's error


@pytest.mark.slow
def test_composed_vi_keeps_unit_length():
    q0, omega0 = dsp.paper_state()
    sol = s2.simulate(
        dsp.lagrangian, q0, omega0, dsp.paper_params(), dt=0.05, num_steps=2000, save_every=10,
        integrator=s2.Composition(s2.VariationalIntegrator(), order=6),
    )
    assert float(np.max(s2.unit_length_error(sol.q))) <= 1e-13


def test_bad_order_is_rejected():
    with pytest.raises(ValueError, match="order 4 or 6"):
        s2.Composition(s2.VariationalIntegrator(), order=3)
    with pytest.raises(ValueError, match="'kahan_li' supports order 6 or 8, got 4"):
        s2.Composition(s2.VariationalIntegrator(), order=4, method="kahan_li")
    with pytest.raises(ValueError, match="method must be one of"):
        s2.Composition(s2.VariationalIntegrator(), method="suzuki")


def test_composition_declares_the_capabilities_of_its_base():
    explicit = s2.Composition(s2.ExplicitVariationalIntegrator(), order=6)
    assert explicit.requires_diagonal_inertia and explicit.is_symmetric and explicit.order == 6
    assert not s2.Composition(s2.VariationalIntegrator()).requires_diagonal_inertia
    # simulate reads the declaration: a composed explicit VI refuses a non-diagonal M too.
    with pytest.raises(ValueError, match=r"Composition needs a diagonal inertia matrix, but M\[0, 1\]"):
        s2.simulate(dsp.lagrangian, *dsp.paper_state(), dsp.paper_params(), dt=0.01, num_steps=3, integrator=explicit)
    with pytest.raises(ValueError, match="symmetric second-order method; RungeKutta4 is not one"):
        s2.Composition(s2.RungeKutta4())
