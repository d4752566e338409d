"""Figures in the style of 002 Figs. 3.1–3.6: energy error and unit-length error against time."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_energy_and_unit_length(runs, path, title):
    """Two panels, |E − E₀| and max_i ||q_i| − 1| against t, on log scales, one line per run.

    **Arguments:**

    - `runs`: a dict name → (t, energy_error, unit_length_error), numpy arrays.
    - `path`: where to write the PNG.
    - `title`: the figure's title.
    """
    fig, axes = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    styles = ["-", ":", "--", "-."]
    for (name, (t, energy_error, unit_error)), style in zip(runs.items(), styles):
        # Exact zeros (the first sample) cannot be drawn on a log axis.
        axes[0].semilogy(t, np.where(energy_error > 0, energy_error, np.nan), style, label=name, lw=1)
        axes[1].semilogy(t, np.where(unit_error > 0, unit_error, np.nan), style, label=name, lw=1)
    axes[0].set_ylabel("|E − E₀|")
    axes[1].set_ylabel("max_i ||q_i| − 1|")
    axes[1].set_xlabel("t")
    axes[0].legend()
    axes[0].set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
