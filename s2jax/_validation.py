"""Checks of what a user passes in, written once: raised eagerly, or a result code when traced.

Each rule is a predicate on (q0, ω0, dt) that works on concrete and traced arrays alike.
`check_initial_state` evaluates them on concrete values and raises a `ValueError` naming the
first offending body; `initial_state_is_valid` evaluates the same predicates inside a
computation, where nothing can be raised before it runs, for `RESULTS.invalid_initial_state`.
"""

import functools
import numbers
from collections.abc import Callable, Mapping

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


def positive_parameters(*names: str) -> Callable[[Callable], Callable]:
    """Declare that a model reads `params[name]` as a positive quantity (a mass, a length).

    A decorator for a Lagrangian L(q, q̇, params) or Hamiltonian H(q, p, params):

        @s2.positive_parameters("m1", "m2", "l1", "l2")
        def lagrangian(q, qdot, params): ...

    Every entry point then refuses params where one of these keys is ≤ 0 (each element of an
    array value): eagerly a `ValueError` naming the key and the element, in the graph
    `RESULTS.invalid_parameters`. A negative length gives an M that is still positive definite
    and a run that looks healthy (the double pendulum with l₁ < 0 is the pendulum with q₁ → −q₁),
    so without the declaration nothing can tell it from a model meant that way. It is checked
    after the inertia: a zero or negative mass that makes M singular is named by M's smallest
    eigenvalue. The declaration is an attribute of the function: a function that calls the
    decorated one (a lambda around it) must declare it again. The ready models declare theirs.
    """
    if not all(isinstance(name, str) for name in names):
        raise TypeError(f"positive_parameters takes the keys of params as str; got {names!r}")

    def declare(model: Callable) -> Callable:
        model.positive_parameters = names
        return model

    return declare


def declared_positive(system) -> tuple[str, ...]:
    """The keys that the function of `system` (its Lagrangian or Hamiltonian) declares positive."""
    model = getattr(system, "lagrangian", None) or getattr(system, "hamiltonian", None)
    return tuple(getattr(model, "positive_parameters", ()))


def _nonpositive(names, params, xp) -> list[tuple[str, Bool[Array, "..."]]]:
    """`(name, bad)` for each declared key that `params` has, `bad` flagging elements ≤ 0 (NaN is
    the finiteness rule's)."""
    if not isinstance(params, Mapping):
        return []
    return [(name, xp.asarray(params[name]) <= 0) for name in names if name in params]


def check_positive_parameters(names, params) -> None:
    """Raise `ValueError` naming the first element of a declared positive key that is ≤ 0."""
    for name, bad in _nonpositive(names, params, np):
        if np.any(bad):
            value = np.asarray(params[name])
            where = "" if value.ndim == 0 else str([int(i) for i in np.argwhere(bad)[0]])
            raise ValueError(
                f"params[{name!r}]{where} = {value[np.nonzero(bad)][0] if value.ndim else value} must be > 0: "
                f"the model declares {name!r} positive (s2jax.positive_parameters: a mass or a length)"
            )


def positive_parameters_hold(names, params) -> Bool[Array, ""]:
    """The rule of `check_positive_parameters` inside a computation."""
    checks = [~jnp.any(bad) for _, bad in _nonpositive(names, params, jnp)]
    return jnp.all(jnp.stack(checks)) if checks else jnp.array(True)


