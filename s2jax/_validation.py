"""Checks of an initial state, with messages that name the body."""

import numpy as np

INITIAL_STATE_TOLERANCE = 1e-12
"""|q_i| may differ from 1, and q_i·ω_i from 0, by at most this much."""


def validate_initial_state(q, omega) -> None:
    """Raise `ValueError` unless (q, ω) is a finite point of T(S²)ⁿ to within 1e-12."""
    q = np.asarray(q)
    omega = np.asarray(omega)
    for name, x in (("q0", q), ("omega0", omega)):
        bad = ~np.all(np.isfinite(x), axis=-1)
        if np.any(bad):
            i = int(np.argmax(bad))
            raise ValueError(f"{name} of body {i} is not finite: {x[i]}")
    length_error = np.abs(np.linalg.norm(q, axis=-1) - 1.0)
    if np.any(length_error > INITIAL_STATE_TOLERANCE):
        i = int(np.argmax(length_error))
        raise ValueError(
            f"q0 of body {i} is not a unit vector: |q_{i}| − 1 = "
            f"{np.linalg.norm(q[i]) - 1.0:.3e} (tolerance {INITIAL_STATE_TOLERANCE:g}). "
            "s2jax never renormalises silently; normalise it yourself if that is what you mean."
        )
    tangency_error = np.abs(np.sum(q * omega, axis=-1))
    if np.any(tangency_error > INITIAL_STATE_TOLERANCE):
        i = int(np.argmax(tangency_error))
        raise ValueError(
            f"omega0 of body {i} is not tangent to the sphere at q0: q_{i}·ω_{i} = "
            f"{np.dot(q[i], omega[i]):.3e} (tolerance {INITIAL_STATE_TOLERANCE:g}). The equations "
            "of motion (2.9)–(2.11) of Lee–Leok–McClamroch 2009 assume ω_i ⊥ q_i; use "
            "s2jax.project_tangent(q0, omega0) to remove the normal component."
        )
