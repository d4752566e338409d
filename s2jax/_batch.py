"""`simulate_batch`: `simulate` over a batch of initial states, sharded over devices.

The members of a batch are independent, so the batch axis is split over a one-axis device
mesh with `jax.shard_map` and each device runs `jax.vmap(simulate)` over its own slice. No
device waits for another: with automatic (`jit`) partitioning of the vmapped loop instead,
the `while_loop` of each Newton solve (002 (3.16)) would stop when every member of the whole
batch has converged, and its condition would be an all-reduce across devices at every
iteration.

On CPU each chunk of members (`_member_program.MEMBERS_LAST_BODIES` bodies, 16 to 64 members) runs
with the members along the last axis of its arrays, through `simulate`'s own batching rule
(`_member_program`, `members_last`): XLA vectorises every operation across them, 2.0–2.5× the
throughput of `jax.vmap` on the double pendulum (docs/batches.md, "The layout of a batch"), and
under `jax.grad` the derivatives are the vmapped batch's. With `members_last=False` (or where a
primitive has no rule in that layout), a long run on CPU maps each device's slice a chunk of
members at a time (`lax.map` of `jax.vmap`, `chunk_size`). A vmapped step works on arrays of
shape (members, n, 3), and every fusion of it streams them through the cache: with the whole
slice of 1024 double pendula a VI step's ~76 fusions run from L3, and its loop is too large for
XLA to compile whole
(`_jit.LOOP_BYTES`). Chunks of `CHUNK_BODIES` bodies stay in L2 and compile whole: 1.12–1.14× the
throughput on the double pendulum, 0.96–1.36× on a 16-link chain (one / two host devices), with the
members stepping together (`_loop.MEMBERS_AXIS`), but ~1 s more compile time, so only from
`CHUNK_MIN_WORK` body-steps (measured: docs/batches.md, "Chunks on CPU").
"""

import contextlib
import functools
import math
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax import lax
from jax.experimental import multihost_utils
from jax.sharding import Mesh, PartitionSpec

from ._adjoint import AbstractAdjoint
from ._custom_types import ArrayLike, Float, Lagrangian, Params, PyTree
from ._errors import error_if, failure_check, raise_if_failed
from ._force import AbstractForce
from ._integrators import AbstractAdaptiveIntegrator, AbstractIntegrator
from ._jit import filter_jit
from ._loop import MEMBERS_AXIS
from ._member_program import chunk_members, forced_members_last, plain_vmap
from ._plan import plan
from ._results import RESULTS
from ._sharding import on_callers_mesh
from ._simulate import simulate
from ._solution import Solution
from ._system import AbstractSystem
from ._validation import trace_floats

_AXIS = "batch"

CHUNK_BODIES = 256
"""On CPU, the bodies (members × n) that a device vmaps at a time, at most `MAX_CHUNK` members: the
fastest chunks measured on the double pendulum (32–64 members) and the 16-link chain (8–32)."""
MAX_CHUNK = 64
CHUNK_MIN_WORK = 1e8
"""On CPU, the body-steps (B × n × num_steps) from which a run is chunked by default: where the
time the chunks save pays for ~1 s of extra compilation (measured break-even ~9·10⁷ on the double
pendulum, ~5·10⁷ on the 16-link chain over two host devices; on one, chunks did not gain there)."""


