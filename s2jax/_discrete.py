"""The discrete Euler–Lagrange equations of the trapezoidal discrete Lagrangian, by autodiff.

For any L(q, q̇) on (S²)ⁿ, L_d(q_k, q_{k+1}) = h/2 [L(q_k, Δ/h) + L(q_{k+1}, Δ/h)], Δ = q_{k+1} − q_k,
which is (3.1) of Lee–Leok–McClamroch 2009 when L has the form (2.2). Solving the discrete Legendre
map (§3.2) p_k = −P_k D₁L_d(q_k, q_{k+1}) for q_{k+1} = cay(f) q_k and evaluating
p_{k+1} = P_{k+1} D₂L_d(q_k, q_{k+1}) is one step of the variational integrator in position–momentum
form, for any L. `VariationalIntegrator` is the fast, structured special case of this map for (2.2);
the two agree to round-off. Derivation: docs/integrators/general.md.
"""

import jax

from ._custom_types import Array, Float, Lagrangian, Params
from ._geometry import cayley_rotate, dot, project_tangent
from ._newton import newton_root


def trapezoidal_discrete_lagrangian(
    lagrangian: Lagrangian,
    q: Float[Array, "n 3"],
    q_next: Float[Array, "n 3"],
    params: Params,
    dt: Float[Array, ""],
) -> Float[Array, ""]:
    """L_d(q_k, q_{k+1}) = h/2 [L(q_k, Δ/h) + L(q_{k+1}, Δ/h)], equal to (3.1) for (2.2)."""
    velocity = (q_next - q) / dt
    return 0.5 * dt * (lagrangian(q, velocity, params) + lagrangian(q_next, velocity, params))


def discrete_legendre_step(
    lagrangian: Lagrangian,
    q: Float[Array, "n 3"],
    p: Float[Array, "n 3"],
    params: Params,
    dt: Float[Array, ""],
    *,
    rtol: float = 1e-12,
    atol: float = 1e-12,
    max_steps: int = 20,
):
    """One step (q_k, p_k) ↦ (q_{k+1}, p_{k+1}) of the discrete Euler–Lagrange equations.

    Solves p_k = −P_k D₁L_d(q_k, cay(f) q_k) for f by Newton's method. The normal component
    of f does not move q, so the equation for it, f_i·q_i = 0, is added along q_i.
    p_k is the conjugate momentum of (2.12) (`LagrangianSystem.momentum`).

    **Returns:** `(q_next, p_next, converged)`.
    """

    def d1(q_next):
        return jax.grad(trapezoidal_discrete_lagrangian, argnums=1)(lagrangian, q, q_next, params, dt)

    def residual(f):
        q_next = cayley_rotate(f, q)
        return project_tangent(q, -d1(q_next)) - p + dot(f, q)[:, None] * q

    f, _, converged = newton_root(
        residual, jax.numpy.zeros_like(q), rtol=rtol, atol=atol, max_steps=max_steps
    )
    q_next = cayley_rotate(f, q)
    d2 = jax.grad(trapezoidal_discrete_lagrangian, argnums=2)(lagrangian, q, q_next, params, dt)
    return q_next, project_tangent(q_next, d2), converged
