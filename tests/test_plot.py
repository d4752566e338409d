"""s2jax.plot: paths on the sphere in 3-D and GIF animations (read back with Pillow)."""

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
