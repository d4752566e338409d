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