def simulate_batch(
    lagrangian: Lagrangian,
    q0: Float[ArrayLike, "B n 3"],
    omega0: Float[ArrayLike, "B n 3"],
    params: Params,
    *,
    dt: float | Float[ArrayLike, ""],
    num_steps: int,
    params_axis: PyTree[int | None] = None,
    devices: Sequence[jax.Device] | None = None,
    integrator: AbstractIntegrator | AbstractAdaptiveIntegrator | None = None,
    force: AbstractForce | Callable | None = None,
    save_every: int = 1,
    adjoint: AbstractAdjoint | None = None,
    throw: bool = True,
    chunk_size: int | None = None,
    members_last: bool | None = None,
) -> Solution:
    """`simulate` for each of B initial states, the batch split over `devices`.

    The result is that of `jax.vmap(simulate)` over the leading axis of `q0`, `omega0` (and
    of the array leaves of `params` when `params_axis=0`), computed with the batch sharded
    over a one-axis mesh of `devices` (all of `jax.devices()` by default; under
    `jax.distributed`, the devices of every process). When B is not a multiple of the number
    of devices D, the batch is padded with copies of its first member to the next multiple
    of D, and the padding is dropped from the result and from the failure check.

    **Arguments:**

    - `lagrangian`, `dt`, `num_steps`, `integrator`, `force`, `save_every`, `adjoint`: as
      for `simulate`, the same for every member.
    - `q0`, `omega0`: the initial states, shape (B, n, 3); arrays already sharded over a mesh (one
      of `jax.make_mesh`, `Explicit` axes included) are taken as they lie (docs/batches.md, "Your own
      sharding"); inside `jax.jit`, not those with an `Explicit` sharding in their type.
    - `params`: a PyTree, shared by all members by default.
    - `params_axis`: which leaves of `params` have a leading batch axis of size B, as
      `in_axes` of `jax.vmap`: `None` (shared), `0` (all, Python floats too), or a PyTree
      prefix of `params` with leaves 0 or None, e.g. `{"l1": 0, "l2": None, ...}`.
    - `devices`: the devices to split the batch over, each given an equal share.
    - `chunk_size`: how many members a device batches at a time (the rest of its slice follows in a
      `lax.map`); the result does not depend on it beyond round-off. Default: with the members
      along the last axis, 512 // n members (at least 16, at most 64); else on CPU, for a run of at
      least 10⁸ body-steps (B × n × `num_steps`), 256 // n members (at least 1, at most 64), up to
      1.4× faster for ~1 s more compile time; otherwise, and on a GPU, the whole slice
      (docs/batches.md, "Chunks on CPU"). Each device's slice is padded to a multiple of it.
    - `members_last`: evaluate each chunk with its members along the last axis of every array
      (`s2jax._members_last`, through `simulate`'s batching rule, `s2jax._member_program`), where
      XLA's CPU compiler vectorises across them, instead of `jax.vmap`'s first axis: the same
      results to round-off, 2.0–2.5× the throughput on the double pendulum (docs/batches.md,
      "The layout of a batch"); under `jax.grad` the derivatives are those of the vmapped batch.
      Default (None): on CPU, where every primitive on batched values has a rule there (a dense
      M's LAPACK Cholesky has none: vmapped); `False`: always `jax.vmap`; `True`: members last
      wherever `simulate` can take it (on any platform, whatever falls back).
    - `throw`: raise `SimulationError` naming the batch index and the step of the first
      member that failed; with `throw=False` each member's failure is in its `result`.
      Either way one failing member does not change the others. Inside `jax.jit` or
      `jax.grad` over several devices only `throw=False` is possible (the check would run
      as a host callback, and one that raises stalls the other devices).

    Bad initial states and parameters are checked inside the computation, member by member
    (`RESULTS.invalid_initial_state`, `RESULTS.invalid_parameters`); `simulate`'s checks of
    the form (2.2) of the Lagrangian and of M's diagonal run there too.

    **Returns:** a `Solution` whose every field has a leading batch axis of size B (`t` too,
    as under `jax.vmap`), sharded over `devices` when D divides B; for a `q0` sharded over a mesh
    of the caller's, put back on that mesh, the batch axis sharded as `q0`'s; within a
    `jax.set_mesh` context (the batch run outside it), on the context's mesh, the batch axis
    sharded over all its axes where they divide B, else replicated.
    """
    options = dict(
        num_steps=num_steps, params_axis=params_axis, devices=devices, integrator=integrator, force=force,
        save_every=save_every, adjoint=adjoint, throw=throw, chunk_size=chunk_size, members_last=members_last,
    )
    run = functools.partial(_simulate_batch, lagrangian, **options)
    return on_callers_mesh("simulate_batch", (q0, omega0, params, dt), run)


