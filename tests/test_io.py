"""Atomic writes: an interrupted write never leaves a broken file or destroys the previous one,
and gets the permissions of `open`; solutions and their params saved and loaded exactly."""

import collections
import os
import re
import socket
import stat
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
    _assert_identical(loaded_params, params)
    assert metadata == {
        "seed": 3, "note": "e₃ down", "s2jax_version": s2.__version__, "integrator": loaded.integrator
    }
    assert loaded.integrator == sol.integrator
    # Into the structure of params_like, as numpy arrays.
    _, structured, _ = s2.io.load_solution(path, params_like=params)
    assert structured["m"] == 1.3 and str(structured["links"][1]["label"]) == "bob"
    assert type(structured["m"]) is np.ndarray and structured["m"].shape == ()


def _assert_identical(loaded, saved, where="params"):
    """`loaded` is `saved` again: the same containers (dict keys in their order), leaf types, and
    for arrays and numbers the same dtype, shape and bits."""
    assert type(loaded) is type(saved), f"{where}: {type(loaded).__name__}, saved {type(saved).__name__}"
    if isinstance(saved, dict):
        assert list(loaded) == list(saved), where
        for key in saved:
            _assert_identical(loaded[key], saved[key], f"{where}.{key}")
    elif isinstance(saved, list | tuple):
        assert len(loaded) == len(saved), where
        for i, (x, y) in enumerate(zip(loaded, saved, strict=True)):
            _assert_identical(x, y, f"{where}.{i}")
    elif saved is not None:
        x, y = np.asarray(loaded), np.asarray(saved)
        assert (x.dtype, x.shape, x.tobytes()) == (y.dtype, y.shape, y.tobytes()), where


def test_load_solution_names_its_fields(tmp_path):
    sol, params = _solution()
    path = tmp_path / "run.npz"
    s2.io.save_solution(path, sol, params=params, metadata={"seed": 3})
    loaded = s2.io.load_solution(path)
    assert type(loaded) is s2.io.LoadedSolution and loaded._fields == ("solution", "params", "metadata")
    solution, loaded_params, metadata = loaded  # still a tuple
    assert solution is loaded.solution and loaded_params is loaded.params and metadata is loaded.metadata
    np.testing.assert_array_equal(loaded.solution.q, sol.q)
    assert loaded.params["g"] == 9.81 and loaded.metadata["seed"] == 3


_MODELS = sorted(name for name, module in vars(s2.models).items() if hasattr(module, "paper_params"))


def test_every_ready_model_is_round_tripped():
    assert len(_MODELS) == 11 and {"coupled_spherical_pendula", "elastic_rod"} <= set(_MODELS)


@pytest.mark.parametrize("model", _MODELS)
def test_paper_params_round_trip_exactly(tmp_path, model):
    """Each model's paper_params() comes back as it was: the tuple of int pairs `connections`
    (coupled_spherical_pendula) as that tuple, the string `inertia` (elastic_rod) as a str, a
    float as a float, arrays of the same dtype, shape and bits."""
    params = getattr(s2.models, model).paper_params()
    sol, _ = _solution()
    path = tmp_path / "run.npz"
    s2.io.save_solution(path, sol, params=params)
    _assert_identical(s2.io.load_solution(path).params, params)


def test_every_supported_leaf_and_container_round_trips(tmp_path):
    leaves = {
        "bool": True, "int": -(2**63), "float": float("nan"), "complex": 1.5 - 2j, "str": "e₃ ↓",
        "float32 scalar": np.float32(0.1), "bool scalar": np.bool_(False), "string scalar": np.str_("bob"),
        "int8": np.arange(-3, 3, dtype=np.int8).reshape(2, 3), "uint64": np.array([2**64 - 1], np.uint64),
        "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)), "big-endian": np.arange(3, dtype=">f8"),
        "strings": np.array(["a", "bcd"]), "empty": np.zeros((0, 3)), "0-d": np.array(2.5),
        "complex64": np.array([1 + 1j], np.complex64), "int past int64": 2**64 - 1,
    }
    params = {"z": None, "a.key with a dot": [{}, [], ()], "ω": (leaves, [1, (2, "x")]), "jax": jnp.arange(3.0)}
    sol, _ = _solution()
    path = tmp_path / "run.npz"
    s2.io.save_solution(path, sol, params=params)
    loaded = s2.io.load_solution(path).params
    _assert_identical(loaded, {**params, "jax": np.arange(3.0)})  # a JAX array comes back as numpy's
    assert list(loaded) == ["z", "a.key with a dot", "ω", "jax"]  # in their order, not sorted


