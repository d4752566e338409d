"""Two bodies, any M: (3.16) by Newton's method in tangent-plane coordinates (`s2jax._two_body`),
against an independent solve of (3.16) as printed, and its implicit-function derivative against
finite differences."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import s2jax as s2
from s2jax._integrators.variational import _rotation_of_tangent, _tangent_guess
from s2jax._two_body import tangent_basis, two_body_newton

NEWTON = {"rtol": 1e-12, "atol": 1e-12, "max_steps": 20, "unrolled": 2}


def test_tangent_basis_is_orthonormal_and_right_handed():
    """e_1, e_2 ⊥ q, orthonormal, e_1 × e_2 = q, to a few ulps: random q, the poles, the equator
    (where the construction switches branch) and q_z just above −1 (where −1/(σ + q_z) is
    largest for σ = +1 were the sign rule wrong)."""
    q, _ = s2.random_state(jax.random.PRNGKey(0), 64)
    special = jnp.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0], [0.6, -0.8, 0.0],
                         [1e-9, 0.0, -1.0], [0.0, 1e-9, 1.0]])
    q = jnp.concatenate([q, special / jnp.linalg.norm(special, axis=-1, keepdims=True)])
    e = tangent_basis(q)
    gram = jnp.einsum("nai,nbi->nab", e, e)
    np.testing.assert_allclose(gram, jnp.broadcast_to(jnp.eye(2), gram.shape), rtol=0, atol=4e-16)
    np.testing.assert_allclose(jnp.einsum("nai,ni->na", e, q), 0.0, rtol=0, atol=4e-16)
    np.testing.assert_allclose(jnp.cross(e[:, 0], e[:, 1]), q, rtol=0, atol=4e-16)


def _cayley_residual_numpy(f, q, d, inertia):
    """(3.16) as printed in 002, in numpy: 2 M_ii f_i/(1 + |f_i|²) + q_i × Σ_{j≠i} M_ij (F_j − I) q_j − d_i,
    with F = cay(f) = (I + f̂)(I − f̂)⁻¹ formed as a matrix."""
    def cay(v):
        hat = np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])
        return (np.eye(3) + hat) @ np.linalg.inv(np.eye(3) - hat)

    f = f.reshape(2, 3)
    moved = np.stack([cay(f[j]) @ q[j] - q[j] for j in range(2)])
    out = []
    for i in range(2):
        j = 1 - i
        out.append(2 * inertia[i, i] * f[i] / (1 + f[i] @ f[i]) + np.cross(q[i], inertia[i, j] * moved[j]) - d[i])
    return np.concatenate(out)


@pytest.mark.parametrize("seed", range(6))
def test_two_body_newton_solves_the_cayley_equation(seed):
    """For random positive-definite M (M₁₂ of either sign; M₁₂ = 0 at seed 0), unit q and a
    right side d ⊥ q of a large step's size (|t_i| from 0.02 to 0.25), the Cayley vector
    f = q × t/(1 + √(1 − |t|²)) of the root solves (3.16) as printed to round-off, and equals
    scipy's solution of it (MINPACK, from d/(2M_ii))."""
    key_m, key_q, key_d, key_g = jax.random.split(jax.random.PRNGKey(seed), 4)
    factor = jax.random.normal(key_m, (2, 2))
    inertia = factor @ factor.T + 0.2 * jnp.eye(2)
    if seed == 0:
        inertia = inertia * jnp.eye(2)
    q, _ = s2.random_state(key_q, 2)
    scale = float(jnp.min(jnp.diag(inertia)))
    d = s2.project_tangent(q, 0.1 * scale * jax.random.normal(key_d, (2, 3)))
    guess = s2.project_tangent(q, 0.02 * jax.random.normal(key_g, (2, 3))) + d / (2 * jnp.diag(inertia)[:, None])
    t, squared, converged = two_body_newton(q, -jnp.cross(q, d), _tangent_guess(q, guess), inertia, **NEWTON)
    f, q_next, solvable = _rotation_of_tangent(q, t, squared)
    assert bool(converged) and bool(solvable)
    np.testing.assert_allclose(jnp.linalg.norm(q_next, axis=-1), 1.0, rtol=0, atol=4e-16)
    args = (np.asarray(q), np.asarray(d), np.asarray(inertia))
    residual = _cayley_residual_numpy(np.asarray(f), *args)
    size = float(jnp.max(jnp.abs(inertia))) * (1 + float(jnp.max(jnp.abs(f))))
    assert np.max(np.abs(residual)) <= 10 * 2.2e-16 * size, residual
    start = (np.asarray(d) / (2 * np.diag(np.asarray(inertia)))[:, None]).reshape(-1)
    reference = scipy.optimize.root(_cayley_residual_numpy, start, args=args, method="hybr", tol=1e-15)
    # MINPACK stops at round-off ("xtol is too small" counts as a failure there): check its root.
    assert np.max(np.abs(_cayley_residual_numpy(reference.x, *args))) <= 10 * 2.2e-16 * size
    np.testing.assert_allclose(f.reshape(-1), reference.x, rtol=0, atol=1e-13 * (1 + np.max(np.abs(reference.x))))


