"""Where `CheckpointedAdjoint` overtakes `DirectAdjoint`: the run length of `s2.default_adjoint`.

    python benchmarks/adjoint_crossover.py [--quick]

`jax.jit(jax.grad(loss))` of a final-state loss through N steps, for N from 30 to 4000, with
each of the two adjoints, on three systems: the double pendulum (VI, h = 0.01, from the regular
motion of `gradients.py`), a 4-link chain pendulum (VI, O(n) chain path, h = 0.01) and the
double pendulum through VI-8KL (h = 0.25, 17 sub-steps a step). float64, CPU, one process,
medians of 9 runs interleaved round-robin over all (system, N, adjoint), the whole call timed
(so short runs include the fixed cost of a call, the same for both adjoints).

Results go to benchmarks/results/adjoint_crossover.json (the ratio checkpointed / direct per
system and N); `--quick` takes N = 30 and 100 only and writes to a temporary folder.
"""

import argparse

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
from _common import interleaved_medians, jit, write  # noqa: E402
from gradients import OMEGA0, PARAMS, Q0  # noqa: E402

import s2jax as s2  # noqa: E402

REPEATS = 9
ADJOINTS = {"direct": s2.DirectAdjoint(), "checkpointed": s2.CheckpointedAdjoint()}


def _systems():
    """name: (lagrangian or system, q0, ω0, params, integrator, h)."""
    dsp, cp = s2.models.double_spherical_pendulum, s2.models.chain_pendulum
    chain_params = {k: jnp.asarray(v) for k, v in cp.paper_params(4).items()}
    chain_q0, chain_omega0 = (jnp.asarray(v) for v in cp.paper_state(4))
    kahan_li = s2.Composition(s2.VariationalIntegrator(), order=8, method="kahan_li")
    return {
        "double_pendulum": (dsp.lagrangian, Q0, OMEGA0, PARAMS, None, 0.01),
        "chain_4": (s2.LagrangianSystem(cp.lagrangian, inertia_structure="chain"), chain_q0, 0.3 * chain_omega0,
                    chain_params, None, 0.01),
        "VI-8KL": (dsp.lagrangian, Q0, OMEGA0, PARAMS, kahan_li, 0.25),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 30 and 100 only, to check that it runs")
    quick = parser.parse_args().quick
    lengths = (30, 100) if quick else (30, 100, 300, 1000, 2000, 4000)
    runs = {}
    for name, (system, q0, omega0, params, integrator, h) in _systems().items():
        for num_steps in lengths:
            for label, adjoint in ADJOINTS.items():
                def loss(params, system=system, q0=q0, omega0=omega0, integrator=integrator, h=h,
                         num_steps=num_steps, adjoint=adjoint):
                    sol = s2.simulate(system, q0, omega0, params, dt=h, num_steps=num_steps, save_every=num_steps,
                                      integrator=integrator, adjoint=adjoint)
                    return jnp.sum(sol.q[-1] * jnp.arange(1.0, 4.0)[None]) + jnp.sum(sol.omega[-1])

                gradient = jit(jax.grad(loss))
                runs[(name, num_steps, label)] = lambda g=gradient, p=params: g(p)
    timed = interleaved_medians(runs, repeats=REPEATS)
    results = {}
    for name in _systems():
        results[name] = {}
        for num_steps in lengths:
            direct, checkpointed = (timed[(name, num_steps, label)][0] for label in ADJOINTS)
            results[name][str(num_steps)] = {
                "direct_s": direct, "checkpointed_s": checkpointed, "checkpointed_over_direct": checkpointed / direct,
            }
            print(f"{name:16s} N = {num_steps:5d}: direct {direct * 1e3:.3f} ms, checkpointed "
                  f"{checkpointed * 1e3:.3f} ms, ratio {checkpointed / direct:.2f}")
    path = write("adjoint_crossover", {"method": f"medians of {REPEATS} interleaved runs", "results": results},
                 quick=quick)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
