"""The six examples of Lee–Leok–McClamroch 2009 (002), §3.5, run as the paper ran them.

`python -m s2jax reproduce [example …|all] [--out DIR]` runs each example (`EXAMPLES`),
prints a table of the figures of merit beside the paper's, draws its Fig. 3.1–3.6 (and 3.7 for
Example 6) and saves the trajectories as `.npz`. The steps are `run_example`,
`format_table`, `write_figures` and `write_trajectories`.
"""

import dataclasses
import pathlib
import time
from collections.abc import Callable
from types import ModuleType

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import s2jax as s2
from s2jax.models import (
    coupled_spherical_pendula,
    double_spherical_pendulum,
    elastic_rod,
    lennard_jones_on_sphere,
    magnetic_dipoles,
    n_body_on_sphere,
)

DEFINITIONS = """\
Figures of merit (002 does not define them), over the saved states k = 0 … K, ΔE_k = |E_k − E₀|:
  mean ΔE, absolute       mean over k of ΔE_k (the paper's unit, J = N·m);
  mean ΔE, relative       the same divided by |E₀|;
  max ΔE, absolute        the largest ΔE_k;
  mean unit-length error  mean over k of max_i ||q_i,k| − 1|.
The paper's energy figure, whose definition it does not give, stands beside each reading of it.
Wall time: one run after compiling (benchmarks/examples.py takes medians)."""

# (table label, key of `figures_of_merit`); no "|" in a label, so the tables are valid Markdown.
ROWS = (
    ("mean ΔE, absolute", "mean_energy_error"),
    ("mean ΔE, relative", "mean_relative_energy_error"),
    ("max ΔE, absolute", "max_energy_error"),
    ("mean unit-length error", "mean_unit_length_error"),
)


@dataclasses.dataclass(frozen=True)
class Run:
    """One trajectory of an example: `label` (in tables and figures), `key` (in the .npz),
    the integrator, its step `dt` (None for `AdaptiveRungeKutta45`: it is given the sampling
    grid), and whether it is a variational integrator."""

    label: str
    key: str
    integrator: object
    dt: float | None
    variational: bool
    style: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Example:
    """An example of 002 §3.5: the model, the runs, the horizon, the paper's figures.

    `sample` is the spacing of the saved states over which the figures of merit are taken;
    `paper` maps a run label to {figure-of-merit key: value printed in 002}.
    """

    number: int
    slug: str
    title: str
    model: ModuleType
    runs: tuple[Run, ...]
    horizon: float
    sample: float
    paper: dict
    settings: str
    long: bool = False  # show a progress bar


_VI = {"color": "tab:red", "linestyle": "-"}  # the paper's colours: VI red, solid,
_RK = {"color": "tab:blue", "linestyle": ":"}  # Runge–Kutta blue, dotted,
_PROJECTED = {"color": "black", "linestyle": "--"}  # RK2 with projection black, dashed
_EXPLICIT = s2.ExplicitVariationalIntegrator()


def _vi(dt, integrator=_EXPLICIT, label="VI", key="vi", **style):
    return Run(label, key, integrator, dt, True, {**_VI, **style})


def _baseline(integrator, dt=None, label="RK45", key="rk45", style=_RK, **more_style):
    return Run(label, key, integrator, dt, False, {**style, **more_style})


def _paper(energy, unit_length, *, energy_rows=("mean_energy_error", "mean_relative_energy_error")):
    """002's printed figures: its energy figure beside each of our readings of it."""
    return {**{row: energy for row in energy_rows}, "mean_unit_length_error": unit_length}


_EVERY_SECOND = {"markevery": 1000}  # Fig. 3.2 marks its curves: VI circles, RK2 squares

