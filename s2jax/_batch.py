"""`simulate_batch`: `simulate` over a batch of initial states, sharded over devices.

The members of a batch are independent, so the batch axis is split over a one-axis device
mesh with `jax.shard_map` and each device runs `jax.vmap(simulate)` over its own slice. No
device waits for another: with automatic (`jit`) partitioning of the vmapped loop instead,
the `while_loop` of each Newton solve (002 (3.16)) would stop when every member of the whole
batch has converged, and its condition would be an all-reduce across devices at every
iteration.
"""

import functools
import math
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, PartitionSpec

from ._adjoint import AbstractAdjoint
from ._custom_types import ArrayLike, Float, Lagrangian, Params, PyTree
from ._errors import error_if, raise_if_failed
from ._force import AbstractForce
from ._integrators import AbstractAdaptiveIntegrator, AbstractIntegrator
from ._jit import filter_jit
from ._plan import plan
from ._results import RESULTS
from ._simulate import simulate
from ._solution import Solution
from ._system import AbstractSystem
from ._validation import trace_floats

_AXIS = "batch"


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
    - `q0`, `omega0`: the initial states, shape (B, n, 3).
    - `params`: a PyTree, shared by all members by default.
    - `params_axis`: which leaves of `params` have a leading batch axis of size B, as
      `in_axes` of `jax.vmap`: `None` (shared), `0` (all, Python floats too), or a PyTree
      prefix of `params` with leaves 0 or None, e.g. `{"l1": 0, "l2": None, ...}`.
    - `devices`: the devices to split the batch over, each given an equal share.
    - `throw`: raise `SimulationError` naming the batch index and the step of the first
      member that failed; with `throw=False` each member's failure is in its `result`.
      Either way one failing member does not change the others. Inside `jax.jit` or
      `jax.grad` over several devices only `throw=False` is possible (the check would run
      as a host callback, and one that raises stalls the other devices).

    Bad initial states and parameters are checked inside the computation, member by member
    (`RESULTS.invalid_initial_state`, `RESULTS.invalid_parameters`); `simulate`'s checks of
    the form (2.2) of the Lagrangian and of M's diagonal run there too.

    **Returns:** a `Solution` whose every field has a leading batch axis of size B (`t` too,
    as under `jax.vmap`), sharded over `devices` when D divides B.
    """
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
    if dt.shape != ():
        raise ValueError(f"dt must be a scalar; got shape {dt.shape}")
    if not isinstance(dt, jax.core.Tracer) and not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"dt must be positive and finite; got {float(dt)}")
    # The plan is made here, from the first member, where the params are still concrete: inside
    # the batch they are traced, and simulate could no longer check the form (2.2) before compiling.
    first = jtu.tree_map(lambda axis, x: x[0] if axis == 0 else x, axes, dynamic, is_leaf=lambda x: x is None)
    the_plan = plan(lagrangian, q0[0], omega0[0], eqx.combine(first, static), integrator=integrator, force=force)
    member = _Member(the_plan.system, static, num_steps, the_plan.integrator, save_every, adjoint)
    solution = _sharded_vmap(member, mesh, axes, q0, omega0, dynamic, dt)
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
                check = functools.partial(raise_if_failed, integrator=s.integrator)
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


@filter_jit
def _sharded_vmap(one: _Member, mesh, axes, q0, omega0, dynamic, dt):
    """`jax.vmap(one)` over the batch, each device of `mesh` mapping its own slice of it; `axes`
    says which leaves of `dynamic` (the array leaves of params) are batched too."""
    batch_size = q0.shape[0]
    padded = math.ceil(batch_size / mesh.size) * mesh.size

    def pad(x):
        # copies of member 0: a valid member whenever the batch has one, and dropped below
        return jnp.concatenate([x, jnp.broadcast_to(x[:1], (padded - batch_size, *x.shape[1:]))])

    batched = PartitionSpec(_AXIS)
    shared = PartitionSpec()
    dynamic = jtu.tree_map(lambda x, axis: x if axis is None else pad(x), dynamic, axes)
    params_specs = jtu.tree_map(lambda _, axis: shared if axis is None else batched, dynamic, axes)
    local = jax.vmap(one, in_axes=(0, 0, axes, None))
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
