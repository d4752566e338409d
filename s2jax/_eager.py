"""Eager `simulate` calls at the cost of their compiled work: the plan kept per (model, options, shapes).

An eager call checks its input and makes its plan (the form check of (2.2) of 002, the structure
of M) before it runs, often longer than the steps of a small system. `EagerCalls` keeps the last
plan per (model, integrator, force, options, shapes); a call with equal params runs the compiled
program at once, its state checked inside it (`Plan.initial_result`). docs/performance.md, "Calls
from Python", says what is checked when and measures it.
"""

import collections
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.tree_util as jtu
import numpy as np

from ._errors import raise_if_failed
from ._general_system import GeneralLagrangianSystem
from ._jit import compiler_options, trace_state_clean
from ._results import RESULTS, SUCCESSFUL_CODE
from ._solution import Solution
from ._system import AbstractSystem
from ._validation import check_controls, check_initial_state, declared_positive

MAX_ENTRIES = 64
"""How many (model, options, shapes) an `EagerCalls` remembers; the least recently used goes first."""


class _Static:
    """The static half of a call, hashed once: `jax.jit` hashes its static argument on every call
    (an equinox Module's hash walks its fields), and compares it by identity first."""

    __slots__ = ("value", "_hash")

    def __init__(self, value):
        self.value = value
        self._hash = hash(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, _Static) and self._hash == other._hash and bool(self.value == other.value)


class _Entry(NamedTuple):
    objects: tuple  # the model, integrator, force, controls (a policy) and adjoint given: ids in the key stay theirs
    params_leaves: list  # the params as given, to compare the next call's with
    static: _Static  # (the plan's, the adjoint's and the policy's static parts, the params', num_steps, ...)
    arrays: list  # their array leaves, arguments of the compiled program
    result: Any  # the treedef of the `Solution` (its integrator's name in it)


def _kept(leaf):
    """A params leaf as `_same_leaf` compares it later: a numpy array copied (it can change in place)."""
    return leaf.copy() if isinstance(leaf, np.ndarray) else leaf


def _same_leaf(given, kept) -> bool:
    if given is kept:  # never for a numpy array, kept as a copy: an immutable value or the same object
        return True
    if isinstance(given, jax.core.Tracer):
        return False
    if type(given) in (float, int) and type(kept) is type(given):  # the common case, quickly
        return given == kept
    if isinstance(given, (np.ndarray, np.generic, jax.Array, float, int, complex)) and not isinstance(given, bool):
        given, kept = np.asarray(given), np.asarray(kept)
        return given.dtype == kept.dtype and given.shape == kept.shape and bool(np.array_equal(given, kept))
    return type(given) is type(kept) and bool(given == kept)


def _state_array(x, shape=None):
    """`x` if it is a concrete float64 array (of `shape`), else None: the fast path takes no other."""
    if isinstance(x, (np.ndarray, jax.Array)) and not isinstance(x, jax.core.Tracer) and x.dtype == np.float64:
        if shape is None or x.shape == shape:
            return x
    return None


def _integrate_call(static: _Static, arrays: list, q0, omega0, dt, controls) -> list:
    """The leaves of the `Solution`: the call's parts rebuilt from their static leaves and `arrays`
    (flat lists on both sides: jax.jit's dispatch flattens no Module on a call)."""
    from ._simulate import integrate  # the loop's caller; _simulate imports this module

    the_plan, adjoint, policy, params, num_steps, save_every, throw = join_arrays(static, arrays)
    solution = integrate(
        the_plan, adjoint, q0, omega0, params, dt, controls, policy, num_steps, save_every, False, throw
    )
    return jtu.tree_leaves(solution)


_ARRAY = object()  # where a static leaf stands for one of the arrays


def split_arrays(tree) -> tuple[list, _Static]:
    """`(arrays, static)`: the array leaves of `tree`, and the rest with its structure, hashed once
    (a `TypeError` where a part cannot be hashed); `join_arrays(static, arrays)` is `tree` again."""
    leaves, treedef = jtu.tree_flatten(tree)
    arrays = [leaf for leaf in leaves if eqx.is_array(leaf)]
    return arrays, _Static((treedef, tuple(_ARRAY if eqx.is_array(leaf) else leaf for leaf in leaves)))


def join_arrays(static: _Static, arrays):
    """The tree `split_arrays` split into `static` and `arrays` (or arrays in their place)."""
    treedef, static_leaves = static.value
    arrays = iter(arrays)
    return jtu.tree_unflatten(treedef, [next(arrays) if leaf is _ARRAY else leaf for leaf in static_leaves])