def check_state_arguments(q0, omega0, dt) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"], Float[Array, ""]]:
    """(q0, ω0, dt) as float64 arrays of shapes (n, 3), (n, 3), (), n ≥ 1, or a `ValueError` naming
    what is wrong (a bool or a string is not taken for a number)."""
    if not isinstance(dt, jax.Array) and np.asarray(dt).dtype.kind not in "fiuc":
        raise ValueError(f"dt must be a real number; got {dt!r} (a {type(dt).__name__})")
    q0 = _on_device(q0)
    omega0 = _on_device(omega0)
    if q0.ndim != 2 or q0.shape[-1] != 3:
        raise ValueError(f"q0 must have shape (n, 3), one unit vector per body; got {q0.shape}")
    if q0.shape[0] == 0:
        raise ValueError(f"q0 has no bodies, shape {q0.shape}; n ≥ 1")
    if omega0.shape != q0.shape:
        raise ValueError(f"omega0 must have the shape of q0, {q0.shape}; got {omega0.shape}")
    for label, x in (("q0", q0), ("omega0", omega0), ("dt", dt)):
        if jnp.iscomplexobj(x):
            raise ValueError(f"{label} is complex; the state and step of s2jax are real")
        if jnp.result_type(x) == jnp.bool_:
            raise ValueError(f"{label} must be an array of real numbers; got dtype bool")
    if not jnp.issubdtype(q0.dtype, jnp.floating):
        q0 = q0.astype(float)
    if q0.dtype != jnp.float64:
        raise ValueError(
            f"s2jax computes in float64 (its tolerances are 1e-12), but q0 has dtype {q0.dtype}: call "
            "jax.config.update('jax_enable_x64', True) before creating arrays"
        )
    omega0 = omega0.astype(q0.dtype)
    dt = jnp.asarray(dt, dtype=q0.dtype) if isinstance(dt, jax.Array) else _on_device(np.asarray(dt, q0.dtype))
    if dt.shape != ():
        raise ValueError(f"dt must be a scalar; got shape {dt.shape}")
    return q0, omega0, dt


def _on_device(x) -> Array:
    """`x` as a JAX array: itself if it is one, else copied by `jax.device_put` (the dtype
    canonicalised as `jnp.asarray` does), which compiles nothing; `jnp.asarray` of numpy input
    compiles a small program (`lax.stage`) per shape and dtype in JAX 0.10."""
    return x if isinstance(x, jax.Array) else jax.device_put(np.asarray(x))


def check_controls(controls, num_steps):
    """The open-loop controls as a float64 array of num_steps rows, or a ValueError."""
    if isinstance(controls, jax.core.Tracer):
        array = controls
    else:
        array = np.asarray(controls)
        if np.iscomplexobj(array):
            raise ValueError("`controls` is complex; controls of s2jax are real")
        if array.dtype.kind not in "fiu":
            raise ValueError(f"`controls` must be an array of numbers; got dtype {array.dtype}")
        if array.ndim and not np.all(np.isfinite(array)):
            k = int(np.argwhere(~np.isfinite(array))[0][0])
            raise ValueError(f"`controls` of step {k} is not finite: {array[k]}")
    if array.ndim == 0 or array.shape[0] != num_steps:
        raise ValueError(
            f"`controls` must have one row per step, shape (num_steps = {num_steps}, ...); got shape {array.shape}"
        )
    if array.dtype == jnp.float32:
        raise ValueError("`controls` has dtype float32; s2jax computes in float64")
    return jnp.asarray(array, dtype=jnp.float64)


def check_force_output(force, policy, q0, omega0, params, controls):
    """Trace the force once (no computation): it must return one ℝ³ vector per body."""
    def first_force():
        t0 = jnp.zeros((), q0.dtype)
        if policy is not None:
            u = policy(t0, q0, omega0, params)
        else:
            u = None if controls is None else controls[0]
        return force(t0, q0, omega0, u, params)

    try:
        shape = jax.eval_shape(first_force)
    except Exception as error:  # the user's force or policy failed on the first step's arguments
        raise ValueError(
            f"the force (or the policy) failed on the first step's arguments: {type(error).__name__}: {error}"
        ) from error
    if not hasattr(shape, "shape") or shape.shape != q0.shape:
        raise ValueError(f"the force must return shape {q0.shape}, one ℝ³ vector per body; got {shape}")
    if not getattr(force, "depends_on_velocity", True):
        check_force_ignores_velocity(force, policy, q0, omega0, params, controls)


