"""s2jax.plot: paths on the sphere in 3-D and GIF animations (read back with Pillow)."""

import re

import matplotlib.pyplot as plt
import numpy as np
import pytest
from PIL import Image

from s2jax import plot


def _paths(num_states=12, n=2):
    """Unit vectors turning about e₃ at different rates, shape (S, n, 3) (no simulation needed)."""
    angle = np.linspace(0.0, 2.0, num_states)[:, None] * np.arange(1, n + 1)[None, :]
    tilt = 0.6
    return np.stack([np.sin(tilt) * np.cos(angle), np.sin(tilt) * np.sin(angle), np.cos(tilt) + 0 * angle], -1)


def test_sphere_paths_draws_one_line_per_body_on_a_3d_axis(tmp_path):
    q = _paths(n=3)
    fig = plot.sphere_paths(q, bodies=[0, 2], colors=["red", "blue"], title="paths")
    (ax,) = fig.axes
    assert ax.name == "3d" and ax.get_title() == "paths"
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"body 0", "body 2"}
    x, y, z = lines["body 2"].get_data_3d()
    np.testing.assert_array_equal(np.stack([x, y, z], -1), q[:, 2])
    assert lines["body 0"].get_color() == "red"
    assert any("down (gravity)" in text.get_text() for text in ax.texts)
    assert ax.get_zlim()[0] > ax.get_zlim()[1]  # z drawn downwards: gravity is +e₃
    fig.savefig(tmp_path / "paths.png")
    assert Image.open(tmp_path / "paths.png").format == "PNG"


@pytest.mark.parametrize(
    "shape", [(12, 3), (2, 12, 2, 3), (12, 2, 2)],
)
def test_bad_shapes_are_rejected(shape, tmp_path):
    with pytest.raises(ValueError, match=r"shape \(S, n, 3\)"):
        plot.sphere_paths(np.ones(shape))
    with pytest.raises(ValueError, match=r"shape \(S, n, 3\)"):
        plot.animate(np.ones(shape), tmp_path / "x.gif")
    assert not (tmp_path / "x.gif").exists()


def test_bad_options_are_rejected(tmp_path):
    q = _paths()
    with pytest.raises(ValueError, match="bodies"):
        plot.sphere_paths(q, bodies=[5])
    with pytest.raises(ValueError, match="pivots"):
        plot.animate(q, tmp_path / "x.gif", pivots=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="not both"):
        plot.animate(q, tmp_path / "x.gif", lengths=[1.0, 1.0], pivots=np.zeros((2, 3)))
    with pytest.raises(ValueError, match="every"):
        plot.animate(q, tmp_path / "x.gif", every=0)
    with pytest.raises(ValueError, match="max_frames"):
        plot.animate(q, tmp_path / "x.gif", max_frames=0)
    with pytest.raises(ValueError, match="finite"):
        plot.sphere_paths(np.full((3, 1, 3), np.nan))


@pytest.mark.parametrize(
    "options",
    [
        {"lengths": [1.0, 0.5]},  # a chain
        {"pivots": np.array([[0.0, 0.0, 0.0], [0.1, 0.0, 0.0]])},  # a dipole array
        {"links": False},  # points on the sphere
    ],
)
def test_animate_writes_a_gif_with_one_frame_per_drawn_state(options, tmp_path):
    q = _paths(num_states=12)
    t = np.linspace(0.0, 1.1, 12)
    path = plot.animate(q, tmp_path / "run.gif", fps=20, every=5, t=t, **options)
    with Image.open(path) as gif:
        assert gif.format == "GIF"
        assert gif.n_frames == 3  # states 0, 5, 10
        assert gif.info["duration"] == 50  # ms per frame at 20 fps
    assert [p.name for p in tmp_path.iterdir()] == ["run.gif"]  # no temporary file left


def _frames(path):
    with Image.open(path) as gif:
        return gif.n_frames


@pytest.mark.parametrize(("num_states", "max_frames", "frames"), [(23, 5, 5), (20, 5, 5), (11, 5, 4), (4, 5, 4)])
def test_animate_caps_the_frames_by_default_with_the_smallest_stride(num_states, max_frames, frames, tmp_path):
    """every = ⌈S / max_frames⌉: 23 states → every 5th (5 frames; every 4th would make 6),
    20 → every 4th, 11 → every 3rd (4 frames), 4 → all of them."""
    q = _paths(num_states=num_states, n=1)
    path = plot.animate(q, tmp_path / "run.gif", max_frames=max_frames, progress=False)
    assert _frames(path) == frames


