"""Batches the caller sharded: `simulate_batch` and `control.solve_many` split their members over a
mesh of their own (`jax.shard_map`), and take arrays already sharded over another.

Three things of JAX's sharding-in-types (JAX 0.10.2) stand in the way, and are handled here: an
array sharded over a mesh with `Explicit` axes (`jax.make_mesh`'s default) carries its sharding in
its type, so taking its first member or padding it raises `ShardingTypeError`; JAX does not mix
arrays of two meshes in one operation, so results left on the batch's mesh would not mix with the
caller's arrays; and inside a `jax.set_mesh` context `jax.shard_map` takes only the context's mesh.
docs/batches.md, "Your own sharding".
"""

import contextlib
import functools
from collections.abc import Callable

import jax
import jax.tree_util as jtu
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from ._jit import trace_state_clean


def on_callers_mesh(caller: str, arrays: tuple, run: Callable):
    """`run(*arrays)` for a batch whose members lead `arrays[0]`, as the caller sharded it: arrays
    over a mesh with `Explicit` axes taken as they lie (`_auto_axes`), the batch run outside any
    `jax.set_mesh` context (`_outside_mesh_context`), and its result put back where the caller's
    arrays are: on `arrays[0]`'s mesh, the members' axis sharded as there; else, in a context, on
    the context's mesh, the members' axis sharded over all its axes where they divide B, else
    replicated; else left on the batch's own mesh. `caller` names the entry point in errors."""
    placement = _caller_placement(arrays[0])
    with _outside_mesh_context(caller) as context:
        result = run(*jtu.tree_map(functools.partial(_auto_axes, caller=caller), arrays))
    if placement is None and context is not None:
        batch_size = jtu.tree_leaves(result)[0].shape[0]
        axes = context.axis_names if batch_size % context.size == 0 else None
        placement = NamedSharding(context, PartitionSpec(axes))
    if placement is None:
        return result
    return jtu.tree_map(lambda x: jax.device_put(x, placement), result)


def _auto_axes(x, *, caller: str):
    """`x`, or where it is an array sharded over a mesh with `Explicit` axes, the same array over
    the same devices with those axes `Auto` (its sharding no longer in its type). Inside
    `jax.jit` such an array cannot be converted: a `ValueError` from `caller` says what to do."""
    if isinstance(x, jax.core.Tracer):
        typed = getattr(jax.typeof(x), "sharding", None)
        if isinstance(typed, NamedSharding) and typed.mesh.explicit_axes:
            raise ValueError(
                f"{caller} inside jax.jit got an array of type {jax.typeof(x)}, sharded over the Explicit axes "
                f"{typed.mesh.explicit_axes} of a mesh; it splits the batch over its own mesh (`devices`). Call "
                "it outside jax.jit (it compiles itself), or make the mesh with "
                "axis_types=(jax.sharding.AxisType.Auto,) (docs/batches.md, 'Your own sharding')."
            )
        return x
    sharding = getattr(x, "sharding", None)
    if not isinstance(sharding, NamedSharding):
        return x
    mesh = sharding.mesh
    if not isinstance(mesh, Mesh) or AxisType.Explicit not in mesh.axis_types:
        return x
    auto = Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))
    return jax.device_put(x, NamedSharding(auto, sharding.spec))


def _caller_placement(x) -> NamedSharding | None:
    """For members `x` sharded over a mesh of the caller's: that mesh, the members' (leading) axis
    sharded as `x`'s; else None."""
    sharding = getattr(x, "sharding", None)
    if isinstance(x, jax.core.Tracer) or not isinstance(sharding, NamedSharding):
        return None
    if not isinstance(sharding.mesh, Mesh) or not x.is_fully_addressable:
        return None
    spec = tuple(sharding.spec)
    return NamedSharding(sharding.mesh, PartitionSpec(spec[0] if spec else None))


@contextlib.contextmanager
def _outside_mesh_context(caller: str):
    """Leave the caller's `jax.set_mesh` context, if any (from Python only: a context cannot be
    left inside `jax.jit`, where `caller` raises a `ValueError` saying what to do instead). Yields
    the context's mesh, or None outside a context."""
    if jax.sharding.get_abstract_mesh().empty:
        yield None
        return
    if not trace_state_clean():
        raise ValueError(
            f"{caller} inside jax.jit within a jax.set_mesh context: it splits the batch over a mesh of its "
            "own, which jax.shard_map refuses there. Call it outside jax.jit (it compiles itself), or run "
            "jax.shard_map(jax.vmap(s2jax.simulate), ..., check_vma=False) over your mesh (docs/batches.md, "
            "'Your own sharding')."
        )
    mesh = jax.sharding.get_mesh()
    with jax.set_mesh(None):
        yield mesh
