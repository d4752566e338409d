"""002 Example 2: Heun's RK2 on the (q, ω) equations (2.9)–(2.11), as s2jax's `RungeKutta2`,
against Heun's RK2 on the (q, q̇) equations (3.21), as the paper states it compared.

    python benchmarks/example2_rk2_forms.py

The 3-body problem at h = 1e-3 and 1e-4, T = 10 s, energy errors over the states every 1e-3 s.
(3.21), m q̈_i = −m|q̇_i|² q_i − q_i × (q_i × F_i) with F = −∂V/∂q, is integrated in ℝ⁹ × ℝ⁹
by a hand-written Heun step here (s2jax has no (q, q̇) baseline). The explicit VI is the
reference. Prints the errors and their ratios to the VI's; writes nothing.
"""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402

import s2jax as s2  # noqa: E402
from s2jax.models import n_body_on_sphere as model  # noqa: E402

HORIZON, SAMPLE = 10.0, 1e-3


def heun_on_3_21(q0, qdot0, params, dt, num_steps, save_every):
    """Heun's method on (3.21) in the ambient coordinates (q, q̇); no projection."""
    system = s2.LagrangianSystem(model.lagrangian)
    args = system.prepare(q0, params)
    masses = params["masses"][:, None]

    def field(q, qdot):
        force = -system.potential_gradient(q, args)
        return qdot, -jnp.sum(qdot * qdot, -1, keepdims=True) * q - jnp.cross(
            q, jnp.cross(q, force)
        ) / masses

    def step(y, _):
        k1 = field(*y)
        y1 = (y[0] + dt * k1[0], y[1] + dt * k1[1])
        k2 = field(*y1)
        return (y[0] + 0.5 * dt * (k1[0] + k2[0]), y[1] + 0.5 * dt * (k1[1] + k2[1])), None

    def save(y, _):
        y, _ = jax.lax.scan(step, y, length=save_every)
        return y, y

    _, (q, qdot) = jax.jit(lambda y: jax.lax.scan(save, y, length=num_steps // save_every))(
        (q0, qdot0)
    )
    q = jnp.concatenate([q0[None], q])
    qdot = jnp.concatenate([qdot0[None], qdot])
    energy = jnp.sum(0.5 * params["masses"] * jnp.sum(qdot**2, -1), -1) + jax.vmap(
        lambda x: system.potential(x, args)
    )(q)
    return energy, s2.unit_length_error(q)


def main():
    q0, omega0 = (jnp.asarray(x) for x in model.paper_state())
    params = jax.tree_util.tree_map(jnp.asarray, model.paper_params())
    for dt in (1e-3, 1e-4):
        num_steps, save_every = round(HORIZON / dt), round(SAMPLE / dt)
        rows = {}
        for name, integrator in (
            ("VI", s2.ExplicitVariationalIntegrator()),
            ("RK2 on (2.9)–(2.11)", s2.RungeKutta2()),
        ):
            sol = s2.simulate(
                model.lagrangian,
                q0,
                omega0,
                params,
                dt=dt,
                num_steps=num_steps,
                integrator=integrator,
                save_every=save_every,
            )
            e = s2.energy(model.lagrangian, sol.q, sol.omega, params)
            rows[name] = (jnp.abs(e - e[0]), s2.unit_length_error(sol.q))
        e, unit = heun_on_3_21(q0, jnp.cross(omega0, q0), params, dt, num_steps, save_every)
        rows["RK2 on (3.21)"] = (jnp.abs(e - e[0]), unit)
        vi_mean, vi_max = float(jnp.mean(rows["VI"][0])), float(jnp.max(rows["VI"][0]))
        print(f"h = {dt:g}")
        for name, (error, unit) in rows.items():
            mean, peak = float(jnp.mean(error)), float(jnp.max(error))
            print(
                f"  {name:22s} mean |ΔE| {mean:.3e} ({mean / vi_mean:6.1f}× VI)   max |ΔE| "
                f"{peak:.3e} ({peak / vi_max:6.2f}× VI)   "
                f"mean unit-length {float(jnp.mean(unit)):.3e}"
            )


if __name__ == "__main__":
    main()