class EagerCalls:
    """The last plan per (model, integrator, force, controls, adjoint, options, shapes, params
    structure), and one compiled program per plan.

    `run` makes the call through the program (the first one compiles it); `call` repeats a
    remembered call with equal params, or returns None where it cannot.
    """

    def __init__(self, max_entries: int = MAX_ENTRIES):
        self._entries: collections.OrderedDict = collections.OrderedDict()
        self._max_entries = max_entries
        self._program: Callable | None = None

    def _key(self, model, q0, params, integrator, force, controls, adjoint, num_steps, save_every, throw):
        controls_key = id(controls) if callable(controls) else (None if controls is None else np.shape(controls))
        leaves, treedef = jtu.tree_flatten(params)
        # The model's declaration, a mutable attribute of the function (`s2.positive_parameters`).
        declared = declared_positive(model) if isinstance(model, AbstractSystem) else getattr(
            model, "positive_parameters", ()
        )
        key = (id(model), tuple(declared), id(integrator), id(force), controls_key, id(adjoint), num_steps,
               save_every, throw, q0.shape, treedef)
        return key, leaves

    def _compiled(self):
        if self._program is None:
            self._program = jax.jit(_integrate_call, static_argnums=0, compiler_options=compiler_options() or None)
        return self._program

    def remember(self, model, q0, params, given_params, *, integrator, force, controls, adjoint, num_steps,
                 save_every, throw, the_plan, resolved_adjoint, policy):
        """Keep this call's plan (made by the caller from `given_params`, converted to `params`),
        and return the entry to `run`; None where it is not kept: under a transformation, a
        general Lagrangian (whose inertia is checked at each initial state), or unhashable parts."""
        if not trace_state_clean() or isinstance(the_plan.system, GeneralLagrangianSystem):
            return None
        try:  # a dict of params is not hashable, its treedef is
            arrays, static = split_arrays((the_plan, resolved_adjoint, policy, params, num_steps, save_every, throw))
        except TypeError:  # a part that cannot be hashed (a mutable object closed over): not kept
            return None
        name = type(the_plan.integrator).__name__
        result = jtu.tree_structure(Solution(*[np.zeros(())] * 3, RESULTS.successful, np.zeros(()), name))
        key, params_leaves = self._key(model, q0, given_params, integrator, force, controls, adjoint, num_steps,
                                       save_every, throw)
        params_leaves = [_kept(leaf) for leaf in params_leaves]
        entry = _Entry((model, integrator, force, controls, adjoint), params_leaves, static, arrays, result)
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)
        return entry

    def cache_size(self) -> int:
        """How many programs the calls compiled (one per plan, options and shapes)."""
        return 0 if self._program is None else self._program._cache_size()

    def run(self, entry: _Entry, q0, omega0, dt, controls):
        """The `Solution` of the entry's program from (q0, ω0) with step dt (and `controls`)."""
        return jtu.tree_unflatten(entry.result, self._compiled()(entry.static, entry.arrays, q0, omega0, dt, controls))

    def call(self, model, q0, omega0, params, dt, *, integrator, force, controls, adjoint, num_steps, save_every,
             throw, progress):
        """The `Solution` of a call equal to a remembered one but for (q0, ω0, dt, controls), or None.

        The state, dt and controls are checked inside the program (`Plan.initial_result`); a
        failure there is raised as the eager checks raise it (their `ValueError`, naming the
        body), or as the `SimulationError` of a failed step where `throw`.
        """
        if progress or not trace_state_clean():
            return None
        q0 = _state_array(q0)
        if q0 is None or q0.ndim != 2 or _state_array(omega0, q0.shape) is None:
            return None
        if isinstance(dt, (float, int)) and not isinstance(dt, bool):
            dt = np.float64(dt)
        elif _state_array(dt, ()) is None:
            return None
        if controls is not None and not callable(controls):
            if _state_array(controls) is None or not controls.ndim or controls.shape[0] != num_steps:
                return None
        key, leaves = self._key(model, q0, params, integrator, force, controls, adjoint, num_steps, save_every, throw)
        entry = self._entries.get(key)
        if entry is None or len(leaves) != len(entry.params_leaves):
            return None
        if not all(_same_leaf(a, b) for a, b in zip(leaves, entry.params_leaves)):
            return None
        self._entries.move_to_end(key)
        solution = self.run(entry, q0, omega0, dt, None if callable(controls) else controls)
        code = solution.result._value.item()  # on the host: `item` is the cheapest read of a scalar
        if code != SUCCESSFUL_CODE:
            if code == RESULTS.invalid_initial_state._value:
                check_initial_state(q0, omega0, dt)  # raises the eager check's ValueError
            elif code == RESULTS.invalid_controls._value:
                check_controls(controls, num_steps)
            if throw:
                raise_if_failed(code, solution.failed_step, dt, integrator=solution.integrator)
        return solution
