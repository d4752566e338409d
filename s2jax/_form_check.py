"""The check that a Lagrangian has the form (2.2) of Lee–Leok–McClamroch 2009 (002).

(2.2) needs ∂²L/∂q̇∂q̇ = M ⊗ I₃ with M symmetric positive definite and independent of q, and
L − L(q, 0) quadratic in q̇. The rules below are predicates on concrete or traced values
alike: `check_lagrangian_form` raises the first that fails, naming the body, and
`lagrangian_form_result` evaluates the same predicates inside a computation (under `jax.jit`,
`jax.vmap` or `jax.grad` with respect to params), where `simulate` turns a failure into
`RESULTS.not_lagrangian_form` instead of integrating the wrong equations.

A Lagrangian that has the form (2.2) except that its M is not positive definite (a negative or
zero mass, a zero length) is a separate diagnosis, the same eagerly and in the graph:
`InertiaNotPositiveDefinite` (a `ValueError` naming the smallest eigenvalue of M) and
`RESULTS.inertia_not_positive_definite`. Such an L is never run as a general Lagrangian: no
integrator can take it.
"""

import functools
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._custom_types import Array, Bool, Float, Lagrangian, Params
from ._geometry import fixed_random_state
from ._jit import evaluate_now
from ._results import RESULTS
from ._system import LagrangianSystem, SystemArgs
from ._validation import trace_floats

_FORM = "The Lagrangian is not of the form (2.2) of Lee–Leok–McClamroch 2009: "

POSITIVE_DEFINITE_TOLERANCE = 1e-12
"""An inertia is taken as positive definite when its smallest eigenvalue exceeds this times its
largest entry (in absolute value): below that it is singular in float64."""


class InertiaNotPositiveDefinite(ValueError):
    """The inertia of a Lagrangian is not positive definite (the message names its smallest
    eigenvalue): the form (2.2) holds otherwise, so the Lagrangian is not run as a general one."""


def _rules(lagrangian, q, omega, params, xp) -> tuple[Float[Array, "n n"], list[tuple[Bool[Array, "..."], Callable]]]:
    """M at q, and `(bad, message)` per rule: `bad` flags the offending bodies (or is a scalar).
    The last rule, that M is positive definite, is a diagnosis of its own once the others hold.

    The Hessian is probed with three random vectors (Hessian–vector products, so the check
    costs O(1) Lagrangian gradients beyond the n tangents of M, for any n). M is compared at q,
    at −q, at a rotation of q and at a random configuration: the first three share the Gram
    matrix (q_i·q_j), so an inertia that depends on q only through it passes them, but not the
    fourth. Quadraticity is checked along q̇ = ω × q and a second tangent velocity, by the first
    and third derivatives of L(q, s q̇) in s. NaN fails every rule (the comparisons are written as `~(x <= tol)`).
    """
    if xp is np:
        # Concrete values, checked before compiling (`evaluate_now`: even when `simulate` is
        # called inside a user's `jax.jit` or `lax.scan` with params closed over). Float params
        # as arrays: `filter_jit` would take Python floats as static, and compile the check
        # again for every new value (and once more for `Problem.planned`'s arrays).
        with jax.ensure_compile_time_eval():  # arrays, even inside a user's jit
            params = jax.tree_util.tree_map(trace_floats, params)
        quantities = evaluate_now(_form_quantities, lagrangian, q, omega, params)
    else:
        quantities = _form_quantities(lagrangian, q, omega, params)
    # numpy for concrete values (no dispatch cost per operation), jax.numpy in a trace
    inertias, probes, products, residuals = (xp.asarray(x) for x in quantities)
    inertia = inertias[0]
    scale = xp.maximum(xp.max(xp.abs(inertia)), xp.finfo(inertia.dtype).tiny)
    tol = 1e-9 * scale
    probe_scale = xp.max(xp.abs(probes), axis=(1, 2))[:, None]
    mismatch = xp.max(xp.abs(products - xp.einsum("ij,pja->pia", inertia, probes)), axis=-1) / probe_scale
    dependence = xp.max(xp.abs(inertias[1:] - inertia[None]), axis=(0, 2))
    asymmetry = xp.max(xp.abs(inertia - inertia.T))
    smallest = xp.linalg.eigvalsh(xp.nan_to_num(inertia))[0]  # a NaN M fails the rules above
    largest = xp.max(xp.abs(inertia))  # for the message: `scale` is never below the smallest normal
    speed = 1.0 + xp.max(xp.abs(omega))
    quadratic = xp.max(xp.abs(residuals))
    return inertia, [
        (
            ~(xp.max(mismatch, axis=0) <= tol),
            lambda i: _FORM + f"∂²L/∂q̇∂q̇ is not M ⊗ I₃ (the velocities of body {i} enter the kinetic energy "
            "with different weights along different axes, or couple to other bodies' velocities other "
            "than through M_ij q̇_i·q̇_j).",
        ),
        (
            ~(dependence <= tol),
            lambda i: _FORM + f"the inertia ∂²L/∂q̇∂q̇ of body {i} depends on the configuration q. The "
            "variational integrators of s2jax need a constant inertia matrix M.",
        ),
        (
            ~(asymmetry <= tol),
            lambda i: f"The inertia matrix M read off the Lagrangian is not symmetric:\n{np.asarray(inertia)}",
        ),
        (
            ~(quadratic <= 1e-9 * xp.maximum(scale, 1.0) * speed**2),
            lambda i: _FORM + "L(q, q̇) − L(q, 0) is not a quadratic form ½ Σ M_ij q̇_i·q̇_j in the velocities.",
        ),
        (
            ~(smallest > POSITIVE_DEFINITE_TOLERANCE * scale),
            lambda i: (
                "The inertia matrix M of the Lagrangian (the form (2.2) of Lee–Leok–McClamroch 2009) is "
                f"not positive definite: its smallest eigenvalue is {float(smallest):.3e}, not above "
                f"{POSITIVE_DEFINITE_TOLERANCE:g} × max|M_ij| = {POSITIVE_DEFINITE_TOLERANCE * float(largest):.3e}. "
                f"M =\n{np.asarray(inertia)}\nCheck the params: a zero or negative mass, or a zero length, "
                "gives such an M, and no integrator can take it."
            ),
        ),
    ]


