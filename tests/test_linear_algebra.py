import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax._block_elimination import block_solve, dense_block_solve, inverse_3x3
from s2jax._geometry import gram


def test_inverse_3x3():
    a = jax.random.normal(jax.random.PRNGKey(0), (5, 3, 3))
    np.testing.assert_allclose(inverse_3x3(a) @ a, np.broadcast_to(np.eye(3), (5, 3, 3)), atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 5, 14])  # 14 takes the dense path
def test_block_solve_on_the_operator_of_2_11(n):
    key_q, key_m, key_b = jax.random.split(jax.random.PRNGKey(n), 3)
    q, _ = s2.random_state(key_q, n)
    root = jax.random.normal(key_m, (n, n))
    inertia = root @ root.T + n * jnp.eye(n)
    blocks = s2.Inertia.of(inertia, "dense").operator(q)
    rhs = jax.random.normal(key_b, (n, 3))
    dense = np.transpose(np.asarray(blocks), (0, 2, 1, 3)).reshape(3 * n, 3 * n)
    expected = np.linalg.solve(dense, np.ravel(rhs))  # NumPy's LAPACK on the matrix assembled by hand
    for solve in (block_solve, dense_block_solve):
        x = solve(blocks, rhs)
        np.testing.assert_allclose(x.reshape(-1), expected, rtol=1e-10, atol=1e-12, err_msg=solve.__name__)


@pytest.mark.parametrize("n", [9, 40])
def test_the_tangent_solve_of_many_bodies_is_the_operators_solve(n):
    """Past `MAX_UNROLLED_BODIES` a dense `Inertia` solves A(q) ω = b through M⁻¹ and one n × n
    Cholesky (`tangent_solve`): the 3n × 3n system's solution, for tangent right sides (those of
    (2.11) and (3.13)), against numpy's LU of the assembled operator."""
    key_q, key_m, key_b = jax.random.split(jax.random.PRNGKey(n), 3)
    q, _ = s2.random_state(key_q, n)
    root = jax.random.normal(key_m, (n, n))
    structured = s2.Inertia.of(root @ root.T + jnp.eye(n), "dense")
    assert structured.inverse is not None
    rhs = s2.project_tangent(q, jax.random.normal(key_b, (n, 3)))
    dense = np.transpose(np.asarray(structured.operator(q)), (0, 2, 1, 3)).reshape(3 * n, 3 * n)
    expected = np.linalg.solve(dense, np.ravel(rhs)).reshape(n, 3)
    np.testing.assert_allclose(structured.solve(q, rhs), expected, rtol=0, atol=1e-11 * np.max(np.abs(expected)))


def test_gram_is_the_matrix_of_inner_products():
    """`gram` (three outer products summed, the form XLA fuses before a Cholesky) against numpy's
    a bᵀ, for a non-square pair."""
    a = np.asarray(jax.random.normal(jax.random.PRNGKey(4), (7, 3)))
    b = np.asarray(jax.random.normal(jax.random.PRNGKey(5), (5, 3)))
    np.testing.assert_allclose(gram(a, b), a @ b.T, rtol=0, atol=1e-14)


def test_cayley_rotation_is_exact():
    q, _ = s2.random_state(jax.random.PRNGKey(2), 50)
    f = 3.0 * jax.random.normal(jax.random.PRNGKey(3), (50, 3))  # not tangent, not small
    rotated = s2.cayley_rotate(f, q)
    # Two ulps of 1 (2 × 2.2e-16): measured 2.2e-16 at XLA's default optimisation level, 4.4e-16
    # in one of 50 at conftest's level 0 (no fused multiply-adds).
    np.testing.assert_allclose(jnp.linalg.norm(rotated, axis=-1), 1.0, rtol=0, atol=2 * 2.3e-16)
    # Against the matrix form of 002 §3.3, F = (I + f̂)(I − f̂)⁻¹.
    eye = jnp.eye(3)[None]
    matrices = (eye + s2.hat(f)) @ jnp.linalg.inv(eye - s2.hat(f))
    np.testing.assert_allclose(rotated, jnp.einsum("nab,nb->na", matrices, q), atol=1e-13)
