"""Figures: the bodies' paths on the sphere (`sphere_paths`) and animations of them
(`animate`, a GIF); and, in the style of 002 Figs. 3.1–3.7, energy and unit-length errors
against time and the kinetic energy of molecules over the sphere.

`sphere_paths` and `animate` draw on `matplotlib.figure.Figure`s of their own (no pyplot state);
importing this module leaves the backend alone. matplotlib and Pillow are optional dependencies (the
`plot` extra), imported when a figure is first drawn: this module imports without them, and its
functions then raise an ImportError that names the extra. More: docs/api/plot.md.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import numpy as np

from .io import atomic_write

if TYPE_CHECKING:
    import matplotlib.figure


def _matplotlib(function: str):
    """matplotlib, with the submodules this module draws with, imported on first use; or an
    ImportError that names the `plot` extra (`function`: the public function that needs it)."""
    try:
        import matplotlib.cm
        import matplotlib.colors
        import matplotlib.figure
        import matplotlib.patches
        import matplotlib.pyplot
    except ImportError as error:
        package = "Pillow" if (error.name or "").startswith("PIL") else "matplotlib"
        kind = ModuleNotFoundError if isinstance(error, ModuleNotFoundError) else ImportError
        raise kind(
            f"s2jax.plot.{function} needs {package}: pip install 's2jax[plot]'", name=error.name
        ) from error
    return matplotlib


def plot_energy_and_unit_length(runs, path, title, styles=None):
    """Two panels, |E − E₀| and max_i ||q_i| − 1| against t [s], on log scales, one line per run.

    The unit-length errors of the methods that keep |q_i| = 1 are round-off: exact zeros
    between values of 1e-16, which a log axis cannot draw, so a line through them breaks into
    a "barcode". The lower panel therefore draws, for every run, the largest error over
    consecutive windows of the saved states (about 150 windows), at the windows' ends; the
    axis label gives the window's length. A window of exact zeros stays blank.

    **Arguments:**

    - `runs`: a dict name → (t, energy_error, unit_length_error), numpy arrays; t in seconds.
    - `path`: where to write the PNG.
    - `title`: the figure's title.
    - `styles`: optional dict name → matplotlib line keywords (colour, line style, marker);
      runs without one get a line style of their own.
    """
    plt = _matplotlib("plot_energy_and_unit_length").pyplot
    fig, axes = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    default = ["-", ":", "--", "-."]
    windows = set()
    for k, (name, (t, energy_error, unit_error)) in enumerate(runs.items()):
        style = (styles or {}).get(name) or {"linestyle": default[k % len(default)]}
        style = {"lw": 1, **style}
        # Exact zeros (the first sample) cannot be drawn on a log axis.
        axes[0].semilogy(t, np.where(energy_error > 0, energy_error, np.nan), label=name, **style)
        width = max(1, len(t) // 150)
        blocks = len(t) // width
        peaks = np.max(np.asarray(unit_error)[: blocks * width].reshape(blocks, width), axis=1)
        ends = np.asarray(t)[width - 1 : blocks * width : width]
        if width > 1:
            windows.add(f"{ends[1] - ends[0]:.3g} s" if blocks > 1 else f"{width} states")
            style = {key: value for key, value in style.items() if key != "markevery"}
        axes[1].semilogy(ends, np.where(peaks > 0, peaks, np.nan), label=name, **style)
    axes[0].set_ylabel("|E − E₀|")
    window = f"\n(max over windows of {', '.join(sorted(windows))})" if windows else ""
    axes[1].set_ylabel(f"max_i ||q_i| − 1|{window}")
    axes[1].set_xlabel("t [s]")
    axes[0].legend(fontsize="small")
    axes[0].set_title(title, fontsize="medium")
    fig.tight_layout()
    _save(fig, path, dpi=120)


def plot_sphere_faces(
    vertices, faces, values, times, path, title, label, view=(50.0, -90.0), missing="no value"
):
    """One sphere per time, its triangular faces coloured by `values` (blue → red, as Fig. 3.7).

    **Arguments:**

    - `vertices`, `faces`: a triangulated unit sphere, shapes (V, 3) and (F, 3).
    - `values`: shape (len(times), F), one value per face and time; NaN faces (no value) are
      grey, and a legend under the colour bar says what grey means (`missing`). One colour
      scale for all times, saturating at the 99.5th percentile.
    - `times`: the times in seconds, for the panel titles.
    - `path`, `title`: where to write the PNG, and its title.
    - `label`: the colour bar's label.
    - `view`: (elevation, azimuth) of the camera, in degrees.
    - `missing`: what a grey (NaN) face means, for the legend.
    """
    matplotlib = _matplotlib("plot_sphere_faces")
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection  # ships with matplotlib

    plt = matplotlib.pyplot
    values = np.asarray(values)
    columns = min(3, len(times))
    rows = -(-len(times) // columns)
    fig = plt.figure(figsize=(3.2 * columns + 1.2, 3.2 * rows + 0.8))
    finite = values[np.isfinite(values)]
    # A few hot faces would wash out the rest: the top 0.5 % saturate.
    norm = matplotlib.colors.Normalize(vmin=finite.min(), vmax=np.percentile(finite, 99.5))
    colormap = matplotlib.colormaps["jet"]
    triangles = vertices[faces]
    for k, t in enumerate(times):
        ax = fig.add_subplot(rows, columns, k + 1, projection="3d")
        colours = colormap(norm(np.nan_to_num(values[k], nan=finite.min())))
        colours[~np.isfinite(values[k])] = (0.6, 0.6, 0.6, 1.0)
        # Only the faces towards the camera: mplot3d does not hide the far side reliably.
        elevation, azimuth = np.deg2rad(view)
        camera = np.array(
            [
                np.cos(elevation) * np.cos(azimuth),
                np.cos(elevation) * np.sin(azimuth),
                np.sin(elevation),
            ]
        )
        front = triangles.mean(axis=1) @ camera > 0
        ax.add_collection3d(
            Poly3DCollection(triangles[front], facecolors=colours[front], edgecolors="none")
        )
        ax.set_xlim(-1, 1)
        ax.set_ylim(-1, 1)
        ax.set_zlim(-1, 1)
        ax.set_box_aspect((1, 1, 1), zoom=1.35)
        ax.view_init(*view)
        ax.set_axis_off()
        ax.set_title(f"t = {t:g} s")
    fig.subplots_adjust(left=0.0, right=0.86, bottom=0.04, top=0.86, wspace=0.0, hspace=0.1)
    fig.colorbar(
        matplotlib.cm.ScalarMappable(norm=norm, cmap=colormap),
        cax=fig.add_axes((0.89, 0.2, 0.02, 0.6)),
        label=label,
        extend="max",
    )
    if not np.all(np.isfinite(values)):
        grey = matplotlib.patches.Patch(facecolor=(0.6, 0.6, 0.6), label=f"grey: {missing}")
        fig.legend(handles=[grey], loc="lower right", fontsize="small", frameon=False)
    fig.suptitle(title)
    _save(fig, path, dpi=110)


def kinetic_energy_on_faces(q, omega, masses, vertices, faces):
    """Fig. 3.7's field: for each face of a triangulated sphere, the mean kinetic energy
    ½ m_i |q̇_i|² of the molecules that lie in the face or in a face sharing a vertex with it.

    A molecule lies in the face whose centroid is nearest to it. With 642 molecules and 5120
    faces a few per cent of the faces have no molecule in or around them; they take the mean
    over their neighbours' neighbourhoods instead (weighted by how often a face is reached).
    """
    centroids = vertices[faces].mean(axis=1)
    face_of = np.argmax(q @ centroids.T, axis=1)
    kinetic = 0.5 * masses * np.sum(np.cross(omega, q) ** 2, axis=-1)
    neighbours = _vertex_neighbours(faces)
    valid = neighbours >= 0

    def around(per_face):
        return np.sum(np.where(valid, per_face[neighbours], 0.0), axis=1)

    total = around(np.bincount(face_of, kinetic, minlength=len(faces)))
    count = around(np.bincount(face_of, minlength=len(faces)).astype(float))
    wider_total, wider_count = around(total), around(count)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(
            count > 0, total / count, np.where(wider_count > 0, wider_total / wider_count, np.nan)
        )


def _vertex_neighbours(faces):
    """(F, K): the faces that share a vertex with each face (itself included), padded with −1."""
    faces_of_vertex = [[] for _ in range(faces.max() + 1)]
    for f, corners in enumerate(faces):
        for v in corners:
            faces_of_vertex[v].append(f)
    rings = [sorted({g for v in corners for g in faces_of_vertex[v]}) for corners in faces]
    width = max(len(r) for r in rings)
    return np.array([r + [-1] * (width - len(r)) for r in rings])


def _save(fig, path, dpi):
    """Write `fig` as a PNG atomically (see `s2jax.io.atomic_write`) and close it."""
    import matplotlib.pyplot as plt  # loaded already: only the plot functions call this

    try:
        with atomic_write(path) as file:
            fig.savefig(file, format="png", dpi=dpi)
    finally:
        plt.close(fig)


def _check_paths(q, name="q") -> np.ndarray:
    """q as a float array (S, n, 3) of finite values, or a ValueError saying what is wrong."""
    q = np.asarray(q)
    if q.ndim != 3 or q.shape[-1] != 3 or q.shape[0] < 1:
        raise ValueError(
            f"`{name}` must have shape (S, n, 3), S saved states of n unit vectors (e.g. `sol.q`); "
            f"got {q.shape}. For a batch, pass one member: sol.q[b]"
        )
    if not np.issubdtype(q.dtype, np.floating) or not np.all(np.isfinite(q)):
        raise ValueError(f"`{name}` must be finite floats")
    return q


def _unit_sphere(ax, alpha=0.08):
    """A translucent unit sphere with e₃ marked: s2jax puts gravity along +e₃ (e₃ points down)."""
    u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 40), np.linspace(0, np.pi, 20))
    ax.plot_surface(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="grey", alpha=alpha,
                    linewidth=0, shade=False)
    ax.quiver(0, 0, 0, 0, 0, 1.25, color="black", arrow_length_ratio=0.08, lw=1)
    ax.text(0, 0, 1.35, "e₃: down (gravity)", fontsize="small")


def _figure_and_axis(ax, figsize):
    import matplotlib.figure  # loaded already by `sphere_paths`'s `_matplotlib`

    if ax is None:
        fig = matplotlib.figure.Figure(figsize=figsize)
        return fig, fig.add_subplot(projection="3d")
    if getattr(ax, "name", None) != "3d":
        raise ValueError("`ax` must be a 3-D axis: figure.add_subplot(projection='3d')")
    return ax.figure, ax


def sphere_paths(q, *, ax=None, bodies=None, colors=None, title=None) -> matplotlib.figure.Figure:
    """Each body's path t ↦ q_i(t) on a translucent unit sphere, in 3-D.

    e₃ is drawn and labelled "down (gravity)": the models of s2jax (002 §3.5) hang along +e₃,
    so the z axis is drawn pointing down. A circle marks each path's start, a square its end.

    **Arguments:**

    - `q`: the unit vectors, shape (S, n, 3), e.g. `sol.q`.
    - `ax`: a 3-D matplotlib axis to draw on, or None for a new figure.
    - `bodies`: the indices of the bodies to draw, or None for all.
    - `colors`: one matplotlib colour per drawn body, or None for the default cycle.
    - `title`: the axis title, or None.

    **Returns:** the `matplotlib.figure.Figure` (in Jupyter it shows itself; else
    `fig.savefig("paths.png")`).
    """
    _matplotlib("sphere_paths")
    q = _check_paths(q)
    n = q.shape[1]
    bodies = list(range(n)) if bodies is None else [int(i) for i in bodies]
    if not all(0 <= i < n for i in bodies):
        raise ValueError(f"`bodies` must be indices of the {n} bodies; got {bodies}")
    if colors is not None and len(colors) != len(bodies):
        raise ValueError(f"`colors` must give one colour per drawn body ({len(bodies)}); got {len(colors)}")
    fig, ax = _figure_and_axis(ax, (5.5, 5.5))
    _unit_sphere(ax)
    for k, i in enumerate(bodies):
        colour = None if colors is None else colors[k]
        (line,) = ax.plot(*q[:, i].T, lw=1, color=colour, label=f"body {i}")
        ax.scatter(*q[0, i], color=line.get_color(), marker="o", s=20)
        ax.scatter(*q[-1, i], color=line.get_color(), marker="s", s=20)
    _cube(ax, 1.0)
    if len(bodies) <= 10:
        ax.legend(fontsize="small", loc="upper left")
    if title is not None:
        ax.set_title(title)
    return fig


def _cube(ax, radius, centre=(0.0, 0.0, 0.0)):
    """Equal scales on the three axes, z drawn downwards (gravity is +e₃)."""
    x, y, z = centre
    ax.set_xlim(x - radius, x + radius)
    ax.set_ylim(y - radius, y + radius)
    ax.set_zlim(z + radius, z - radius)
    ax.set_box_aspect((1, 1, 1))
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_zlabel("z (down)")


def _positions(q, lengths, pivots):
    """Per frame, the polylines to draw (each an (m, 3) array); the centre and half-width of the scene."""
    if lengths is not None and pivots is not None:
        raise ValueError("pass `lengths` (a chain) or `pivots` (a dipole array), not both")
    n = q.shape[1]
    if lengths is not None:
        lengths = np.broadcast_to(np.asarray(lengths, dtype=float), (n,))
        joints = np.cumsum(lengths[None, :, None] * q, axis=1)  # x_i = Σ_{j≤i} l_j q_j
        points = np.concatenate([np.zeros((q.shape[0], 1, 3)), joints], axis=1)
        return [[frame] for frame in points], np.zeros(3), float(np.sum(np.abs(lengths)))
    if pivots is not None:
        pivots = np.asarray(pivots, dtype=float)
        if pivots.shape != (n, 3):
            raise ValueError(f"`pivots` must have shape (n, 3) = {(n, 3)}; got {pivots.shape}")
        gaps = np.linalg.norm(pivots[:, None] - pivots[None], axis=-1)[~np.eye(n, dtype=bool)]
        half = 0.4 * (gaps.min() if n > 1 else 1.0)  # rods of 0.8 × the nearest spacing
        rods = [[np.stack([p - half * d, p + half * d]) for p, d in zip(pivots, frame)] for frame in q]
        centre = 0.5 * (pivots.min(axis=0) + pivots.max(axis=0))
        return rods, centre, float(np.max(np.abs(pivots - centre)) + half)
    return [[np.stack([np.zeros(3), d]) for d in frame] for frame in q], np.zeros(3), 1.0


def animate(
    q, path, *, fps=30, links=True, every=None, max_frames=200, lengths=None, pivots=None, t=None, title=None,
    progress=True,
):
    """Write a GIF of the bodies moving: a chain, a dipole array, or unit vectors on the sphere.

    - With `lengths` (l_i): a chain hanging from the origin, joint i at x_i = Σ_{j≤i} l_j q_j
      (as the chains of 002 Examples 1, 3, 4); the links join the origin and the joints.
    - With `pivots` (p_i, shape (n, 3)): a dipole array (002 Example 5), magnet i a rod through
      p_i along q_i, its north end q_i-wards marked.
    - Otherwise each q_i on a translucent unit sphere, linked to the origin.

    The frames are the saved states 0, `every`, 2·`every`, …, drawn with matplotlib and written
    by Pillow (no external program), atomically (`s2jax.io.atomic_write`). z is drawn
    downwards: gravity is +e₃.

    By default (`every=None`) the stride is the smallest that keeps the GIF within `max_frames`
    frames, every = ⌈S / max_frames⌉. A frame costs matplotlib about 30 ms to draw on a quiet
    machine (several times that on a loaded one) and 2–3 kB of GIF: drawn whole, the 1001 saved
    states of docs/getting_started.md's run took 30 s to minutes and made 2 MB, 33 s at 30 fps.
    Within 200 frames it takes seconds, and the GIF plays for at most 200 / `fps` s (6.7 s at
    30 fps), so a long run plays faster than a short one. Pass `every` to choose the stride.

    **Arguments:**

    - `q`: shape (S, n, 3), e.g. `sol.q`.
    - `path`: the GIF file to write.
    - `fps`: frames per second of the GIF (GIF stores delays in 10 ms units).
    - `links`: draw the links (the rods), not only the bodies.
    - `every`: draw every `every`-th saved state, exactly; the GIF has ⌈S / every⌉ frames. None:
      the smallest stride that gives at most `max_frames` frames.
    - `max_frames`: the most frames the GIF may have when `every` is None; ignored otherwise.
    - `lengths`, `pivots`: see above (at most one of them).
    - `t`: the save times, shape (S,) (e.g. `sol.t`), shown on each frame (the times of the
      states drawn); or None.
    - `title`: a title over every frame, or None.
    - `progress`: write the frame being drawn to stderr, updated in place (at most about 50
      times), then the stride, the time taken and the file's size.

    **Returns:** `path`.
    """
    matplotlib = _matplotlib("animate")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    try:
        from PIL import Image
    except ImportError as error:
        raise ModuleNotFoundError("s2jax.plot.animate needs Pillow: pip install 's2jax[plot]'", name="PIL") from error

    q = _check_paths(q)
    if isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 1:
        raise ValueError(f"`max_frames` must be a positive int; got {max_frames!r}")
    if every is None:
        every = -(-q.shape[0] // max_frames)
    elif isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"`every` must be a positive int or None; got {every!r}")
    if not fps > 0:
        raise ValueError(f"`fps` must be positive; got {fps!r}")
    if t is not None and np.shape(t) != q.shape[:1]:
        raise ValueError(f"`t` must have shape (S,) = {q.shape[:1]}; got {np.shape(t)}")
    start = time.perf_counter()
    num_states, q = q.shape[0], q[::every]
    times = None if t is None else np.asarray(t)[::every]
    num_frames = q.shape[0]
    stride = f"every={every} of {num_states} saved states"
    report_every = -(-num_frames // 50)  # at most about 50 updates of the progress line
    polylines, centre, radius = _positions(q, lengths, pivots)
    fig = matplotlib.figure.Figure(figsize=(4.5, 4.5), dpi=80)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_subplot(projection="3d")
    if lengths is None and pivots is None:
        _unit_sphere(ax)
    _cube(ax, 1.05 * radius, centre)
    count = len(polylines[0])
    lines = [ax.plot([], [], [], "-" if links else "", color="tab:blue", lw=1.5)[0] for _ in range(count)]
    ends = ax.plot([], [], [], "o", color="tab:red", ms=4)[0]
    label = ax.text2D(0.02, 0.95, "", transform=ax.transAxes)
    if title is not None:
        ax.set_title(title)
    images = []
    for k, frame in enumerate(polylines):
        for line, points in zip(lines, frame):
            line.set_data_3d(*points.T)
        # The bobs: the chain's joints, the north ends of the magnets, the points on the sphere.
        tips = frame[0][1:] if lengths is not None else np.stack([p[-1] for p in frame])
        ends.set_data_3d(*tips.T)
        label.set_text("" if times is None else f"t = {float(times[k]):.3f} s")
        canvas.draw()
        # Quantised here, as Pillow's GIF writer would, so that the progress line covers the cost.
        rgb = Image.fromarray(np.asarray(canvas.buffer_rgba())).convert("RGB")
        images.append(rgb.convert("P", palette=Image.Palette.ADAPTIVE))
        if progress and ((k + 1) % report_every == 0 or k + 1 == num_frames):
            sys.stderr.write(f"\ranimate: frame {k + 1}/{num_frames} ({stride})")
            sys.stderr.flush()
    with atomic_write(path) as file:
        images[0].save(file, format="GIF", save_all=True, append_images=images[1:],
                       duration=round(1000 / fps), loop=0)
        size = file.tell()
    if progress:
        seconds = time.perf_counter() - start
        megabytes = f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB"
        sys.stderr.write(f"\ranimate: {num_frames} frames ({stride}) in {seconds:.1f} s, {megabytes}: {path}\n")
        sys.stderr.flush()
    return path
