"""Every notebook in notebooks/ runs from top to bottom without an error.

The notebooks are executed as a reader would run them: in a fresh Jupyter kernel of this Python
(nbclient; `ipykernel` provides the kernel), with their own directory as the working directory,
so the kernel does not see tests/conftest.py's promotion settings. Nothing is written back to the
notebooks.
"""

import os
import pathlib
import time

import ipykernel  # noqa: F401  (the kernel; imported so that a missing one fails here, not skips)
import nbclient
import nbformat
import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))

# Wall-clock budget for one notebook, all cells together. Measured on the 2-core CI machine
# (README, "Notebooks"): 90 s quiet and 200 s at load average 8 for the longest one, so
# 600 s is a 3× margin under load; a notebook that needs more should get a smaller CI problem.
TIME_LIMIT_S = 600


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks found in notebooks/"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path):
    notebook = nbformat.read(path, as_version=4)
    deadline = time.monotonic() + TIME_LIMIT_S

    def remaining(cell):  # nbclient's per-cell timeout: what is left of the notebook's budget
        return max(1, int(deadline - time.monotonic()))

    client = nbclient.NotebookClient(
        notebook,
        timeout_func=remaining,
        kernel_name="python3",  # jupyter_client starts it with sys.executable, this interpreter
        resources={"metadata": {"path": str(path.parent)}},
    )
    # The kernel runs at XLA's default optimisation level, as a reader's does: conftest's level 0
    # halves compile times but slows the notebooks' long fits (parameter_identification: 190 s
    # at level 0, against the time measured below with it).
    flags = os.environ.get("XLA_FLAGS", "").replace("--xla_backend_optimization_level=0", "")
    try:
        client.execute(env={**os.environ, "XLA_FLAGS": flags})
    except nbclient.exceptions.CellTimeoutError:
        pytest.fail(f"{path.name} did not finish within {TIME_LIMIT_S} s")
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    not_run = [i for i, cell in enumerate(code_cells) if cell.get("execution_count") is None]
    assert not not_run, f"{path.name}: code cells {not_run} were not executed"
    errors = [o for cell in code_cells for o in cell.outputs if o.output_type == "error"]
    assert not errors, f"{path.name}: {errors[0]['ename']}: {errors[0]['evalue']}"
