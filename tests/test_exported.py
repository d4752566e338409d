"""`_exported`: s2jax's own programs stored with their tracing, so that a later `python -m s2jax`
calls them without tracing the solver again."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import s2jax as s2
from s2jax import _exported
from s2jax._exported import exported_programs
from s2jax._jit import filter_jit
from s2jax.models import spherical_pendulum as pendulum

PARAMS = {"m": 1.0, "r": 1.0, "g": 9.81}
Q0, OMEGA0 = np.array([[0.6, 0.0, 0.8]]), np.zeros((1, 3))


class _Count:
    """Calls counted. An object without value equality: part of a program's key by its type alone,
    so that counting does not change the key (a list read as a global would: by its items)."""

    def __init__(self):
        self.calls = 0

    def add(self, *args):
        self.calls += 1


TRACES = _Count()  # traces of `_problem`'s terminal cost


def _problem(target, weight=100.0):
    target = jnp.asarray(target)

    def terminal(q, omega):
        TRACES.add()
        return weight * jnp.sum((q - target) ** 2) + jnp.sum(omega**2)

    return s2.control.Problem(
        pendulum.lagrangian, PARAMS, s2.forces.PivotTorque(0), 0.02, 20,
        running_cost=lambda t, q, omega, u: jnp.sum(u**2), terminal_cost=terminal, fidelity=None,
    )


def _solve(target, weight=100.0):
    return s2.control.solve(_problem(target, weight), Q0, OMEGA0, solver=s2.control.ILQR())


@pytest.fixture
def later_process(monkeypatch):
    """`later_process()`: forget the programs this process holds, as a new process starts."""
    return lambda: monkeypatch.setattr(_exported, "_PROGRAMS", {})


@pytest.mark.slow
def test_a_later_process_runs_the_stored_programs_untraced(tmp_path, later_process):
    """A solve stores its two programs (the iterations and the solution); a later process calls
    them without tracing the problem's costs, and every output is the same bits as a solve
    without the context."""
    target = [[0.0, 0.6, 0.8]]
    plain = _solve(target)
    with exported_programs(tmp_path, "test"):
        first = _solve(target)
    stored = sorted(tmp_path.iterdir())
    assert len(stored) == 2, stored
    later_process()
    before = TRACES.calls
    with exported_programs(tmp_path, "test"):
        again = _solve(target)
    assert TRACES.calls == before  # neither program traced the terminal cost: both were loaded
    assert sorted(tmp_path.iterdir()) == stored  # nothing new stored
    for solution in (first, again):
        assert jax.tree.structure(solution) == jax.tree.structure(plain)
        for ours, theirs in zip(jax.tree.leaves(solution), jax.tree.leaves(plain)):
            np.testing.assert_array_equal(ours, theirs)


@pytest.mark.slow
def test_a_closure_of_another_value_is_another_program(tmp_path, later_process):
    """A number a cost closes over is a constant of the traced program: problems that differ
    only in it are keyed apart, each solve storing its own programs and getting the optimum it
    gets without the context. So is an array it closes over, though `closure_converted` makes it
    an argument of the programs: the key reads closures by value, never asking what the trace
    would make of them."""
    target = [[0.0, 0.6, 0.8]]
    with exported_programs(tmp_path, "test"):
        first = _solve(target, 100.0)
        later_process()
        second = _solve(target, 1.0)
        assert len(list(tmp_path.iterdir())) == 4
        later_process()
        third = _solve([[0.6, 0.0, 0.8]], 1.0)
        assert len(list(tmp_path.iterdir())) == 6
    np.testing.assert_array_equal(second.controls, _solve(target, 1.0).controls)
    np.testing.assert_array_equal(third.controls, _solve([[0.6, 0.0, 0.8]], 1.0).controls)
    assert float(jnp.max(jnp.abs(first.controls - second.controls))) > 1e-3
    assert float(jnp.max(jnp.abs(third.controls - second.controls))) > 1e-3


def test_a_program_that_cannot_be_exported_runs_as_usual_and_is_not_tried_again(tmp_path, later_process, monkeypatch):
    """A host callback cannot be stored: the call runs as it would without the context, the file
    says so, and a later process runs it as usual without trying to export it again; a stored
    file that cannot be read is exported and written again."""
    seen = _Count()

    @filter_jit
    def with_callback(x):
        jax.debug.callback(seen.add, x)
        return 2.0 * x

    @filter_jit
    def doubled(x):
        return 2.0 * x

    x = jnp.arange(3.0)
    with exported_programs(tmp_path, "test"):
        np.testing.assert_array_equal(with_callback(x), 2.0 * x)
        (marker,) = tmp_path.iterdir()
        later_process()
        monkeypatch.setattr(_exported, "_export", lambda *args: pytest.fail("exported again"))
        np.testing.assert_array_equal(with_callback(x), 2.0 * x)
        assert seen.calls == 2 and sorted(tmp_path.iterdir()) == [marker]
        monkeypatch.undo()

        np.testing.assert_array_equal(doubled(x), 2.0 * x)
        (program,) = set(tmp_path.iterdir()) - {marker}
        program.write_bytes(b"not a program")
        later_process()
        np.testing.assert_array_equal(doubled(x), 2.0 * x)
        assert program.read_bytes() != b"not a program"


def test_only_outermost_calls_and_only_within_the_context(tmp_path):
    """Under a transformation (here `jax.grad`) and outside the context nothing is stored."""

    @filter_jit
    def square(x):
        return x**2

    assert float(square(3.0)) == 9.0
    with exported_programs(tmp_path, "test"):
        assert float(jax.grad(lambda x: square(x))(3.0)) == 6.0
    assert list(tmp_path.iterdir()) == []


def test_static_values_are_described_by_value():
    """The key sees numbers, arrays and closures by value, not by object identity."""

    def closing_over(value):
        return lambda x: x + value

    describe = _exported._describe
    assert describe(closing_over(1.0)) == describe(closing_over(1.0))
    assert describe(closing_over(1.0)) != describe(closing_over(2.0))
    assert describe(closing_over(np.ones(3))) != describe(closing_over(np.zeros(3)))
    assert describe({"b": 1, "a": (2, None)}) == describe({"a": (2, None), "b": 1})
    assert " at 0x" not in describe(object())


def test_a_key_does_not_depend_on_string_hashing():
    """Sets of strings (frozensets a function reads as globals) are described in one order in
    every process, whatever `PYTHONHASHSEED`: else a later process would never find a program."""
    script = (
        "from s2jax._exported import _describe; "
        "print(_describe(frozenset({'rsqrt', 'sin', 'cos', 'exp', 'log', 'tanh'})))"
    )
    described = {
        subprocess.run(
            [sys.executable, "-c", script], env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True, text=True, check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(described) == 1, described


def test_a_folder_that_cannot_be_made_turns_it_off(tmp_path):
    """A cache folder that cannot be written (here a file in the way) leaves the calls as usual:
    the command line must not fail for it."""
    blocker = tmp_path / "exported"
    blocker.write_text("")

    @filter_jit
    def doubled(x):
        return 2.0 * x

    with exported_programs(blocker, "test") as folder:
        assert folder is None and not _exported.active()
        np.testing.assert_array_equal(doubled(jnp.arange(3.0)), 2.0 * jnp.arange(3.0))


_TWO_DEVICES = """
import jax, jax.numpy as jnp, numpy as np, pathlib, pickle, sys
from jax.sharding import Mesh, PartitionSpec as P
from s2jax._exported import exported_programs
from s2jax._jit import filter_jit

@filter_jit
def spread(x):
    mesh = Mesh(np.array(jax.devices()), ("i",))
    return jax.shard_map(lambda y: 2.0 * y, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x)

folder = pathlib.Path(sys.argv[1])
with exported_programs(folder, "test"):
    for _ in range(2):
        assert np.array_equal(spread(jnp.arange(4.0)), 2.0 * np.arange(4.0))
(stored,) = folder.iterdir()
print(len(jax.devices()), pickle.loads(stored.read_bytes())["program"] is None)
"""


def test_a_program_over_several_devices_runs_as_usual(tmp_path):
    """A program spanning a mesh of two host devices (`solve_many`'s, on two devices) is not
    stored (a stored program is called on one device): it runs as usual, marked so."""
    done = subprocess.run(
        [sys.executable, "-c", _TWO_DEVICES, str(tmp_path)], capture_output=True, text=True, check=True,
        env={**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2"},
    )
    assert done.stdout.split() == ["2", "True"], done.stdout
