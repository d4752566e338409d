"""Molecular dynamics on the sphere: Lee–Leok–McClamroch 2009 (002), Example 6.

n molecules of mass m_i on the unit sphere, M_ij = m_i δ_ij, under the Lennard-Jones
potential of the chord distances |q_i − q_j|,

    V(q) = ½ Σ_{i≠j} 4ε [(σ/|q_i − q_j|)¹² − (σ/|q_i − q_j|)⁶],

whose equations of motion are (3.27); M is diagonal, so the explicit integrator (3.17)–(3.18)
applies. 002 takes n = 642 molecules, ε = 0.01 and m_i = 1, and leaves σ and its initial
velocities to the reader: our choices are in `paper_params` and `paper_state` (docs/api/models.md).
"""

import jax
import jax.numpy as jnp
import numpy as np

from .._system import LagrangianSystem
from .._validation import positive_parameters

_GOLDEN = (1.0 + np.sqrt(5.0)) / 2.0
_ICOSAHEDRON_VERTICES = np.array(
    [
        [-1.0, _GOLDEN, 0.0],
        [1.0, _GOLDEN, 0.0],
        [-1.0, -_GOLDEN, 0.0],
        [1.0, -_GOLDEN, 0.0],
        [0.0, -1.0, _GOLDEN],
        [0.0, 1.0, _GOLDEN],
        [0.0, -1.0, -_GOLDEN],
        [0.0, 1.0, -_GOLDEN],
        [_GOLDEN, 0.0, -1.0],
        [_GOLDEN, 0.0, 1.0],
        [-_GOLDEN, 0.0, -1.0],
        [-_GOLDEN, 0.0, 1.0],
    ]
)
# Counter-clockwise seen from outside, so every face normal points outwards.
_ICOSAHEDRON_FACES = np.array(
    [
        [0, 11, 5], [0, 5, 1], [0, 1, 7], [0, 7, 10], [0, 10, 11],
        [1, 5, 9], [5, 11, 4], [11, 10, 2], [10, 7, 6], [7, 1, 8],
        [3, 9, 4], [3, 4, 2], [3, 2, 6], [3, 6, 8], [3, 8, 9],
        [4, 9, 5], [2, 4, 11], [6, 2, 10], [8, 6, 7], [9, 8, 1],
    ]
)  # fmt: skip


