"""Atomic writes: an interrupted write never leaves a broken file or destroys the previous one."""

import re
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
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


def _pendulum(q, qdot, params):
    return 0.5 * params["m"] * jnp.sum(qdot**2) + params["m"] * params["g"] * q[0, 2]


def _solution(throw=True, dt=0.01):
    q0 = np.array([[np.sin(0.7), 0.0, np.cos(0.7)]])
    omega0 = np.array([[0.0, 0.9, 0.0]])
    params = {"m": 1.3, "g": 9.81, "links": [{"length": np.array([1.0, 2.0])}, {"label": "bob"}]}
    return s2.simulate(_pendulum, q0, omega0, params, dt=dt, num_steps=50, throw=throw), params


def test_solution_round_trip_is_bitwise(tmp_path):
    sol, params = _solution()
    path = tmp_path / "run.npz"
    s2.io.save_solution(path, sol, params=params, metadata={"seed": 3, "note": "e₃ down"})
    loaded, loaded_params, metadata = s2.io.load_solution(path)
    for name in ("t", "q", "omega", "failed_step"):
        a, b = np.asarray(getattr(sol, name)), np.asarray(getattr(loaded, name))
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    assert "result=RESULTS.successful," in repr(loaded)
    assert bool(loaded.result == s2.RESULTS.successful)
    assert loaded_params["params.m"] == 1.3 and loaded_params["params.links.1.label"] == "bob"
    np.testing.assert_array_equal(loaded_params["params.links.0.length"], [1.0, 2.0])
    assert metadata == {
        "seed": 3, "note": "e₃ down", "s2jax_version": s2.__version__, "integrator": loaded.integrator
    }
    assert loaded.integrator == sol.integrator
    # Back into the structure of the params.
    _, structured, _ = s2.io.load_solution(path, params_like=params)
    assert structured["m"] == 1.3 and str(structured["links"][1]["label"]) == "bob"