def test_animate_default_draws_the_strided_states_at_their_times(tmp_path):
    """The capped GIF is, byte for byte, the GIF of the states 0, 5, 10, … with their own save
    times: the right states, and the times shown are theirs."""
    q, t = _paths(num_states=23, n=2), np.linspace(0.0, 2.2, 23)
    capped = plot.animate(q, tmp_path / "capped.gif", t=t, max_frames=5, lengths=[1.0, 0.5], progress=False)
    strided = plot.animate(q[::5], tmp_path / "strided.gif", t=t[::5], every=1, lengths=[1.0, 0.5], progress=False)
    assert capped.read_bytes() == strided.read_bytes()
    shifted = plot.animate(q[::5], tmp_path / "shifted.gif", t=t[1::5], every=1, lengths=[1.0, 0.5], progress=False)
    assert shifted.read_bytes() != capped.read_bytes()  # the times shown are part of the frames


def test_animate_honours_an_explicit_every_beyond_max_frames(tmp_path):
    path = plot.animate(_paths(num_states=13, n=1), tmp_path / "run.gif", every=2, max_frames=3, progress=False)
    assert _frames(path) == 7  # ⌈13 / 2⌉, more than max_frames


def test_animate_reports_progress_on_stderr_only_when_asked(tmp_path, capfd):
    q = _paths(num_states=9, n=1)
    plot.animate(q, tmp_path / "quiet.gif", every=4, progress=False)
    assert capfd.readouterr() == ("", "")
    plot.animate(q, tmp_path / "run.gif", max_frames=4)
    out, err = capfd.readouterr()
    assert out == ""
    updates = err.split("\r")[1:]
    assert updates[:-1] == [f"animate: frame {k}/3 (every=3 of 9 saved states)" for k in (1, 2, 3)]
    assert re.fullmatch(r"animate: 3 frames \(every=3 of 9 saved states\) in [\d.]+ s, \d+ kB: .*run\.gif\n",
                        updates[-1])


def test_animate_updates_its_progress_line_at_most_about_50_times(tmp_path, capfd, monkeypatch):
    """Drawing is what costs; a blank canvas makes 120 frames quick, and the line is updated
    every 3rd frame (⌈120 / 50⌉) and at the last."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    monkeypatch.setattr(FigureCanvasAgg, "draw", lambda canvas: canvas.get_renderer())
    plot.animate(_paths(num_states=120, n=1), tmp_path / "run.gif")
    updates = capfd.readouterr().err.split("\r")[1:-1]
    assert [int(u.split()[2].split("/")[0]) for u in updates] == list(range(3, 121, 3))


@pytest.fixture
def drawn(monkeypatch):
    """The figures the reproduce plots would write, kept open for inspection."""
    figures = []
    monkeypatch.setattr(plot, "_save", lambda fig, path, dpi: figures.append(fig))
    yield figures
    for fig in figures:
        plt.close(fig)


def test_round_off_unit_length_errors_draw_without_gaps(drawn):
    """Exact zeros between 1e-16s (a projected method) made a dashed "barcode" on the log axis
    of Fig. 3.3: the lower panel draws window maxima, which have no gaps."""
    t = np.linspace(0.0, 10.0, 2001)
    round_off = np.where(np.arange(t.size) % 3 == 0, 0.0, 1.1e-16)
    growing = 1e-6 * (1 + t)
    runs = {"projected": (t, growing, round_off), "drifting": (t, growing, growing)}
    plot.plot_energy_and_unit_length(runs, None, "title", {"projected": {"linestyle": "--"}})
    (fig,) = drawn
    upper, lower = fig.axes
    assert lower.get_xlabel() == "t [s]"
    assert "max over windows of 0.065 s" in lower.get_ylabel()  # 13 states of 0.005 s
    projected, drifting = lower.get_lines()
    assert not np.any(np.isnan(projected.get_ydata())) and np.all(projected.get_ydata() == 1.1e-16)
    # A window's maximum, at its end: the drifting error is increasing, so it is the last value.
    np.testing.assert_allclose(drifting.get_ydata(), 1e-6 * (1 + drifting.get_xdata()), rtol=1e-12)


def test_grey_faces_are_explained(drawn):
    vertices = np.eye(3)
    faces = np.array([[0, 1, 2]])
    plot.plot_sphere_faces(vertices, faces, [[np.nan], [1.0]], [0.0, 1.0], None, "t", "E",
                           missing="no molecule in or around the face")
    (fig,) = drawn
    (legend,) = fig.legends
    assert legend.get_texts()[0].get_text() == "grey: no molecule in or around the face"
    assert [ax.get_title() for ax in fig.axes[:2]] == ["t = 0 s", "t = 1 s"]
