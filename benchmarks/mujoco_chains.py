"""Chains of n ball-jointed links, s2jax beside MuJoCo: µs per step (issue 32, item 1).

    python benchmarks/mujoco_chains.py [--sizes 8,16,32,64,128] [--repeats 7] [--quick]

The chain pendulum of `s2.models.chain_pendulum` (m_i = 1 kg point masses on massless links of
l_i = 1 m, g = 9.81 m/s²), n links, from a random state (seed 0, ω scaled by 0.3), h = 10⁻³,
saving the last step only:

- s2jax's `simulate` of `chain_pendulum.lagrangian`: the plan finds the chain, so the VI solves
  (3.13) and (3.16) in O(n) (`VariationalIntegrator`), and `Rattle` and `RungeKutta4` run beside it;
- the same Lagrangian declared dense (`s2.LagrangianSystem(..., inertia_structure="dense")`): the
  path any coupled M without a chain's structure takes, M⁻¹ once per run and an n × n Cholesky
  per solve (`VariationalIntegrator` and `RungeKutta4`);
- MuJoCo: the same chain in MJCF (a ball joint per link, a 1 kg sphere of radius 1 cm at its end,
  contacts off), stepped by `mujoco.rollout` (MuJoCo's own C loop, one thread, no Python per step)
  with its default semi-implicit Euler and with its RK4. MuJoCo's joint-space M of a chain is
  dense (3n × 3n), factored each step.

µs per step are marginal, (t(2N) − t(N))/N, medians of `--repeats` interleaved runs. The methods
differ in order and in what they conserve (docs/performance.md); this compares cost per step.
Results: benchmarks/results/mujoco_chains.json with the machine, the load and MuJoCo's version.
"""

import argparse
import os
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from _common import interleaved_medians, write  # noqa: E402

import s2jax as s2  # noqa: E402

chain = s2.models.chain_pendulum
DT = 1e-3
LENGTH = 1.0

_LINK = """<body pos="0 0 -{offset}">
  <joint type="ball" damping="0"/>
  <geom type="sphere" pos="0 0 -{length}" size="0.01" mass="1" contype="0" conaffinity="0"/>
  {child}
</body>"""
_MODEL = """<mujoco>
  <option timestep="{dt}" gravity="0 0 -9.81" integrator="{integrator}">
    <flag contact="disable"/>
  </option>
  <worldbody>{links}</worldbody>
</mujoco>"""


def mujoco_chain(n: int, integrator: str):
    import mujoco

    links = ""
    for i in reversed(range(n)):
        links = _LINK.format(offset=0.0 if i == 0 else LENGTH, length=LENGTH, child=links)
    model = mujoco.MjModel.from_xml_string(_MODEL.format(dt=DT, integrator=integrator, links=links))
    data = mujoco.MjData(model)
    data.qvel[:] = 0.3 * np.random.default_rng(0).normal(size=model.nv)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    state = np.empty(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, data, state, spec)
    return model, data, state


def s2jax_contenders(n: int, steps: int) -> dict:
    params = dict(chain.paper_params(n), lengths=np.full(n, LENGTH))
    q0, omega0 = s2.random_state(jax.random.PRNGKey(0), n)
    omega0 = 0.3 * omega0
    dense = s2.LagrangianSystem(chain.lagrangian, inertia_structure="dense")
    runs = {
        "s2jax VI (chain)": (chain.lagrangian, s2.VariationalIntegrator()),
        "s2jax Rattle (chain)": (chain.lagrangian, s2.Rattle()),
        "s2jax RungeKutta4 (chain)": (chain.lagrangian, s2.RungeKutta4()),
        "s2jax VI (declared dense)": (dense, s2.VariationalIntegrator()),
        "s2jax RungeKutta4 (declared dense)": (dense, s2.RungeKutta4()),
    }
    calls = {}
    for name, (model, integrator) in runs.items():
        for k in (steps, 2 * steps):
            calls[name, k] = lambda model=model, integrator=integrator, k=k: s2.simulate(
                model, q0, omega0, params, dt=DT, num_steps=k, save_every=k, integrator=integrator
            ).q
    return calls


def mujoco_contenders(n: int, steps: int) -> dict:
    try:
        import mujoco  # noqa: F401
        from mujoco import rollout
    except ImportError:
        return {}
    calls = {}
    for label, integrator in (("Euler", "Euler"), ("RK4", "RK4")):
        model, data, state = mujoco_chain(n, integrator)
        for k in (steps, 2 * steps):
            calls[f"MuJoCo {label}", k] = lambda model=model, data=data, state=state, k=k: rollout.rollout(
                model, data, state, nstep=k
            )
    return calls


def measure(n: int, repeats: int) -> dict:
    steps = max(200, 12800 // n)
    calls = {**s2jax_contenders(n, steps), **mujoco_contenders(n, steps)}
    first = {}
    for (name, k), call in calls.items():
        if k == steps:
            start = time.perf_counter()
            jax.block_until_ready(call())
            first[name] = time.perf_counter() - start
    timed = interleaved_medians(calls, repeats=repeats)
    names = sorted({name for name, _ in calls}, key=list(first).index)
    marginal = {name: 1e6 * (timed[name, 2 * steps][0] - timed[name, steps][0]) / steps for name in names}
    return {"n": n, "steps": [steps, 2 * steps], "us_per_step": marginal, "first_call_s": first}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,16,32,64,128")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="n = 8, 2 repeats: checks that it runs")
    args = parser.parse_args()
    sizes = [8] if args.quick else [int(s) for s in args.sizes.split(",")]
    repeats = 2 if args.quick else args.repeats
    load_before = os.getloadavg()
    rows = []
    for n in sizes:
        row = measure(n, repeats)
        rows.append(row)
        print(f"n = {n:3d}: " + ", ".join(f"{name} {us:.1f}" for name, us in row["us_per_step"].items()), flush=True)
    try:
        import mujoco

        version = mujoco.__version__
    except ImportError:
        version = None
    path = write(
        "mujoco_chains",
        {
            "command": f"python benchmarks/mujoco_chains.py --sizes {','.join(map(str, sizes))} --repeats {repeats}",
            "mujoco": version,
            "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
            "dt": DT,
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "rows": rows,
        },
        quick=args.quick,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