def _normalise(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def icosphere(subdivisions):
    """The geodesic sphere: an icosahedron whose faces are split in four, `subdivisions` times.

    Each subdivision puts a vertex at the midpoint of every edge, pushed out to the unit
    sphere, and replaces each face by four. The result has 10·4ᵏ + 2 vertices and 20·4ᵏ faces
    (642 and 1280 for k = 3; 2562 and 5120 for k = 4), faces oriented outwards.

    **Arguments:** `subdivisions`: k ≥ 0.

    **Returns:** `(vertices, faces)`, numpy arrays of shapes (V, 3), unit rows, and (F, 3) of
    vertex indices.
    """
    if subdivisions < 0:
        raise ValueError(f"subdivisions must be ≥ 0; got {subdivisions}")
    vertices = _normalise(_ICOSAHEDRON_VERTICES)
    faces = _ICOSAHEDRON_FACES
    for _ in range(subdivisions):
        num_faces = faces.shape[0]
        edges = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
        unique, inverse = np.unique(np.sort(edges, axis=1), axis=0, return_inverse=True)
        midpoint = (inverse.reshape(3, num_faces) + vertices.shape[0]).T  # edges 01, 12, 20
        vertices = np.concatenate(
            [vertices, _normalise(vertices[unique[:, 0]] + vertices[unique[:, 1]])]
        )
        a, b, c = faces.T
        ab, bc, ca = midpoint.T
        faces = np.concatenate(
            [
                np.stack(corner, axis=-1)
                for corner in ((a, ab, ca), (b, bc, ab), (c, ca, bc), (ab, bc, ca))
            ]
        )
    return vertices, faces


def mean_nearest_neighbour_distance(q):
    """The mean over i of min_{j≠i} |q_i − q_j| (numpy)."""
    q = np.asarray(q)
    distance = np.linalg.norm(q[:, None, :] - q[None, :, :], axis=-1)
    np.fill_diagonal(distance, np.inf)
    return float(np.mean(np.min(distance, axis=1)))


def inertia_matrix(params):
    """M = diag(m_1, …, m_n)."""
    return jnp.diag(params["masses"])


def _pair_quantities(q, params):
    """The mask of i ≠ j, the coordinate differences (q_ik − q_jk for k = x, y, z, three (n, n)
    arrays), 1/d_ij² (1 on the diagonal) and a_ij = (σ²/d_ij²)³ (`potential`).

    The reciprocal is taken once and serves both a_ij and p′(d_ij²) in `_potential_jvp`: a
    division costs several multiplications, and there are n² of them (measured with the
    differences in place of the Gram matrix, `potential`: see docs/performance.md)."""
    n = q.shape[0]
    off_diagonal = ~np.eye(n, dtype=bool)
    differences = tuple(q[:, None, k] - q[None, :, k] for k in range(3))
    distance2 = sum(difference * difference for difference in differences)
    inverse_distance2 = 1.0 / jnp.where(off_diagonal, distance2, 1.0)
    attraction = (params["sigma"] ** 2 * inverse_distance2) ** 3
    return off_diagonal, differences, inverse_distance2, attraction


def _pair_sum(off_diagonal, attraction):
    """Σ_{i≠j} (a_ij² − a_ij), the sum V/(2ε)."""
    return jnp.sum(jnp.where(off_diagonal, attraction**2 - attraction, 0.0))


@jax.custom_jvp
def potential(q, params):
    """V(q) = 2ε Σ_{i≠j} [(σ²/d_ij²)⁶ − (σ²/d_ij²)³], d_ij = |q_i − q_j|, as (n, n) arrays.

    Only d_ij² enters, so there is no square root. It is summed from three (n, n) arrays of
    coordinate differences, which XLA fuses into one pass over the pairs (an (n, n, 3) array of
    differences, reduced over its last axis, was slower: measured, see docs/performance.md).
    Not from the Gram matrix,
    d_ij² = |q_i|² + |q_j|² − 2 q_i·q_j: its cancellation left relative errors of 1e-13 in the
    forces of a perturbed icosphere of 642 molecules, against 1e-15 from the differences
    (both against long-double arithmetic). The diagonal d_ii = 0 would divide
    by zero; it is replaced by 1 *before* the division and masked out after it, so that neither
    the value nor the derivatives see it.

    Its derivatives are written in closed form (a `jax.custom_jvp`, `_potential_jvp`): with
    a = (σ²/d²)³ and p(d²) = a² − a, ∂V/∂q_i = 8ε Σ_j p′(d_ij²) (q_i − q_j),
    p′(s) = (3a − 6a²)/s, one more pass over the pairs (faster than reverse mode through the
    formula: measured, see docs/performance.md); and ∂V/∂ε = V/ε,
    ∂V/∂σ = 2ε Σ_{i≠j} (12a² − 6a)/σ. `tests/test_models.py` checks them against reverse mode
    through an independent writing of V.
    """
    off_diagonal, _, _, attraction = _pair_quantities(q, params)
    return 2.0 * params["epsilon"] * _pair_sum(off_diagonal, attraction)


@potential.defjvp
def _potential_jvp(primals, tangents):
    q, params = primals
    dq, dparams = tangents
    off_diagonal, differences, inverse_distance2, attraction = _pair_quantities(q, params)
    epsilon, sigma = params["epsilon"], params["sigma"]
    pair_sum = _pair_sum(off_diagonal, attraction)
    slope = jnp.where(off_diagonal, (3.0 * attraction - 6.0 * attraction**2) * inverse_distance2, 0.0)
    gradient = 8.0 * epsilon * jnp.stack([jnp.sum(slope * difference, axis=1) for difference in differences], axis=-1)
    by_sigma = 2.0 * epsilon * jnp.sum(jnp.where(off_diagonal, 12.0 * attraction**2 - 6.0 * attraction, 0.0)) / sigma
    value = 2.0 * epsilon * pair_sum
    tangent = jnp.sum(gradient * dq) + 2.0 * pair_sum * dparams["epsilon"] + by_sigma * dparams["sigma"]
    return value, tangent


@positive_parameters("masses", "epsilon", "sigma")
def lagrangian(q, qdot, params):
    """L = ½ Σ_i m_i |q̇_i|² − V(q)."""
    n = params["masses"].shape[0]
    if q.shape != (n, 3):
        raise ValueError(
            f"this system has {n} molecules: q must have shape ({n}, 3), got {q.shape}"
        )
    kinetic = 0.5 * jnp.sum(params["masses"] * jnp.sum(qdot**2, axis=-1))
    return kinetic - potential(q, params)


def system(force=None):
    """The `LagrangianSystem` of `lagrangian` with `force`, declaring M diagonal for every
    params, so a run with traced params does not probe it (`LagrangianSystem.inertia_structure`)."""
    return LagrangianSystem(lagrangian, force, inertia_structure="diagonal")


def paper_params(subdivisions=3):
    """Example 6: the molecules of `icosphere(subdivisions)` (642 for 3), m_i = 1, ε = 0.01.

    σ (not printed in 002) is chosen so that the Lennard-Jones force vanishes at the mean
    nearest-neighbour chord distance d̄ of the initial configuration: σ = d̄ / 2^{1/6}
    (d̄ ≈ 0.1412 and σ ≈ 0.1258 for 642 molecules). The icosphere's edges are not all equal,
    so the forces between neighbours are small, not zero.
    """
    vertices, _ = icosphere(subdivisions)
    return {
        "masses": np.ones(vertices.shape[0]),
        "epsilon": 0.01,
        "sigma": mean_nearest_neighbour_distance(vertices) / 2.0 ** (1.0 / 6.0),
    }


def paper_state(subdivisions=3, angular_speed=0.1):
    """Our initial state for Example 6: two co-rotating vortices 30° apart.

    q_i are the vertices of `icosphere(subdivisions)`. The vortex axes are
    a₁ = (sin 15°, 0, cos 15°) and a₂ = (−sin 15°, 0, cos 15°), 30° apart about e₃. Each
    molecule turns rigidly, at `angular_speed` Ω (rad/s, default 0.1), about the axis nearer to
    it: a₁ for x ≥ 0, a₂ for x < 0 (ties on x = 0 go to a₁). So q̇_i = Ω a × q_i, and
    ω_i = Ω (a − (a·q_i) q_i) is its tangent angular velocity. The fastest molecules move at
    Ω = 0.1 = √(ε/m), the velocity unit of the potential.

    **Returns:** `(q0, omega0)`, numpy arrays of shape (n, 3).
    """
    q0, _ = icosphere(subdivisions)
    half = np.deg2rad(15.0)
    axes = np.array([[np.sin(half), 0.0, np.cos(half)], [-np.sin(half), 0.0, np.cos(half)]])
    axis = np.where(q0[:, :1] >= 0.0, axes[0], axes[1])
    omega0 = angular_speed * (axis - np.sum(axis * q0, axis=-1, keepdims=True) * q0)
    return q0, omega0