def _simulate_batch(
    lagrangian, q0, omega0, params, dt, *, num_steps, params_axis, devices, integrator, force, save_every, adjoint,
    throw, chunk_size, members_last,
) -> Solution:
    """`simulate_batch` outside any `jax.set_mesh` context, its results on its own mesh."""
    q0 = jnp.asarray(q0)
    omega0 = jnp.asarray(omega0)
    for label, x in (("q0", q0), ("omega0", omega0), ("dt", dt)):
        if jnp.iscomplexobj(x):
            raise ValueError(f"{label} is complex; the state and step of s2jax are real")
    if not jnp.issubdtype(q0.dtype, jnp.floating):
        q0 = q0.astype(float)
    omega0 = omega0.astype(q0.dtype)
    if q0.ndim != 3 or q0.shape[-1] != 3 or q0.shape[0] == 0:
        raise ValueError(f"q0 must have shape (B, n, 3), B ≥ 1 initial states; got {q0.shape}")
    if omega0.shape != q0.shape:
        raise ValueError(f"omega0 must have the shape of q0, {q0.shape}; got {omega0.shape}")
    batch_size = q0.shape[0]
    dynamic, static, axes = _split_params(params, params_axis, batch_size)
    devices = jax.devices() if devices is None else list(devices)
    mesh = Mesh(np.array(devices), (_AXIS,))
    dt = jnp.asarray(dt, dtype=q0.dtype)
    forced = members_last is True
    members_last = _members_last_applies(members_last, mesh)
    chunk = _chunk(chunk_size, batch_size, mesh, q0.shape[1], num_steps, members_last)
    if dt.shape != ():
        raise ValueError(f"dt must be a scalar; got shape {dt.shape}")
    if not isinstance(dt, jax.core.Tracer) and not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"dt must be positive and finite; got {float(dt)}")
    # The plan is made here, from the first member, where the params are still concrete: inside
    # the batch they are traced, and simulate could no longer check the form (2.2) before compiling.
    first = jtu.tree_map(lambda axis, x: x[0] if axis == 0 else x, axes, dynamic, is_leaf=lambda x: x is None)
    the_plan = plan(lagrangian, q0[0], omega0[0], eqx.combine(first, static), integrator=integrator, force=force)
    member = _Member(the_plan.system, static, num_steps, the_plan.integrator, save_every, adjoint)
    solution = _sharded_vmap(member, mesh, chunk, members_last, forced, axes, q0, omega0, dynamic, dt)
    if throw:
        codes = solution.result._value
        if isinstance(codes, jax.core.Tracer):
            if mesh.size > 1:
                # A host callback that raises inside a program over several devices leaves the
                # others waiting for it at the next collective until XLA aborts the process.
                raise ValueError(
                    "simulate_batch with throw=True inside jax.jit or jax.grad can only check for "
                    f"failures on one device, not {mesh.size}: pass throw=False and check "
                    "`solution.result`, or call simulate_batch outside the transformation."
                )
            # per member, as in `simulate` under vmap: the host check still sees the whole batch
            def checked(s):
                codes = s.result._value
                check = failure_check(s.integrator)
                return error_if(s, codes != RESULTS.successful._value, check, codes, s.failed_step, dt)

            solution = jax.vmap(checked)(solution)
        else:
            raise_if_failed(*_on_every_host(codes, solution.failed_step), dt, integrator=solution.integrator)
    return solution


class _Member(eqx.Module):
    """One member's `simulate` (throw=False) of the planned system and integrator, all options but
    the batched inputs fixed."""

    system: AbstractSystem
    static_params: Params
    num_steps: int
    integrator: AbstractIntegrator | AbstractAdaptiveIntegrator
    save_every: int
    adjoint: AbstractAdjoint | None

    def __call__(self, q0, omega0, dynamic_params, dt) -> Solution:
        return simulate(
            self.system, q0, omega0, eqx.combine(dynamic_params, self.static_params), dt=dt,
            num_steps=self.num_steps, integrator=self.integrator,
            save_every=self.save_every, adjoint=self.adjoint, throw=False,
        )


def _split_params(params, params_axis, batch_size):
    """`(dynamic, static, axes)`: the array leaves of params (floats made arrays, as in
    `simulate`), the rest, and for each dynamic leaf its batch axis, 0 or None."""
    params = jtu.tree_map(trace_floats, params)
    try:
        axes = jtu.tree_map(
            lambda axis, subtree: jtu.tree_map(lambda _: axis, subtree), params_axis, params,
            is_leaf=lambda x: x is None,
        )
    except ValueError as error:
        raise ValueError(f"params_axis must be None, 0 or a PyTree prefix of params; {error}") from None
    dynamic, static = eqx.partition(params, eqx.is_array)
    leaf_axes = jtu.tree_leaves(axes, is_leaf=lambda x: x is None)
    for (path, leaf), axis in zip(jtu.tree_leaves_with_path(params), leaf_axes):
        if axis not in (None, 0):
            raise ValueError(
                f"params_axis must be None or 0 for each leaf of params; got {axis!r} for params{jtu.keystr(path)}"
            )
        if axis == 0 and not (eqx.is_array(leaf) and leaf.shape[:1] == (batch_size,)):
            raise ValueError(
                f"params{jtu.keystr(path)} has params_axis 0, so it needs a leading batch axis of size "
                f"{batch_size}; got {getattr(leaf, 'shape', type(leaf).__name__)}"
            )
    axes = jtu.tree_map(lambda _, axis: axis, dynamic, axes)
    return dynamic, static, axes