def test_saved_solution_is_readable_with_plain_numpy(tmp_path):
    sol, params = _solution()
    path = tmp_path / "run.npz"
    s2.io.save_solution(path, sol, params=params)
    script = (
        "import json, sys, numpy as np\n"
        "d = np.load(sys.argv[1], allow_pickle=False)\n"
        "print(d['q'].shape, str(d['result']), int(d['failed_step']), float(d['params.g']),"
        " str(d['s2jax_version']), json.loads(str(d['metadata'])))\n"
    )
    # A fresh interpreter that never imports s2jax or jax.
    run = subprocess.run([sys.executable, "-I", "-c", script, str(path)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"(51, 1, 3) successful -1 9.81 {s2.__version__} {{}}"


def test_failed_batch_round_trips_its_codes(tmp_path):
    sols = jax.vmap(lambda dt: _solution(throw=False, dt=dt)[0])(jnp.array([0.01, 50.0]))
    codes = re.search(r"result=(RESULTS\[[^]]*\])", repr(sols)).group(1)
    assert codes.startswith("RESULTS[successful, ") and codes != "RESULTS[successful, successful]"
    path = tmp_path / "batch.npz"
    s2.io.save_solution(path, sols)
    loaded, params, _ = s2.io.load_solution(path)
    assert f"result={codes}," in repr(loaded) and repr(loaded.result) == repr(sols.result) and params == {}
    np.testing.assert_array_equal(loaded.failed_step, sols.failed_step)


def test_bad_files_and_metadata_are_rejected(tmp_path):
    sol, _ = _solution()
    with pytest.raises(ValueError, match="JSON"):
        s2.io.save_solution(tmp_path / "x.npz", sol, metadata={"f": object()})
    assert not (tmp_path / "x.npz").exists()
    np.savez(tmp_path / "other.npz", q=np.zeros(3))
    with pytest.raises(ValueError, match="not a file of s2jax.io.save_solution"):
        s2.io.load_solution(tmp_path / "other.npz")


def _rewrite(path, **changes):
    """The saved file at `path` again, with arrays replaced (None: removed)."""
    with np.load(path) as data:
        arrays = {key: data[key] for key in data.files}
    arrays.update(changes)
    np.savez(path, **{key: value for key, value in arrays.items() if value is not None})


@pytest.mark.parametrize(
    "damage, what",
    [
        ("truncated", r"not an \.npz \(zip\) archive"),
        ("empty", r"not an \.npz \(zip\) archive"),
        ("text", r"not an \.npz \(zip\) archive"),
        ("random bytes", r"not an \.npz \(zip\) archive"),
        ("corrupt member", r"is damaged: "),
        ("missing q", r"is damaged: it lacks \['q'\]"),
        ("bad metadata", r"is damaged: its metadata is not valid JSON"),
        ("metadata not a dict", r"is damaged: its metadata is not a JSON object"),
        ("pickled member", r"is damaged: "),
    ],
)
def test_a_damaged_file_is_one_value_error_naming_it(tmp_path, damage, what):
    """One `ValueError` naming the file and what is wrong (it used to be BadZipFile, EOFError,
    KeyError: 'q', a "pickled data" ValueError or a JSONDecodeError, none naming the file)."""
    sol, params = _solution()
    path = tmp_path / "run.npz"
    s2.io.save_solution(path, sol, params=params)
    whole = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(whole[: len(whole) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "text":
        path.write_text("t,q\n0,1\n")
    elif damage == "random bytes":
        path.write_bytes(np.random.default_rng(0).bytes(2000))
    elif damage == "corrupt member":
        start = whole.index(b"q.npy") + 200  # inside the compressed data of 'q'
        path.write_bytes(whole[:start] + bytes(b ^ 0xFF for b in whole[start : start + 40]) + whole[start + 40 :])
    elif damage == "missing q":
        _rewrite(path, q=None)
    elif damage == "bad metadata":
        _rewrite(path, metadata=np.array("{not json"))
    elif damage == "metadata not a dict":
        _rewrite(path, metadata=np.array("[1, 2]"))
    else:
        _rewrite(path, q=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*" + what):
        s2.io.load_solution(path)


def test_a_missing_file_is_still_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        s2.io.load_solution(tmp_path / "absent.npz")


def test_save_errors_name_the_target_not_the_temporary(tmp_path):
    sol, _ = _solution()
    target = tmp_path / "no such folder" / "run.npz"
    with pytest.raises(FileNotFoundError) as error:
        s2.io.save_solution(target, sol)
    assert str(target) in str(error.value) and ".tmp" not in str(error.value)
    folder = tmp_path / "a folder"
    folder.mkdir()
    with pytest.raises(IsADirectoryError) as error:
        s2.io.save_solution(folder, sol)
    assert str(folder) in str(error.value) and ".tmp" not in str(error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a folder"]  # no temporary left


def _writer(path, *, kill):
    """A process that opens an atomic write of `path`, writes part of it, then is killed or waits
    for a line on stdin before finishing."""
    end = "os.kill(os.getpid(), signal.SIGKILL)" if kill else "print('open', flush=True); sys.stdin.readline()"
    script = (
        "import os, signal, sys\n"
        "import s2jax as s2\n"
        f"with s2.io.atomic_write({str(path)!r}) as file:\n"
        f"    file.write(b'partial'); file.flush()\n"
        f"    {end}\n"
    )
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _temporaries(folder, name):
    """The temporary files of writes of `name` (`.<name>.<8 random characters>.….tmp`)."""
    pattern = re.compile(rf"\.{re.escape(name)}\.[a-z0-9_]{{8}}\.(.*\.)?tmp")
    return sorted(p.name for p in folder.iterdir() if pattern.fullmatch(p.name))


def test_the_next_save_removes_temporaries_of_killed_writes(tmp_path):
    """Temporaries of the same target whose writer was killed go; a live writer's, and another
    target's, stay (after 50 kills, 49 temporaries used to stay)."""
    path, other = tmp_path / "run.npz", tmp_path / "run.npz.old"
    killed = [_writer(target, kill=True) for target in (other, path)]
    assert [writer.wait(timeout=120) for writer in killed] == [-9, -9]
    assert len(_temporaries(tmp_path, "run.npz")) == 1 and len(_temporaries(tmp_path, "run.npz.old")) == 1
    # the next killed write removes the first one's temporary, and leaves its own
    again = _writer(path, kill=True)
    assert again.wait(timeout=120) == -9
    left = _temporaries(tmp_path, "run.npz")
    assert len(left) == 1 and left[0].endswith(f".{again.pid}@{socket.gethostname()}.tmp")
    live = _writer(path, kill=False)
    try:
        assert live.stdout.readline() == "open\n"
        sol, _ = _solution()
        s2.io.save_solution(path, sol)
        left = _temporaries(tmp_path, "run.npz")
        assert len(left) == 1 and left[0].endswith(f".{live.pid}@{socket.gethostname()}.tmp")
        assert len(_temporaries(tmp_path, "run.npz.old")) == 1
    finally:
        live.communicate("\n", timeout=120)
    assert live.returncode == 0 and path.read_bytes() == b"partial"  # the live writer finished
    assert _temporaries(tmp_path, "run.npz") == []