EXAMPLES = {
    1: Example(
        1, "double_pendulum", "double spherical pendulum", double_spherical_pendulum,
        runs=(
            _vi(0.01, s2.VariationalIntegrator()),
            _baseline(s2.AdaptiveRungeKutta45(rtol=3e-5, atol=3e-8)),
        ),
        horizon=100.0, sample=0.01,
        paper={"VI": _paper(2.1641e-5, 8.8893e-15), "RK45": _paper(7.8586e-4, 6.2742e-5)},
        settings=(
            "m = 1, l = 9.81, g = 9.81; implicit VI (3.10)–(3.13), h = 0.01, T = 100 s as in 002;\n"
            "exact initial state (the printed one is rounded). RK45: Dormand–Prince, max-norm\n"
            "error test, rtol = 3e-5, atol = 3e-8 (002 states none; this one matches its RK45\n"
            "unit-length error)."
        ),
    ),
    2: Example(
        2, "three_body", "3-body problem on the sphere", n_body_on_sphere,
        runs=(
            _vi(1e-3, label="VI, h = 1e-3", key="vi_h1e-3", marker="o", **_EVERY_SECOND),
            _baseline(s2.RungeKutta2(), 1e-3, "RK2, h = 1e-3", "rk2_h1e-3", marker="s",
                      **_EVERY_SECOND),
            _vi(1e-4, label="VI, h = 1e-4", key="vi_h1e-4", marker="o", linestyle="--",
                **_EVERY_SECOND),
            _baseline(s2.RungeKutta2(), 1e-4, "RK2, h = 1e-4", "rk2_h1e-4", marker="s",
                      linestyle="-.", **_EVERY_SECOND),
        ),
        horizon=10.0, sample=1e-3,
        paper={
            label: {"mean_energy_error": e, "max_energy_error": e}
            for label, e in (("VI, h = 1e-3", 1.1717e-4), ("VI, h = 1e-4", 1.1986e-6))
        },
        settings=(
            "m_i = 1, γ = 1; explicit VI (3.17)–(3.18) against Heun's RK2 on (2.9)–(2.11), both\n"
            "at h = 1e-3 and 1e-4, T = 10 s as in 002; states compared every 1e-3 s. 002 prints\n"
            "one 'total energy error' per step, not saying whether a mean or a maximum."
        ),
    ),
    3: Example(
        3, "coupled_pendula", "four spherical pendula joined by springs",
        coupled_spherical_pendula,
        runs=(
            _vi(5e-3),
            _baseline(s2.RungeKutta2(), 5e-3, "RK2", "rk2"),
            _baseline(s2.RungeKutta2WithReprojection(), 5e-3, "RK2 + projection", "rk2_projection",
                      _PROJECTED),
        ),
        horizon=10.0, sample=5e-3,
        paper={"VI": _paper(3.6171e-5, 4.2712e-15)},
        settings=(
            "m_i = 0.1, l_i = 0.1, κ = 10, 20, 30, 40 N/m. 002 states neither h nor T: we take\n"
            "T = 10 s and h = 5e-3 (the VI's energy error is O(h²); h = 5e-3 gives the paper's\n"
            "value to 2%, h = 1e-3 25× less). RK2: Heun; '+ projection' normalises q_i."
        ),
    ),
    4: Example(
        4, "elastic_rod", "elastic rod of 10 rigid elements", elastic_rod,
        runs=(
            _vi(1e-4, s2.VariationalIntegrator()),
            _baseline(s2.AdaptiveRungeKutta45(rtol=5e-4, atol=5e-7)),
        ),
        horizon=3.0, sample=1e-3,
        paper={"VI": _paper(1.4310e-6, 2.9747e-14), "RK45": _paper(3.5244e-4, 1.8725e-5)},
        settings=(
            "m = 55 g, l = 1.1 m, κ_i = 1000, inertia as printed; implicit VI (3.10)–(3.13),\n"
            "h = 1e-4, T = 3 s as in 002 (30 000 Newton steps); states compared every 1e-3 s.\n"
            "RK45 rtol = 5e-4, atol = 5e-7 (002 states none; this one matches its RK45\n"
            "unit-length error)."
        ),
        long=True,
    ),
    5: Example(
        5, "magnetic_dipoles", "4 × 4 array of magnetic dipoles", magnetic_dipoles,
        runs=(_vi(2.5e-4), _baseline(s2.AdaptiveRungeKutta45(rtol=3e-4, atol=3e-7))),
        horizon=10.0, sample=1e-3,
        paper={"VI": _paper(8.5403e-10, 1.6140e-14), "RK45": _paper(2.9989e-7, 1.7594e-4)},
        settings=(
            "m_i = 0.05, l_i = 0.02, ν_i = 0.1, grid spacing 1.2 l_i in the plane x₃ = 0. 002\n"
            "states neither h nor T: T = 10 s, h = 2.5e-4 (the VI's energy error is O(h²);\n"
            "h = 1e-3 gives 13× the paper's value, 2.5e-4 0.8×); states compared every 1e-3 s.\n"
            "RK45 rtol = 3e-4, atol = 3e-7 (002 states none; this one matches its RK45\n"
            "unit-length error)."
        ),
    ),
    6: Example(
        6, "lennard_jones", "642 Lennard-Jones molecules on the sphere",
        lennard_jones_on_sphere,
        runs=(_vi(5e-3),),
        horizon=5.0, sample=5e-3,
        paper={"VI": _paper(1.8893e-3, 5.2623e-15)},
        settings=(
            "m_i = 1, ε = 0.01; explicit VI, h = 0.005, T = 5 s as in 002, no baseline. σ and the\n"
            "two vortices are ours (002 leaves them open): σ puts the force minimum at the mean\n"
            "nearest-neighbour distance; the vortices turn at 0.1 rad/s about axes 30° apart."
        ),
        long=True,
    ),
}  # fmt: skip


