"""Atomic writes: an interrupted write never leaves a broken file or destroys the previous one."""

import subprocess
import sys

import numpy as np
import pytest

import s2jax as s2


def test_atomic_write_replaces_the_file_only_on_success(tmp_path):
    path = tmp_path / "data.npz"
    with s2.io.atomic_write(path) as file:
        np.savez_compressed(file, x=np.arange(3))
    with pytest.raises(RuntimeError, match="interrupted"):
        with s2.io.atomic_write(path) as file:
            file.write(b"half a file")
            raise RuntimeError("interrupted")
    np.testing.assert_array_equal(np.load(path)["x"], np.arange(3))  # the previous file, intact
    assert [p.name for p in tmp_path.iterdir()] == ["data.npz"]  # no temporary file left


def test_a_killed_writer_leaves_the_previous_file_whole(tmp_path):
    """SIGKILL in the middle of a write (the process cannot clean up) keeps `path` readable."""
    path = tmp_path / "trajectory.npz"
    with s2.io.atomic_write(path) as file:
        np.savez_compressed(file, x=np.arange(5))
    script = (
        "import os, signal, sys\n"
        "import s2jax as s2\n"
        f"with s2.io.atomic_write({str(path)!r}) as file:\n"
        "    file.write(b'partial'); file.flush()\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert run.returncode == -9
    np.testing.assert_array_equal(np.load(path)["x"], np.arange(5))
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "trajectory.npz"]
    assert all(name.startswith(".trajectory.npz.") and name.endswith(".tmp") for name in leftovers)
