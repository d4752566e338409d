"""Small pure functions on S² and SO(3): the hat map, the Cayley map, tangent projections.

All functions act on the last axis (size 3) and broadcast over leading axes.
"""

import jax
import jax.numpy as jnp
import numpy as np

from ._custom_types import Array, ArrayLike, Float


def hat(v: Float[ArrayLike, "... 3"]) -> Float[Array, "... 3 3"]:
    """The hat map of 002 (2.8): `hat(a) @ b == cross(a, b)`."""
    v = jnp.asarray(v)
    x, y, z = v[..., 0], v[..., 1], v[..., 2]
    zero = jnp.zeros_like(x)
    rows = [
        jnp.stack([zero, -z, y], axis=-1),
        jnp.stack([z, zero, -x], axis=-1),
        jnp.stack([-y, x, zero], axis=-1),
    ]
    return jnp.stack(rows, axis=-2)


_LEVI_CIVITA = np.zeros((3, 3, 3))
_LEVI_CIVITA[0, 1, 2] = _LEVI_CIVITA[1, 2, 0] = _LEVI_CIVITA[2, 0, 1] = 1.0
_LEVI_CIVITA[0, 2, 1] = _LEVI_CIVITA[2, 1, 0] = _LEVI_CIVITA[1, 0, 2] = -1.0


def cross(a: Float[ArrayLike, "... 3"], b: Float[ArrayLike, "... 3"]) -> Float[Array, "... 3"]:
    """a × b as the contraction (a × b)_i = ε_ijk a_j b_k with the Levi-Civita symbol.

    `jnp.cross` to round-off (each component has two non-zero terms; XLA may fuse one product
    and the difference into an FMA, so not always bit for bit). Used where many
    cross products are chained: XLA fuses `jnp.cross`'s slices by duplicating their producers,
    and compiled the reverse pass of `RKMK4` ~3× slower with it (docs/performance.md).
    """
    return jnp.einsum("ijk,...j,...k->...i", _LEVI_CIVITA, a, b)


def dot(a: Float[ArrayLike, "... 3"], b: Float[ArrayLike, "... 3"]) -> Float[Array, "..."]:
    """The Euclidean inner product over the last axis."""
    return jnp.sum(jnp.asarray(a) * jnp.asarray(b), axis=-1)


def gram(a: Float[ArrayLike, "n 3"], b: Float[ArrayLike, "m 3"]) -> Float[Array, "n m"]:
    """The n × m matrix of inner products a_i·b_j, as the sum of three outer products.

    Written so that XLA CPU fuses it with what uses it elementwise. `a @ b.T` runs as a separate
    dot, and M⁻¹ ∘ (q @ qᵀ) before a Cholesky took 17.0 µs a factorisation at n = 64 against 9.1
    µs in this form; `dot(a[:, None], b[None, :])` reduces a broadcast n × m × 3 product, 26 µs
    alone (docs/performance.md, "Dense inertia").
    """
    a, b = jnp.asarray(a), jnp.asarray(b)
    return sum(a[:, c, None] * b[None, :, c] for c in range(3))


def project_tangent(q: Float[ArrayLike, "... 3"], v: Float[ArrayLike, "... 3"]) -> Float[Array, "... 3"]:
    """The orthogonal projection of v onto T_q S², v − (q·v) q = −q × (q × v) for |q| = 1.

    Use it to turn an angular velocity with a small normal component (e.g. a rounded value
    printed in a paper) into one that `s2jax.simulate` accepts.
    """
    q = jnp.asarray(q)
    v = jnp.asarray(v)
    return v - dot(q, v)[..., None] * q


def cayley_displacement(f: Float[Array, "... 3"], q: Float[Array, "... 3"]) -> Float[Array, "... 3"]:
    """(F − I) q for F = cay(f) = (I + f̂)(I − f̂)⁻¹, the update of 002 (3.11), (3.15).

    Written out (002 §3.3),

        F q = [(1 − |f|²) q + 2 (f·q) f + 2 f × q] / (1 + |f|²),

    which is an exact rotation for every f. 002 (3.15) drops the (f·q) f term because the
    solution of (3.16) has f ⊥ q; keeping it makes |F q| = |q| hold to round-off even before
    Newton's method has converged.
    """
    ff = dot(f, f)[..., None]
    fq = dot(f, q)[..., None]
    return 2.0 * (fq * f + jnp.cross(f, q) - ff * q) / (1.0 + ff)


def cayley_rotate(f: Float[Array, "... 3"], q: Float[Array, "... 3"]) -> Float[Array, "... 3"]:
    """F q with F = cay(f) ∈ SO(3) (002 (3.15)); |F q| = |q| to round-off."""
    return q + cayley_displacement(f, q)


def random_configuration(key: Array, n: int, dtype=None) -> Float[Array, "n 3"]:
    """n independent points uniformly distributed on S²."""
    v = jax.random.normal(key, (n, 3), dtype=dtype)
    return v / jnp.linalg.norm(v, axis=-1, keepdims=True)


def random_state(key: Array, n: int, scale: float = 1.0, dtype=None) -> tuple[Array, Array]:
    """A random (q, ω) ∈ T(S²)ⁿ: uniform q_i, Gaussian ω_i projected onto T_{q_i} S²."""
    kq, kw = jax.random.split(key)
    q = random_configuration(kq, n, dtype)
    omega = project_tangent(q, scale * jax.random.normal(kw, (n, 3), dtype=dtype))
    return q, omega


def fixed_random_state(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A random (q, ω) ∈ T(S²)ⁿ as `random_state` draws it, but from numpy's generator with a
    fixed `seed`: for probes made before compiling (the plan's), where `jax.random` would trace
    and compile a random-number generator (~0.1–0.6 s in a new process) for a few numbers."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n, 3))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    omega = rng.normal(size=(n, 3))
    return q, omega - np.sum(q * omega, axis=-1, keepdims=True) * q


def retract_state(
    q: Float[Array, "n 3"],
    omega: Float[Array, "n 3"],
    delta_q: Float[Array, "n 3"],
    delta_omega: Float[Array, "n 3"],
) -> tuple[Float[Array, "n 3"], Float[Array, "n 3"]]:
    """A point of T(S²)ⁿ near (q, ω), moved by tangent increments (δq, δω).

    q_i ↦ F_i q_i with F_i = cay(½ q_i × δq_i), so d(F_i q_i) = P_i δq_i at δq = 0; ω_i ↦ F_i ω_i
    + P_{F_i q_i} δω_i, which stays tangent at the new q_i. For any δq, δω the result lies exactly
    on T(S²)ⁿ, so the derivative of a loss with respect to (δq, δω) at zero is its gradient
    with respect to the initial state along T(S²)ⁿ (the normal components of δq, δω do not act).
    """
    f = 0.5 * jnp.cross(q, delta_q)
    q_new = cayley_rotate(f, q)
    omega_new = cayley_rotate(f, omega) + project_tangent(q_new, delta_omega)
    return q_new, omega_new
