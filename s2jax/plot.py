"""Figures in the style of 002 Figs. 3.1–3.7: energy and unit-length errors against time, and
the kinetic energy of molecules over the sphere."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from mpl_toolkits.mplot3d.art3d import Poly3DCollection  # noqa: E402

from .io import atomic_write  # noqa: E402


def plot_energy_and_unit_length(runs, path, title, styles=None):
    """Two panels, |E − E₀| and max_i ||q_i| − 1| against t, on log scales, one line per run.

    **Arguments:**

    - `runs`: a dict name → (t, energy_error, unit_length_error), numpy arrays.
    - `path`: where to write the PNG.
    - `title`: the figure's title.
    - `styles`: optional dict name → matplotlib line keywords (colour, line style, marker);
      runs without one get a line style of their own.
    """
    fig, axes = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    default = ["-", ":", "--", "-."]
    for k, (name, (t, energy_error, unit_error)) in enumerate(runs.items()):
        style = (styles or {}).get(name) or {"linestyle": default[k % len(default)]}
        style = {"lw": 1, **style}
        # Exact zeros (the first sample) cannot be drawn on a log axis.
        axes[0].semilogy(t, np.where(energy_error > 0, energy_error, np.nan), label=name, **style)
        axes[1].semilogy(t, np.where(unit_error > 0, unit_error, np.nan), label=name, **style)
    axes[0].set_ylabel("|E − E₀|")
    axes[1].set_ylabel("max_i ||q_i| − 1|")
    axes[1].set_xlabel("t")
    axes[0].legend(fontsize="small")
    axes[0].set_title(title)
    fig.tight_layout()
    _save(fig, path, dpi=120)


def plot_sphere_faces(vertices, faces, values, times, path, title, label, view=(50.0, -90.0)):
    """One sphere per time, its triangular faces coloured by `values` (blue → red, as Fig. 3.7).

    **Arguments:**

    - `vertices`, `faces`: a triangulated unit sphere, shapes (V, 3) and (F, 3).
    - `values`: shape (len(times), F), one value per face and time; NaN faces are grey. One
      colour scale for all times, saturating at the 99.5th percentile.
    - `times`: the times, for the panel titles.
    - `path`, `title`: where to write the PNG, and its title.
    - `label`: the colour bar's label.
    - `view`: (elevation, azimuth) of the camera, in degrees.
    """
    values = np.asarray(values)
    columns = min(3, len(times))
    rows = -(-len(times) // columns)
    fig = plt.figure(figsize=(3.2 * columns + 1.2, 3.2 * rows + 0.4))
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
        ax.set_title(f"t = {t:g}")
    fig.subplots_adjust(left=0.0, right=0.86, bottom=0.02, top=0.9, wspace=0.0, hspace=0.1)
    fig.colorbar(
        matplotlib.cm.ScalarMappable(norm=norm, cmap=colormap),
        cax=fig.add_axes((0.89, 0.2, 0.02, 0.6)),
        label=label,
        extend="max",
    )
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
    try:
        with atomic_write(path) as file:
            fig.savefig(file, format="png", dpi=dpi)
    finally:
        plt.close(fig)
