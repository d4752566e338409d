"""Checks of an initial state, written once: raised eagerly, or a result code when traced.

Each rule is a predicate on (q0, ω0, dt) that works on concrete and traced arrays alike.
`check_initial_state` evaluates them on concrete values and raises a `ValueError` naming the
first offending body; `initial_state_is_valid` evaluates the same predicates inside a
computation, where nothing can be raised before it runs, for `RESULTS.invalid_initial_state`.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np

from ._custom_types import Array, ArrayLike, Bool, Float

INITIAL_STATE_TOLERANCE = 1e-12
"""|q_i| may differ from 1, and q_i·ω_i from 0, by at most this much."""


def _rules(q, omega, dt, xp) -> list[tuple[Bool[Array, "..."], Callable[[int], str]]]:
    """`(bad, message)` per rule: `bad` flags the offending bodies (a scalar for dt).

    `xp` is numpy for concrete values (no dispatch cost per operation) or jax.numpy in a trace.
    """
    length_error = xp.abs(xp.linalg.norm(q, axis=-1) - 1.0)
    tangency_error = xp.abs(xp.sum(q * omega, axis=-1))
    return [
        (~xp.all(xp.isfinite(q), axis=-1), lambda i: f"q0 of body {i} is not finite: {np.asarray(q[i])}"),
        (~xp.all(xp.isfinite(omega), axis=-1), lambda i: f"omega0 of body {i} is not finite: {np.asarray(omega[i])}"),
        (
            length_error > INITIAL_STATE_TOLERANCE,
            lambda i: (
                f"q0 of body {i} is not a unit vector: |q_{i}| − 1 = {float(xp.linalg.norm(q[i])) - 1.0:.3e} "
                f"(tolerance {INITIAL_STATE_TOLERANCE:g}). s2jax never renormalises silently; normalise "
                "it yourself if that is what you mean."
            ),
        ),
        (
            tangency_error > INITIAL_STATE_TOLERANCE,
            lambda i: (
                f"omega0 of body {i} is not tangent to the sphere at q0: q_{i}·ω_{i} = "
                f"{float(xp.dot(q[i], omega[i])):.3e} (tolerance {INITIAL_STATE_TOLERANCE:g}). The equations "
                "of motion (2.9)–(2.11) of Lee–Leok–McClamroch 2009 assume ω_i ⊥ q_i; use "
                "s2jax.project_tangent(q0, omega0) to remove the normal component."
            ),
        ),
        (~((dt > 0) & xp.isfinite(dt)), lambda i: f"dt must be a finite positive number; got {dt}"),
    ]


def check_initial_state(
    q0: Float[ArrayLike, "n 3"], omega0: Float[ArrayLike, "n 3"], dt: Float[ArrayLike, ""] = 1.0
) -> None:
    """Raise `ValueError` unless (q0, ω0) is a finite point of T(S²)ⁿ to within 1e-12 and dt > 0.

    The message names the first offending body. Values must be concrete (not traced).
    """
    q0, omega0, dt = np.asarray(q0), np.asarray(omega0), np.asarray(dt)
    for bad, message in _rules(q0, omega0, dt, np):
        bad = np.atleast_1d(np.asarray(bad))
        if np.any(bad):
            raise ValueError(message(int(np.argmax(bad))))


def initial_state_is_valid(q0, omega0, dt) -> Bool[Array, ""]:
    """The predicates of `check_initial_state` inside a computation: True if none is broken."""
    return ~jnp.any(jnp.stack([jnp.any(bad) for bad, _ in _rules(q0, omega0, dt, jnp)]))


def _numeric_leaves(params):
    return [
        (jtu.keystr(path), leaf)
        for path, leaf in jtu.tree_flatten_with_path(params)[0]
        if isinstance(leaf, (float, complex, np.ndarray, np.number, jax.Array)) and not isinstance(leaf, bool)
    ]


def check_parameters(params) -> None:
    """Raise `ValueError` if a numeric leaf of params is complex or not finite, naming it."""
    for name, leaf in _numeric_leaves(params):
        value = np.asarray(leaf)
        if np.iscomplexobj(value):
            raise ValueError(f"params{name} is complex ({value}); s2jax's models are real")
        if np.issubdtype(value.dtype, np.floating) and not np.all(np.isfinite(value)):
            raise ValueError(f"params{name} is not finite: {value}")


def parameters_are_finite(params) -> Bool[Array, ""]:
    """The finiteness rule of `check_parameters` inside a computation."""
    leaves = [jnp.asarray(leaf) for _, leaf in _numeric_leaves(params)]
    checks = [jnp.all(jnp.isfinite(leaf)) for leaf in leaves if jnp.issubdtype(leaf.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(checks)) if checks else jnp.array(True)