@dataclasses.dataclass
class RunResult:
    """A run's saved states (numpy), their energies, figures of merit and timings."""

    run: Run
    dt: float
    num_steps: int
    save_every: int
    t: np.ndarray
    q: np.ndarray
    omega: np.ndarray
    energy: np.ndarray
    merits: dict
    compile_seconds: float
    wall_seconds: float


def _as_arrays(params):
    """Float and numpy leaves as jax arrays (traced), the others (ints, strings) left static."""

    def convert(leaf):
        if isinstance(leaf, (float, np.floating, np.ndarray)) and not isinstance(leaf, bool):
            return jnp.asarray(leaf)
        return leaf

    return jax.tree_util.tree_map(convert, params)


def compile_simulation(
    lagrangian: Callable,
    q0,
    omega0,
    params,
    *,
    dt,
    num_steps,
    integrator,
    save_every=1,
    progress=False,
):
    """`simulate` compiled ahead of time, so that compiling and running can be timed apart.

    The initial state is checked here (`simulate` skips its eager checks for traced input;
    the models' Lagrangians are checked by the test suite).

    **Returns:** `(run, compile_seconds)`; `run()` returns a `Solution`.
    """
    s2.check_initial_state(q0, omega0)
    options = dict(
        dt=dt, num_steps=num_steps, integrator=integrator, save_every=save_every, progress=progress
    )
    q0, omega0 = jnp.asarray(q0), jnp.asarray(omega0)
    dynamic, static = eqx.partition(_as_arrays(params), eqx.is_array)

    def solve(q0, omega0, dynamic):
        return s2.simulate(lagrangian, q0, omega0, eqx.combine(dynamic, static), **options)

    start = time.perf_counter()
    compiled = jax.jit(solve, compiler_options=s2.compiler_options() or None).lower(q0, omega0, dynamic).compile()
    compile_seconds = time.perf_counter() - start
    return (lambda: compiled(q0, omega0, dynamic)), compile_seconds


def step_grid(example: Example, run, horizon_scale: float = 1.0) -> tuple[float, int, int]:
    """`(dt, save_every, num_steps)` of one run: its step, saving every `example.sample` s."""
    num_saves = max(1, round(example.horizon * horizon_scale / example.sample))
    dt = example.sample if run.dt is None else run.dt
    save_every = max(1, round(example.sample / dt))
    return dt, save_every, num_saves * save_every


def run_example(example: Example, horizon_scale: float = 1.0) -> list[RunResult]:
    """Run every integrator of `example` over `horizon_scale` × its horizon; time and score it."""
    q0, omega0 = example.model.paper_state()
    params = example.model.paper_params()
    results = []
    for run in example.runs:
        dt, save_every, num_steps = step_grid(example, run, horizon_scale)
        go, compile_seconds = compile_simulation(
            example.model.lagrangian,
            q0,
            omega0,
            params,
            dt=dt,
            num_steps=num_steps,
            integrator=run.integrator,
            save_every=save_every,
            progress=example.long,
        )
        start = time.perf_counter()
        solution = jax.block_until_ready(go())
        wall_seconds = time.perf_counter() - start
        e = s2.energy(example.model.lagrangian, solution.q, solution.omega, params)
        merits = s2.figures_of_merit(
            example.model.lagrangian, solution.q, solution.omega, params, energies=e
        )
        results.append(
            RunResult(
                run,
                dt,
                num_steps,
                save_every,
                *(np.asarray(x) for x in (solution.t, solution.q, solution.omega, e)),
                merits,
                compile_seconds,
                wall_seconds,
            )
        )
    return results


