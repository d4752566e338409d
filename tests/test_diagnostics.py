"""`energy` and friends evaluate long series in bounded chunks, with the same values."""

import jax
import numpy as np
import pytest

import s2jax as s2
from s2jax import _diagnostics


@pytest.mark.slow
def test_chunked_energy_matches_one_batch(monkeypatch):
    model = s2.models.n_body_on_sphere
    params = model.paper_params()
    sol = s2.simulate(model.lagrangian, *model.paper_state(), params, dt=1e-3, num_steps=50)
    whole = s2.energy(model.lagrangian, sol.q, sol.omega, params)
    # 3 · n² = 27 entries per state: chunks of 2 states, 26 chunks, the last one padded.
    monkeypatch.setattr(_diagnostics, "_CHUNK_ENTRIES", 54)
    chunked = s2.energy(model.lagrangian, sol.q, sol.omega, params)
    assert chunked.shape == (51,)
    np.testing.assert_allclose(chunked, whole, rtol=0, atol=1e-14)
    batch = jax.numpy.stack([sol.q, sol.q])  # leading axes (2, 51) survive the chunking
    assert s2.energy(model.lagrangian, batch, jax.numpy.stack([sol.omega] * 2), params).shape == (
        2,
        51,
    )


@pytest.mark.slow
def test_figures_of_merit_reuse_given_energies():
    model = s2.models.n_body_on_sphere
    params = model.paper_params()
    sol = s2.simulate(model.lagrangian, *model.paper_state(), params, dt=1e-3, num_steps=20)
    e = s2.energy(model.lagrangian, sol.q, sol.omega, params)
    assert s2.figures_of_merit(model.lagrangian, sol.q, sol.omega, params, energies=e) == (
        s2.figures_of_merit(model.lagrangian, sol.q, sol.omega, params)
    )


def test_energy_and_momentum_map_are_one_program_and_independent_of_it(compilations):
    """`energy` of a trajectory compiles one program, and none for new values of the same shapes
    (an eager `jax.vmap` ran, and compiled, an operation at a time: 16 programs for the
    spherical pendulum). The values against the closed forms E = ½ m r²|ω|² − m g r q·e₃ and
    J = m r² (q × (ω × q))·e₃ = m r² ω·e₃ (ω ⊥ q, |q| = 1)."""
    model = s2.models.spherical_pendulum
    params = {"m": 1.5, "r": 0.7, "g": 9.81}
    keys = jax.random.split(jax.random.PRNGKey(5), 7)
    q, omega = jax.vmap(lambda key: s2.random_state(key, 1))(keys)
    found, faster = {}, 2.0 * omega
    assert compilations(lambda: found.update(e=s2.energy(model.lagrangian, q, omega, params))) == 1
    assert compilations(lambda: found.update(e2=s2.energy(model.lagrangian, q, faster, params))) == 0
    m, r, g = params["m"], params["r"], params["g"]
    for scale, name in ((1.0, "e"), (2.0, "e2")):
        w = scale * omega[:, 0]
        expected = 0.5 * m * r**2 * np.sum(w * w, axis=-1) - m * g * r * q[:, 0, 2]
        np.testing.assert_allclose(found[name], expected, rtol=1e-14, atol=1e-14)
    assert compilations(lambda: found.update(j=s2.momentum_map(model.lagrangian, q, omega, params))) == 1
    np.testing.assert_allclose(found["j"], m * r**2 * omega[:, 0, 2], rtol=1e-13, atol=1e-14)