def check_lagrangian_form(
    lagrangian: Lagrangian, q: Float[Array, "n 3"], omega: Float[Array, "n 3"], params: Params
) -> np.ndarray:
    """Check, with concrete values, that L has the form (2.2) of 002; return M as numpy.

    Raises `ValueError` naming the first offending body (see `_rules` for what is probed);
    `InertiaNotPositiveDefinite`, a `ValueError`, naming the smallest eigenvalue of M when L
    has the form (2.2) with an M that is not positive definite.
    """
    inertia, rules = _rules(lagrangian, jnp.asarray(q), jnp.asarray(omega), params, np)
    *structure, (indefinite, message) = rules
    for bad, message_of_body in structure:
        bad = np.atleast_1d(np.asarray(bad))
        if np.any(bad):
            raise ValueError(message_of_body(int(np.argmax(bad))))
    if np.any(indefinite):
        raise InertiaNotPositiveDefinite(message(0))
    return np.asarray(inertia)


def lagrangian_form_result(lagrangian, q, omega, params) -> RESULTS:
    """The diagnosis of `check_lagrangian_form` inside a computation, as a result code:
    `successful`, `not_lagrangian_form`, or `inertia_not_positive_definite` when L has the
    form (2.2) but M is not positive definite (what `InertiaNotPositiveDefinite` says eagerly)."""
    _, rules = _rules(lagrangian, q, omega, params, jnp)
    *structure, (indefinite, _) = rules
    structured = ~jnp.any(jnp.stack([jnp.any(bad) for bad, _ in structure]))
    definite = RESULTS.where(jnp.any(indefinite), RESULTS.inertia_not_positive_definite, RESULTS.successful)
    return RESULTS.where(structured, definite, RESULTS.not_lagrangian_form)


@functools.lru_cache(maxsize=64)
def _random_vectors(n: int) -> tuple[np.ndarray, np.ndarray]:
    """A fixed random configuration of n bodies and three fixed random probes of shape (n, 3),
    from numpy's generator: constants of the program, so that neither tracing nor
    XLA sees a random-number generator (`jax.random.normal` here cost 0.6 s of tracing and
    compiling per new Lagrangian, a fifth of a first `simulate`; measured on the double pendulum)."""
    scattered, _ = fixed_random_state(n, seed=1)
    return scattered, np.random.default_rng(0).normal(size=(3, n, 3))


@eqx.filter_jit
def _form_quantities(lagrangian, q, omega, params):
    system = LagrangianSystem(lagrangian)
    args = SystemArgs(params)
    angle = 0.7
    c, s = jnp.cos(angle), jnp.sin(angle)
    rotation = jnp.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]], dtype=q.dtype)
    rotation = rotation @ jnp.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]], dtype=q.dtype)
    scattered, probes = (jnp.asarray(x, q.dtype) for x in _random_vectors(q.shape[0]))
    configurations = jnp.stack([q, -q, q @ rotation.T, scattered])
    inertias = jax.vmap(lambda x: system.inertia(x, args))(configurations)

    def hessian_product(v):
        momentum = lambda qdot: jax.grad(lagrangian, argnums=1)(q, qdot, params)  # noqa: E731
        return jax.jvp(momentum, (jnp.zeros_like(q),), (v,))[1]

    def non_quadratic(qdot):
        # g′(0) and g‴(1) for g(s) = L(q, s q̇) both vanish when L − L(q, 0) is a quadratic
        # form in q̇. V(q) enters neither (its tangent is exactly zero), so a large V at the
        # probed configuration cannot bury the kinetic energy in round-off.
        def derivative(g):
            return lambda s: jax.jvp(g, (s,), (jnp.ones_like(s),))[1]

        def line(s):
            return lagrangian(q, s * qdot, params)

        zero, one = jnp.zeros((), q.dtype), jnp.ones((), q.dtype)
        return jnp.stack([derivative(line)(zero), derivative(derivative(derivative(line)))(one)])

    other = jnp.cross(q @ rotation.T, q)
    velocities = jnp.stack([system.velocity(q, omega), other])
    return inertias, probes, jax.vmap(hessian_product)(probes), jax.vmap(non_quadratic)(velocities)