def _chunk(chunk_size, batch_size, mesh, num_bodies, num_steps, members_last=False):
    """The members a device batches at a time: `chunk_size`, or the default of `simulate_batch`,
    evened out so that the chunks of a device's slice differ in size by less than one member
    each (1000 members in chunks of at most 64: 16 of 63, padded to 1008, not 16 of 64)."""
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive int or None; got {chunk_size!r}")
    local = math.ceil(batch_size / mesh.size)
    if chunk_size is None and members_last:
        chunk_size = chunk_members(num_bodies) if _on_cpu(mesh) else local
    elif chunk_size is None:
        long_run = batch_size * num_bodies * num_steps >= CHUNK_MIN_WORK
        chunk_size = max(1, min(MAX_CHUNK, CHUNK_BODIES // num_bodies)) if _on_cpu(mesh) and long_run else local
    chunks = math.ceil(local / min(chunk_size, local))
    return math.ceil(local / chunks)


def _on_cpu(mesh) -> bool:
    return all(device.platform == "cpu" for device in mesh.devices.flat)


def _members_last_applies(requested: bool | None, mesh) -> bool:
    """Whether the members run along the last axis (`_member_program`): `requested`, or by default
    on CPU."""
    if requested is not None and not isinstance(requested, bool):
        raise ValueError(f"members_last must be True, False or None; got {requested!r}")
    return _on_cpu(mesh) if requested is None else requested


@filter_jit
def _sharded_vmap(one: _Member, mesh, chunk: int, members_last: bool, forced: bool, axes, q0, omega0, dynamic, dt):
    """`jax.vmap(one)` over the batch, each device of `mesh` mapping its own slice of it, `chunk`
    members at a time, with the members along the last axis where `members_last` (`simulate`'s
    batching rule, `_member_program`), unless, not `forced`, a primitive of the member's program
    has no rule there; `axes` says which leaves of `dynamic` (the array leaves of params) are
    batched too."""
    batch_size = q0.shape[0]
    per_device = math.ceil(math.ceil(batch_size / mesh.size) / chunk) * chunk
    padded = per_device * mesh.size

    def pad(x):
        # copies of member 0: a valid member whenever the batch has one, and dropped below
        return jnp.concatenate([x, jnp.broadcast_to(x[:1], (padded - batch_size, *x.shape[1:]))])

    batched = PartitionSpec(_AXIS)
    shared = PartitionSpec()
    dynamic = jtu.tree_map(lambda x, axis: x if axis is None else pad(x), dynamic, axes)
    params_specs = jtu.tree_map(lambda _, axis: shared if axis is None else batched, dynamic, axes)
    on_cpu = _on_cpu(mesh)

    def local(q0, omega0, dynamic, dt):
        batched_params, shared_params = eqx.partition(dynamic, jtu.tree_map(lambda _, axis: axis == 0, dynamic, axes))

        def member(inputs):
            q0, omega0, batched_params = inputs
            return one(q0, omega0, eqx.combine(batched_params, shared_params), dt)

        inputs = (q0, omega0, batched_params)

        def members(inputs):
            if members_last:  # `simulate`'s batching rule (`_member_program`) puts them last
                with forced_members_last() if forced else contextlib.nullcontext():
                    return jax.vmap(member)(inputs)
            # On CPU the members' loops step together (`_loop.MEMBERS_AXIS`); on a GPU a `lax.cond`
            # on a value reduced over them would wait for the device every step.
            with plain_vmap():
                return jax.vmap(member, axis_name=MEMBERS_AXIS if on_cpu else None)(inputs)

        if chunk == q0.shape[0]:
            return members(inputs)
        chunks = q0.shape[0] // chunk
        solutions = lax.map(members, jtu.tree_map(lambda x: x.reshape(chunks, chunk, *x.shape[1:]), inputs))
        return jtu.tree_map(lambda x: x.reshape(chunks * chunk, *x.shape[2:]), solutions)

    # check_vma=False: the per-device program has no collectives for the check to guard, and
    # the integrators' loops start carries from constants (unsharded) that become per-member
    # (sharded) values, which the check would reject.
    solution = jax.shard_map(
        local, mesh=mesh, in_specs=(batched, batched, params_specs, shared), out_specs=batched, check_vma=False
    )(pad(q0), pad(omega0), dynamic, dt)
    if padded == batch_size:
        return solution
    return jtu.tree_map(lambda x: x[:batch_size], solution)


def _on_every_host(*arrays):
    """The arrays as numpy arrays, gathered from every process when one holds only part."""
    return tuple(
        np.asarray(x) if x.is_fully_addressable else multihost_utils.process_allgather(x, tiled=True)
        for x in arrays
    )