def check_force_ignores_velocity(force, policy, q0, omega0, params, controls) -> None:
    """Raise `ValueError` if a force declared `depends_on_velocity=False` reads ω.

    The force is evaluated, eagerly, at the first step's (t, q, u) and two angular velocities,
    ω0 and ω0 plus a fixed tangent vector (at a fixed random state of the same shape where the
    state is traced): a force that ignores ω returns the same bits. Nothing is checked where the
    params, the controls or the force's own arrays are traced (no value to evaluate before
    compiling); such a force is taken at its word.
    """
    if any(isinstance(x, jax.core.Tracer) for x in jtu.tree_leaves((force, policy, params, controls))):
        return
    q = np.asarray(q0) if not isinstance(q0, jax.core.Tracer) else None
    omega = np.asarray(omega0) if not isinstance(omega0, jax.core.Tracer) else None
    rng = np.random.default_rng(0)
    if q is None or omega is None:
        q = rng.standard_normal(q0.shape)
        q /= np.linalg.norm(q, axis=-1, keepdims=True)
        omega = np.cross(q, rng.standard_normal(q0.shape))
    change = np.cross(q, rng.standard_normal(q.shape))  # tangent, O(1): ω_i → ω_i + change_i
    with jax.ensure_compile_time_eval():
        q, omega, other = (jnp.asarray(x, dtype=q0.dtype) for x in (q, omega, omega + change))
        t0 = jnp.zeros((), q0.dtype)
        if policy is not None:
            u = policy(t0, q, omega, params)
        else:
            u = None if controls is None else jnp.asarray(controls)[0]
        values = [force(t0, q, w, u, params) for w in (omega, other)]
    if any(isinstance(x, jax.core.Tracer) for x in jtu.tree_leaves(values)):
        return  # the force closes over traced arrays
    first, second = (np.asarray(v) for v in values)
    if not np.array_equal(first, second, equal_nan=True):
        difference = np.nanmax(np.abs(second - first)) if np.any(np.isfinite(second - first)) else np.nan
        raise ValueError(
            f"the force is declared depends_on_velocity=False, but it reads ω: at the same (t, q, u) and "
            f"another ω it returns a different value (by up to {difference:.3e}). Declare it as it is: "
            "s2jax.Force(fn) (depends_on_velocity=True, the default) for a function, or "
            "depends_on_velocity = True in your AbstractForce. Declared False, it would be evaluated with a "
            "stale ω (the variational integrators' lazy steps, whose update of ω is then explicit), and the run "
            "would lose an order of accuracy without a word."
        )


def names_missing_params_keys(make_plan: Callable) -> Callable:
    """`make_plan(model, q0, omega0, params, **options)`, with the `KeyError` of a key that `params`
    lacks re-raised as a `ValueError` naming the key and the keys given.

    The plan is where the user's model is first evaluated (the form check of (2.2)), so a missing
    key shows there as the model's own `KeyError: 'g'`, raised from deep inside a trace. A
    `KeyError` for a key that `params` has comes from elsewhere and is raised as it is.
    """

    @functools.wraps(make_plan)
    def plan(model, q0, omega0, params, **options):
        try:
            return make_plan(model, q0, omega0, params, **options)
        except KeyError as error:
            key = error.args[0] if error.args else None
            if not isinstance(params, Mapping) or key in params:
                raise
            given = sorted(params, key=str)
            raise ValueError(f"params has no key {key!r}, which the model reads; the keys given: {given}") from None

    return plan


def positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive Python int; got {value!r}")
    return int(value)


def trace_floats(leaf):
    """A float (or numpy) leaf of params as a JAX array, which `jax.jit` traces, so that a new value
    does not compile again; other leaves as they are. Copied to the device by `jax.device_put`, the
    dtype canonicalised as `jnp.asarray` does (a Python float stays weakly typed): `jnp.asarray`
    compiles a small program (`lax.stage`) per new shape and dtype, each ~10 ms in a new process."""
    if isinstance(leaf, jax.Array):
        return leaf
    if isinstance(leaf, (float, np.ndarray, np.floating)) and not isinstance(leaf, bool):
        return jax.device_put(leaf)
    return leaf
