"""Batches the caller sharded: `simulate_batch` and `control.solve_many` split their members over a
mesh of their own (`jax.shard_map`), and take arrays already sharded over another.

Two things of JAX's sharding-in-types (JAX 0.10.2) stand in the way, and are handled here: an
array sharded over a mesh with `Explicit` axes (`jax.make_mesh`'s default) carries its sharding in
its type, so taking its first member or padding it raises `ShardingTypeError`; and JAX does not
mix arrays of two meshes in one operation, so results left on the batch's mesh would not mix with
the caller's arrays. docs/batches.md, "Your own sharding".
"""

import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec


def auto_axes(x, *, caller: str):
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


def caller_placement(x) -> NamedSharding | None:
    """Where a batch's results go, given its members `x` (leading axis the members): for an array
    sharded over a mesh of the caller's, that mesh with the members' axis sharded as `x`'s; else
    None (the results stay on the batch's own mesh)."""
    sharding = getattr(x, "sharding", None)
    if isinstance(x, jax.core.Tracer) or not isinstance(sharding, NamedSharding):
        return None
    if not isinstance(sharding.mesh, Mesh) or not x.is_fully_addressable:
        return None
    spec = tuple(sharding.spec)
    return NamedSharding(sharding.mesh, PartitionSpec(spec[0] if spec else None))


def place(tree, placement: NamedSharding | None):
    """`tree`'s arrays put on `placement` (`caller_placement`), or `tree` as it is for None."""
    if placement is None:
        return tree
    return jax.tree_util.tree_map(lambda x: jax.device_put(x, placement), tree)
