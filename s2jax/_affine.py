"""Legendre maps that are affine: their inverse by one linear solve instead of Newton's iterations.

For every mechanical Lagrangian (quadratic in q̇, plus terms linear in q̇: rotating frames,
magnetic fields) ∂L/∂q̇ is affine in q̇, so the inverse of the Legendre map 001 (20) is one
linear solve, which Newton's method from q̇ = 0 reaches after its first iteration. Newton's
`while_loop` and its implicit-function derivative still cost compile time wherever the map is
inverted inside a step (`legendre_transform`'s H, `HamiltonianSystem.momentum`); `affine_root`
takes that first iteration alone where the computation shows that the Jacobian cannot change
with the unknown.

The test is structural: the Jacobian of the residual, traced as a jaxpr, has no output that
depends on the unknown (an equation's outputs depend on all its inputs: a nested call, a loop
or a custom derivative counts as depending on everything it reads). It never says "affine" of a
map that is not; where it cannot tell, Newton's method runs as before.
"""

import weakref
from collections.abc import Callable, Hashable

import jax
import jax.numpy as jnp
from jax.extend.core import Jaxpr, Literal

from ._custom_types import Array, Float
from ._newton import newton_root

# By function (the user's L or H): whether its residual's Jacobian is constant, per
# `abstract_key` of its arguments. Python can only branch on concrete values, so with every
# array traced the traced computation, and the answer, depend on shapes and dtypes alone.
_CONSTANT_JACOBIAN: "weakref.WeakKeyDictionary[Callable, dict[Hashable, bool]]" = weakref.WeakKeyDictionary()


def _known(function: Callable) -> dict:
    """What is known of `function`'s residuals (an empty dict, not kept, where the function
    cannot be referenced weakly)."""
    try:
        return _CONSTANT_JACOBIAN.setdefault(function, {})
    except TypeError:
        return {}


def _depends_on_inputs(jaxpr: Jaxpr) -> bool:
    """Whether any output of `jaxpr` may depend on its inputs (not only on its constants). An
    equation with effects (a mutable reference, a callback) may carry a dependence that its
    inputs and outputs do not show: then True."""
    reached = set(jaxpr.invars)
    for equation in jaxpr.eqns:
        if equation.effects:
            return True
        if any(not isinstance(v, Literal) and v in reached for v in equation.invars):
            reached.update(equation.outvars)
    return any(not isinstance(v, Literal) and v in reached for v in jaxpr.outvars)


def jacobian_is_constant(
    residual: Callable[[Float[Array, "n 3"]], Float[Array, "n 3"]],
    x: Float[Array, "n 3"]
) -> bool:
    """Whether the Jacobian of `residual` is, by the structure of its computation, independent
    of its argument (so that `residual` is affine). False where that cannot be told."""
    shape = jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x))
    return not _depends_on_inputs(jax.make_jaxpr(jax.jacfwd(residual))(shape).jaxpr)


def abstract_key(*trees) -> Hashable | None:
    """(tree structure, shapes and dtypes) of `trees` where every leaf is a tracer, else None."""
    leaves, structure = jax.tree.flatten(trees)
    if not all(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
        return None
    return structure, tuple((leaf.shape, leaf.dtype) for leaf in leaves)


def affine_root(
    function: Callable,
    residual: Callable[[Float[Array, "n 3"]], Float[Array, "n 3"]],
    guess: Float[Array, "n 3"],
    key: Hashable | None,
    **newton_options,
) -> Float[Array, "n 3"]:
    """The root of `residual`: x = guess − J⁻¹ r(guess), one Newton step, where `residual` is
    affine (`jacobian_is_constant`; the answer kept per `function` and `key`, the
    `abstract_key` of what the residual closes over, None: not kept); otherwise `newton_root`
    with `newton_options`.

    The step is Newton's first iteration, exact for an affine map: `jax.jacfwd`'s Jacobian as a
    3n × 3n matrix, solved by LU (`jnp.linalg.solve`), differentiated as ordinary code, twice if
    need be (`newton_root`'s derivative is the implicit function theorem's). Not by
    `newton_root`'s block elimination: differentiated twice inside `HamiltonianRattle`'s step,
    its unrolled 3 × 3 blocks made the double pendulum's `simulate` 13.9k lines of StableHLO that
    compiled in 5.9 s, against 8.9k and 3.6 s with LU. LAPACK's calls cost at run time where the
    systems are tiny and solved at every step: the double pendulum's H through
    `legendre_transform` simulates 1000 steps in 82 ms against 32 with Newton's loop, and an
    iLQR solve of a closed-form one-body H (20 steps) takes 28 against 14 ms once compiled;
    their first calls take 3.9 against 15 s and 8 against 20 s. Solves written in XLA run faster
    and compile as slowly as Newton's loop did: the block elimination (first calls 11 and 15 s,
    runs 39 and 11 ms); the same inside `lax.custom_linear_solve`, so that derivatives are solves
    (9.2 and 18.8 s; 24 and 12 ms); a rolled Gaussian elimination with partial pivoting, also
    inside it (9.7 and 19.5 s; 40 and 15 ms). What compiles fast is LAPACK's opaque call.
    docs/performance.md, "Compile time per entry point".
    """
    known = _known(function) if key is not None else {}
    affine = known.get(key)
    if affine is None:
        affine = known[key] = jacobian_is_constant(residual, guess)
    if not affine:
        return newton_root(residual, guess, **newton_options)[0]
    def with_value(x):
        value = residual(x)
        return value, value

    size = jnp.size(guess)
    jacobian, value = jax.jacfwd(with_value, has_aux=True)(guess)  # one evaluation of the residual
    step = jnp.linalg.solve(jacobian.reshape(size, size), value.reshape(size))
    return guess - step.reshape(jnp.shape(guess))
