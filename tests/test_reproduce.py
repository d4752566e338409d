"""`python -m s2jax reproduce`: end to end on shortened horizons, and the examples table."""

import errno
import math
import subprocess
import sys

import numpy as np
import pytest

import s2jax as s2
from s2jax.apps import cli, reproduce

# To keep the suite short, the end-to-end run covers Examples 1 (implicit VI, RK45), 3 (explicit
# VI, RK2, RK2 + projection) and 6 (Fig. 3.7): every integrator and figure kind. Examples 2, 4
# and 5 use the same ones (4 alone would add ~45 s of compiling: the implicit VI and RK45 on 10
# bodies); `test_examples_table_is_consistent` checks the settings of all six.
END_TO_END = (1, 3, 6)


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce")
    lines = []
    results = reproduce.reproduce(list(END_TO_END), out, horizon_scale=0.01, echo=lines.append)
    return out, "\n".join(lines), results


@pytest.mark.slow
def test_writes_figures_and_trajectories(reproduced):
    out, _, results = reproduced
    for number in results:
        example = reproduce.EXAMPLES[number]
        assert (out / f"{example.slug}_fig_3_{number}.png").stat().st_size > 0
        data = np.load(out / f"{example.slug}.npz")
        assert str(data["s2jax_version"]) == s2.__version__
        assert any(key.startswith("params.") for key in data.files)
        for run in example.runs:
            q = data[f"{run.key}.q"]
            assert q.shape[1:] == example.model.paper_state()[0].shape
            assert data[f"{run.key}.t"].shape == (q.shape[0],)
            assert float(data[f"{run.key}.dt"]) > 0
    assert (out / "lennard_jones_fig_3_7.png").stat().st_size > 0


@pytest.mark.slow
def test_tables_are_finite_and_define_their_figures(reproduced):
    _, text, results = reproduced
    assert "mean ΔE, relative" in text and "Figures of merit" in text
    for number, runs in results.items():
        for r in runs:
            for label, key in reproduce.ROWS:
                assert math.isfinite(r.merits[key]), (number, r.run.label, key)
                assert label in text
        rows = [line for line in text.splitlines() if line.startswith("| mean unit-length error")]
        assert len(rows) == len(results)


@pytest.mark.slow
def test_variational_integrator_beats_baselines_on_unit_length(reproduced):
    _, _, results = reproduced
    for number, runs in results.items():
        vi = max(r.merits["mean_unit_length_error"] for r in runs if r.run.variational)
        assert vi < 1e-13, number
        for r in runs:
            # A baseline that renormalises q after each step is exact on |q_i| by construction.
            if not r.run.variational and not isinstance(
                r.run.integrator, s2.RungeKutta2WithReprojection
            ):
                assert r.merits["mean_unit_length_error"] > vi, (number, r.run.label)


@pytest.mark.parametrize("number", sorted(reproduce.EXAMPLES))
def test_examples_table_is_consistent(number):
    example = reproduce.EXAMPLES[number]
    q0, omega0 = example.model.paper_state()
    s2.check_initial_state(q0, omega0)
    labels = [run.label for run in example.runs]
    assert len(set(labels)) == len(labels) and set(example.paper) <= set(labels)
    for run in example.runs:
        dt = example.sample if run.dt is None else run.dt
        assert math.isclose(example.sample / dt, round(example.sample / dt)), run.label
        assert math.isclose(
            example.horizon / example.sample, round(example.horizon / example.sample)
        )
        assert (run.dt is None) == isinstance(run.integrator, s2.AdaptiveRungeKutta45)
        for key in example.paper.get(run.label, {}):
            assert key in dict((k, label) for label, k in reproduce.ROWS)
    if any(isinstance(r.integrator, s2.ExplicitVariationalIntegrator) for r in example.runs):
        inertia = np.asarray(example.model.inertia_matrix(example.model.paper_params()))
        assert np.all(inertia == np.diag(np.diag(inertia))), "explicit VI needs a diagonal M"


def test_command_line(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(cli, "reproduce", lambda *args: calls.append(args))
    cli.main(["double-pendulum", "--out", str(tmp_path)])
    cli.main(["reproduce", "--out", str(tmp_path)])
    cli.main(["reproduce", "2", "6", "--out", str(tmp_path), "--horizon-scale", "0.5"])
    assert calls == [([1], tmp_path), ([1, 2, 3, 4, 5, 6], tmp_path, 1.0), ([2, 6], tmp_path, 0.5)]
    for bad in (["reproduce", "7"], ["reproduce", "--horizon-scale", "0"]):
        with pytest.raises(SystemExit):
            cli.main(bad)


def test_command_line_file_system_errors_are_one_line(tmp_path):
    """An --out that is a file (likewise no permission, a full disk): one line, exit status 1."""
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    run = subprocess.run(
        [sys.executable, "-m", "s2jax", "double-pendulum", "--out", str(blocker)],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [f"python -m s2jax: cannot write {blocker}: File exists"]


def test_command_line_full_disk_is_one_line(monkeypatch, tmp_path, capsys):
    def full_disk(*args):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "double_pendulum.npz"))

    monkeypatch.setattr(cli, "reproduce", full_disk)
    assert cli.main(["double-pendulum", "--out", str(tmp_path)]) == 1
    message = f"python -m s2jax: cannot write {tmp_path / 'double_pendulum.npz'}: No space left on device"
    assert capsys.readouterr().err.strip().splitlines() == [message]