@pytest.mark.slow
def test_two_body_newton_derivatives_match_finite_differences():
    """Forward and reverse mode through the root (implicit function theorem with the closed-form
    Jacobian) against central differences, in the coupling M₁₂, the direction of body 2 and the
    size of d."""
    key_q, key_d = jax.random.split(jax.random.PRNGKey(7))
    q0, _ = s2.random_state(key_q, 2)
    d0 = s2.project_tangent(q0, 0.4 * jax.random.normal(key_d, (2, 3)))
    weights = jnp.arange(1.0, 7.0).reshape(2, 3)

    def loss(s):
        inertia = jnp.array([[2.0, 0.7], [0.7, 1.0]]) + s * jnp.array([[0.0, 1.0], [1.0, 0.0]])
        q = s2.cayley_rotate(jnp.array([[0.0, 0.0, 0.0], [0.3, 0.0, 0.0]]) * s, q0)
        d = s2.project_tangent(q, (1.0 + s) * d0)
        t, _, _ = two_body_newton(q, -jnp.cross(q, d), jnp.zeros((2, 3)), inertia, **NEWTON)
        return jnp.sum(weights * t)

    s, eps = 0.1, 1e-4
    fd = (8 * (loss(s + eps) - loss(s - eps)) - (loss(s + 2 * eps) - loss(s - 2 * eps))) / (12 * eps)
    # Fourth-order stencil: truncation ~eps⁴ ~ 1e-16, round-off ~1e-16/eps ~ 1e-12.
    np.testing.assert_allclose(jax.grad(loss)(s), fd, rtol=1e-9)
    np.testing.assert_allclose(jax.jvp(loss, (s,), (1.0,))[1], jax.grad(loss)(s), rtol=1e-13)


def test_two_body_newton_under_jit_and_vmap():
    """The same root and derivatives under `jax.jit(jax.vmap(...))` as eagerly one by one, in
    reverse and forward mode (the step runs batched in `simulate_batch` and under `jax.grad`)."""
    q, _ = s2.random_state(jax.random.PRNGKey(11), 2)
    d = s2.project_tangent(q, 0.3 * jax.random.normal(jax.random.PRNGKey(12), (2, 3)))
    weights = jnp.arange(1.0, 7.0).reshape(2, 3)

    def loss(coupling):
        inertia = jnp.array([[2.0, 0.0], [0.0, 1.0]]) + coupling * jnp.array([[0.0, 1.0], [1.0, 0.0]])
        t, _, _ = two_body_newton(q, -jnp.cross(q, d), jnp.zeros((2, 3)), inertia, **NEWTON)
        return jnp.sum(weights * t)

    couplings = jnp.array([-0.6, 0.2, 0.9])
    values = jax.jit(jax.vmap(loss))(couplings)
    reverse = jax.jit(jax.vmap(jax.grad(loss)))(couplings)
    forward = jax.jit(jax.vmap(lambda c: jax.jvp(loss, (c,), (jnp.ones_like(c),))[1]))(couplings)
    for k, c in enumerate(couplings):
        # Batched and single runs compile differently (fused multiply-adds): a few ulps
        # (measured: 2.1e-15 for the values, 1.1e-16 for the gradients).
        np.testing.assert_allclose(values[k], loss(c), rtol=1e-14)
        np.testing.assert_allclose(reverse[k], jax.grad(loss)(c), rtol=1e-14)
    np.testing.assert_allclose(forward, reverse, rtol=1e-14)  # measured 4.6e-16
