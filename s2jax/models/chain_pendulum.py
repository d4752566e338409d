"""The chain pendulum of Lee–Leok–McClamroch 2015 (001), §V, without the forces τ and d.

n links on spherical joints from a fixed pivot; the mass m_i of link i at its outboard end, l_i its
length, q_i from the (i − 1)-th joint to the i-th mass, so x_i = Σ_{j≤i} l_j q_j. The kinetic energy
(38) is T = ½ Σ_ij M_ij q̇_i·q̇_j with M_ij = (Σ_{k ≥ max(i, j)} m_k) l_i l_j (as in 002 (2.2)), the
potential (39) V(q) = −Σ_i (Σ_{k ≥ i} m_k) g l_i e₃·q_i, with e₃ the direction of gravity (*down*, as
in 002 and every s2jax model). n = 1 is `spherical_pendulum`, n = 2 is 002 Example 1
(`double_spherical_pendulum`). The base torque τ and tip force d of (40) are generalized forces, not
part of L: `base_torque_and_tip_force` builds them for `simulate(force=...)`. 001's notation and
sign convention: docs/api/models.md.
"""

import jax.numpy as jnp
import numpy as np

from .._system import LagrangianSystem
from .._validation import positive_parameters
from ..forces import PivotTorque, PointForce


def _mass_beyond(masses):
    """Σ_{k ≥ i} m_k, the mass carried by joint i."""
    return jnp.cumsum(masses[::-1])[::-1]


def inertia_matrix(params):
    """M_ij = (Σ_{k ≥ max(i, j)} m_k) l_i l_j.

    Σ_{k ≥ i} m_k decreases with i, so its value at max(i, j) is the smaller of the two.
    """
    carried = _mass_beyond(params["masses"])
    lengths = params["lengths"]
    return jnp.minimum(carried[:, None], carried[None, :]) * jnp.outer(lengths, lengths)


def potential(q, params):
    """(39) with e₃ the direction of gravity: V = −g Σ_i (Σ_{k ≥ i} m_k) l_i q_i·e₃."""
    carried = _mass_beyond(params["masses"])
    return -params["g"] * jnp.sum(carried * params["lengths"] * q[:, 2])


@positive_parameters("masses", "lengths")
def lagrangian(q, qdot, params):
    """L = ½ Σ_ij M_ij q̇_i·q̇_j − V(q)."""
    n = params["masses"].shape[0]
    if q.shape != (n, 3):
        raise ValueError(
            f"this chain pendulum has {n} links: q must have shape ({n}, 3), got {q.shape}"
        )
    kinetic = 0.5 * jnp.einsum("ij,ia,ja->", inertia_matrix(params), qdot, qdot)
    return kinetic - potential(q, params)


def system(force=None):
    """The `LagrangianSystem` of `lagrangian` with `force`, declaring M a chain's (M_ij =
    c_{max(i,j)} l_i l_j, `inertia_matrix`) for every params, so a run with traced params does
    not probe it (`LagrangianSystem.inertia_structure`)."""
    return LagrangianSystem(lagrangian, force, inertia_structure="chain")


def paper_params(n=3):
    """m_i = 1 kg, l_i = 9.81 m, g = 9.81 m/s² for all n links.

    001 §V prints no numbers; these are the values of 002 Example 1, so that n = 2 is that
    example.
    """
    return {"masses": np.ones(n), "lengths": np.full(n, 9.81), "g": 9.81}


def paper_state(n=3):
    """Our initial state: 002 Example 1's, extended to n links.

    The first link starts as Example 1's first link, q₁ = (√3/2, 0, ½) (60° from the downward
    vertical e₃), ω₁ the printed (−0.4330, 0, 0.75) projected onto T_{q₁} S²; the last link
    (n ≥ 2) as Example 1's second link, q_n = e₃, ω_n = (0, 1, 0) rad/s; links in between hang
    at rest, q_i = e₃, ω_i = 0. For n = 2 this is `double_spherical_pendulum.paper_state()`.

    **Returns:** `(q0, omega0)`, numpy arrays of shape (n, 3).
    """
    if n < 1:
        raise ValueError(f"a chain pendulum has at least one link; got n = {n}")
    q0 = np.tile([0.0, 0.0, 1.0], (n, 1))
    omega0 = np.zeros((n, 3))
    q0[0] = [np.sqrt(3.0) / 2.0, 0.0, 0.5]
    printed = np.array([-0.4330, 0.0, 0.75])
    omega0[0] = printed - np.dot(q0[0], printed) * q0[0]
    if n >= 2:
        omega0[-1] = [0.0, 1.0, 0.0]
    return q0, omega0


def base_torque_and_tip_force(params, disturbance):
    """001 §V's forces: a control torque τ = u at the pivot and a known force d at the tip.

    As generalized forces of 001 (10) (conjugate to δq_i) they are

        f₁ = τ × q₁ + l₁ d,    f_j = l_j d  (j ≥ 2).

    **001 prints f₁ = τ + l₁ S(q₁) d, f_j = l_j S(q_j) d**: those are the moments of the same
    loads (their virtual work written in the angular variations γ_i, δq_i = γ_i × q_i), not the
    generalized forces that (11), (17), (19) and (40) take; inserted as printed they rotate the
    torque by 90° about q₁ (`tests/test_control_forces.py` checks ours against a Cartesian
    simulation of the same chain, written independently).

    **Arguments:** `params` (for the lengths l) and `disturbance`, d ∈ ℝ³ in newtons.

    **Returns:** an `s2jax.AbstractForce`; the control u of each step is τ (3,), in N·m.
    """
    return PivotTorque(0) + PointForce(len(params["lengths"]) - 1, params["lengths"], force=jnp.asarray(disturbance))