def test_a_params_leaf_that_cannot_come_back_exactly_is_named(tmp_path):
    sol, _ = _solution()
    path = tmp_path / "run.npz"
    for bad in (object(), b"bytes", 2**64, "ends in NUL\0", jnp.zeros(2, jnp.bfloat16), np.array([1, "a"], object),
                np.datetime64("2024-01-01"), collections.Counter()):
        with pytest.raises(ValueError, match=r"^params\.links\.1\.bad = .* cannot be saved exactly"):
            s2.io.save_solution(path, sol, params={"g": 9.81, "links": [{}, {"bad": bad}]})
        assert not path.exists()


def test_two_params_leaves_with_one_name_are_refused(tmp_path):
    """They used to be saved under one name, the second overwriting the first."""
    sol, _ = _solution()
    path = tmp_path / "run.npz"
    with pytest.raises(ValueError, match=r"several leaves of params are named \['params\.a\.b'\]"):
        s2.io.save_solution(path, sol, params={"a.b": 1.0, "a": {"b": 2.0}})
    assert not path.exists()


Link = collections.namedtuple("Link", ["length", "label"])


def test_params_in_other_containers_load_flat_keyed(tmp_path):
    """A namedtuple (or an equinox Module, …) cannot be described in JSON: its leaves are saved
    without the structure, as in a file of the previous version."""
    sol, _ = _solution()
    path = tmp_path / "run.npz"
    params = {"g": 9.81, "link": Link(np.array([1.0, 2.0]), "bob")}
    s2.io.save_solution(path, sol, params=params)
    with np.load(path) as data:
        assert "params_structure" not in data.files
    flat = s2.io.load_solution(path).params
    assert sorted(flat) == ["params.g", "params.link.label", "params.link.length"]
    np.testing.assert_array_equal(flat["params.link.length"], [1.0, 2.0])
    structured = s2.io.load_solution(path, params_like=params).params
    assert type(structured["link"]) is Link and str(structured["link"].label) == "bob"


def test_a_file_without_the_structure_record_loads_flat_keyed(tmp_path):
    """A file of the previous version (no `params_structure`): params flat-keyed, as it gave them,
    and `params_like` still puts them into its structure."""
    params = s2.models.coupled_spherical_pendula.paper_params()
    sol, _ = _solution()
    path = tmp_path / "run.npz"
    s2.io.save_solution(path, sol, params=params)
    _rewrite(path, params_structure=None)
    with np.load(path) as data:
        assert "params_structure" not in data.files
    flat = s2.io.load_solution(path).params
    assert flat.keys() == s2.io.flatten_params(params).keys() and "params.connections.3.0" in flat
    for name, value in s2.io.flatten_params(params).items():
        assert flat[name].dtype == value.dtype and flat[name].tobytes() == value.tobytes(), name
    structured = s2.io.load_solution(path, params_like=params).params
    assert [[int(i) for i in pair] for pair in structured["connections"]] == [[0, 1], [1, 2], [2, 3], [3, 0]]
    np.testing.assert_array_equal(structured["pivots"], params["pivots"])


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
        ("params structure not JSON", r"is damaged: its params structure does not describe its params"),
        ("params structure names a missing leaf", r"is damaged: its params structure does not describe its params"),
        (
            "params structure misses a leaf",
            r"is damaged: its params structure lacks the saved params \['params\.g', 'params\.links\.0\.length', "
            r"'params\.links\.1\.label'\]",
        ),
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
    elif damage == "pickled member":
        _rewrite(path, q=np.array([{"a": 1}], dtype=object))
    elif damage == "params structure not JSON":
        _rewrite(path, params_structure=np.array('{"dict": '))
    elif damage == "params structure names a missing leaf":
        _rewrite(path, **{"params.m": None})
    else:
        _rewrite(path, params_structure=np.array('{"dict": {"m": {"leaf": "params.m", "kind": "float"}}}'))
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


@pytest.mark.parametrize("umask", [0o022, 0o007])
def test_files_get_the_permissions_of_open(tmp_path, umask):
    """0o666 less the umask, as `open(path, "w")` gives (the temporary file's 0o600 used to stay),
    for a new file and one written over."""
    sol, params = _solution()
    previous = os.umask(umask)
    try:
        with open(tmp_path / "plain.txt", "w"):
            pass
        s2.io.save_solution(tmp_path / "run.npz", sol, params=params)
        (tmp_path / "figure.png").write_bytes(b"old")
        os.chmod(tmp_path / "figure.png", 0o600)
        with s2.io.atomic_write(tmp_path / "figure.png") as file:
            file.write(b"new")
    finally:
        os.umask(previous)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {"plain.txt": 0o666 & ~umask, "run.npz": 0o666 & ~umask, "figure.png": 0o666 & ~umask}


def test_the_umask_is_read_with_and_without_proc(tmp_path):
    """From /proc/self/status where Linux has it; elsewhere set and restored with os.umask."""
    previous = os.umask(0o027)
    try:
        read = s2.io._umask()
        set_and_restored = s2.io._umask(tmp_path / "no status file")
        still = os.umask(0o027)
    finally:
        os.umask(previous)
    assert read == set_and_restored == still == 0o027