def format_table(example: Example, results: list[RunResult]) -> str:
    """The figures of merit as a Markdown table: paper and s2jax side by side for every run."""
    header = ["figure of merit"]
    for r in results:
        if r.run.label in example.paper:
            header.append(f"paper {r.run.label}")
        header.append(f"s2jax {r.run.label}")
    lines = [header]

    def cell(x):
        return "" if x is None else f"{x:.4e}"

    for label, key in ROWS:
        row = [label]
        for r in results:
            if r.run.label in example.paper:
                row.append(cell(example.paper[r.run.label].get(key)))
            row.append(cell(r.merits[key]))
        lines.append(row)
    for label, attribute in (
        ("wall time [s]", "wall_seconds"),
        ("compile time [s]", "compile_seconds"),
    ):
        row = [label]
        for r in results:
            if r.run.label in example.paper:
                row.append("")
            row.append(f"{getattr(r, attribute):.3f}")
        lines.append(row)
    widths = [max(len(line[c]) for line in lines) for c in range(len(header))]
    text = ["| " + " | ".join(s.ljust(w) for s, w in zip(line, widths)) + " |" for line in lines]
    text.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(text)


def write_figures(
    example: Example, results: list[RunResult], out: pathlib.Path
) -> list[pathlib.Path]:
    """Fig. 3.<number> (energy and unit-length errors against t), and Fig. 3.7 for Example 6."""
    # matplotlib is imported only when figures are drawn.
    from s2jax.plot import kinetic_energy_on_faces, plot_energy_and_unit_length, plot_sphere_faces

    curves = {
        r.run.label: (r.t, np.abs(r.energy - r.energy[0]), np.asarray(s2.unit_length_error(r.q)))
        for r in results
    }
    styles = {r.run.label: r.run.style for r in results}
    path = out / f"{example.slug}_fig_3_{example.number}.png"
    title = (
        f"Lee–Leok–McClamroch 2009 (002), Fig. 3.{example.number}\n"
        f"Example {example.number}: {example.title}"
    )
    plot_energy_and_unit_length(curves, path, title, styles)
    paths = [path]
    if example.model is lennard_jones_on_sphere:
        vi = results[0]
        vertices, faces = lennard_jones_on_sphere.icosphere(4)
        index = np.unique(np.round(np.linspace(0, len(vi.t) - 1, 6)).astype(int))
        masses = np.asarray(example.model.paper_params()["masses"])
        values = [
            kinetic_energy_on_faces(vi.q[k], vi.omega[k], masses, vertices, faces) for k in index
        ]
        path = out / f"{example.slug}_fig_3_7.png"
        plot_sphere_faces(
            vertices,
            faces,
            values,
            vi.t[index],
            path,
            "Lee–Leok–McClamroch 2009 (002), Fig. 3.7 — Example 6: mean kinetic energy of\n"
            "the molecules in and around each face",
            "½ m|q̇|², mean over a face and its neighbours",
            missing="no molecule in or around the face",
        )
        paths.append(path)
    return paths


def write_trajectories(
    example: Example, results: list[RunResult], out: pathlib.Path
) -> pathlib.Path:
    """`<slug>.npz`: per run t, q, ω, energy, step, steps and integrator; the parameters
    (`params.<name>`), the horizon and the s2jax version."""
    arrays = {"example": np.array(example.number), "s2jax_version": np.array(s2.__version__)}
    for r in results:
        key = r.run.key
        arrays.update(
            {
                f"{key}.t": r.t,
                f"{key}.q": r.q,
                f"{key}.omega": r.omega,
                f"{key}.energy": r.energy,
                f"{key}.dt": np.array(r.dt),
                f"{key}.num_steps": np.array(r.num_steps),
                f"{key}.integrator": np.array(repr(r.run.integrator)),
                f"{key}.label": np.array(r.run.label),
            }
        )
        arrays["horizon"] = np.array(r.t[-1])
    for name, value in example.model.paper_params().items():
        arrays[f"params.{name}"] = np.asarray(value)
    path = out / f"{example.slug}.npz"
    with s2.io.atomic_write(path) as file:
        np.savez_compressed(file, **arrays)
    return path


def reproduce(numbers, out: pathlib.Path, horizon_scale: float = 1.0, echo: Callable = print):
    """Run, tabulate, plot and save the examples `numbers`; return {number: [RunResult]}."""
    out.mkdir(parents=True, exist_ok=True)
    echo(DEFINITIONS)
    if horizon_scale != 1.0:
        echo(f"\nHorizons scaled by {horizon_scale:g}: these are not the paper's settings.")
    everything = {}
    for number in numbers:
        example = EXAMPLES[number]
        echo(f"\n## 002 Example {number}: {example.title}\n")
        echo(example.settings + "\n")
        results = run_example(example, horizon_scale)
        echo(format_table(example, results))
        for path in [
            *write_figures(example, results, out),
            write_trajectories(example, results, out),
        ]:
            echo(f"wrote {path}")
        everything[number] = results
    return everything
