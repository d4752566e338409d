"""`simulate_batch` over several host devices, against `jax.vmap(simulate)` and a Python loop.

The number of host devices is fixed when jax starts, and this process already runs on one, so
the sharded runs happen in one subprocess started with
XLA_FLAGS=--xla_force_host_platform_device_count=4; it prints what the tests below check.
"""

import json
import os
import pathlib
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

import s2jax as s2

dsp = s2.models.double_spherical_pendulum
ROOT = pathlib.Path(__file__).resolve().parent.parent

_SCRIPT = r"""
import gc
import json
import jax
gc.set_threshold(100_000, 50, 1000)  # as conftest.py's workers: 40.8 -> 36.9 s for this script
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec
import s2jax as s2

out = {"devices": jax.device_count()}
def gap(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))

# 1. The implicit VI on the double pendulum of 002 Example 1, params batched (l1 varies):
#    6 members over 4 devices, so 2 members of padding.
dsp = s2.models.double_spherical_pendulum
keys = jax.random.split(jax.random.PRNGKey(0), 6)
q0, w0 = jax.vmap(lambda k: s2.random_state(k, 2))(keys)
lengths = jnp.linspace(8.0, 11.0, 6)
options = dict(dt=0.01, num_steps=40, save_every=10)
axes = {**dict.fromkeys(dsp.paper_params()), "l1": 0}
sol = s2.simulate_batch(dsp.lagrangian, q0, w0, {**dsp.paper_params(), "l1": lengths}, params_axis=axes, **options)
def one(q, w, l1):
    return s2.simulate(dsp.lagrangian, q, w, {**dsp.paper_params(), "l1": l1}, **options)
vmapped = jax.vmap(one)(q0, w0, lengths)
loop = [one(q0[b], w0[b], lengths[b]) for b in range(6)]
out["vi"] = {
    "shape": list(sol.q.shape),
    "codes": np.asarray(sol.result._value).tolist(),
    "vs_vmap": max(gap(sol.q, vmapped.q), gap(sol.omega, vmapped.omega), gap(sol.t, vmapped.t)),
    "vs_loop": max(max(gap(sol.q[b], loop[b].q), gap(sol.omega[b], loop[b].omega)) for b in range(6)),
}
# each device's slice of 2 in chunks of 1 (`lax.map` over the members)
chunked = s2.simulate_batch(dsp.lagrangian, q0, w0, {**dsp.paper_params(), "l1": lengths}, params_axis=axes,
                            chunk_size=1, **options)
out["vi"]["chunked_vs_vmap"] = max(gap(chunked.q, vmapped.q), gap(chunked.omega, vmapped.omega))

# 2. The explicit VI (3.17) on three bodies with diagonal M, 8 members (no padding), shared
#    params; member 1 needs |a| > 1 in (3.17) at its first step, member 5 starts off S².
params = {"m": jnp.array([1.0, 2.0, 0.5]), "g": 9.81}
def lagrangian(q, qdot, p):
    return 0.5 * jnp.sum(p["m"][:, None] * qdot**2) + jnp.sum(p["m"] * p["g"] * q[:, 2])
keys = jax.random.split(jax.random.PRNGKey(1), 8)
q0, w0 = jax.vmap(lambda k: s2.random_state(k, 3))(keys)
w0 = w0.at[1].multiply(200.0)
q0 = q0.at[5].multiply(1.001)
options = dict(dt=0.01, num_steps=20, integrator=s2.ExplicitVariationalIntegrator())
def batch(q0, w0, throw):
    return s2.simulate_batch(lagrangian, q0, w0, params, throw=throw, **options)
sol = batch(q0, w0, False)
good = [0, 2, 3, 4, 6, 7]
loop = {b: s2.simulate(lagrangian, q0[b], w0[b], params, **options) for b in good}
out["explicit"] = {
    "codes": np.asarray(sol.result._value).tolist(),
    "failed_steps": np.asarray(sol.failed_step).tolist(),
    "good_vs_loop": max(max(gap(sol.q[b], loop[b].q), gap(sol.omega[b], loop[b].omega)) for b in good),
    "spec": str(sol.q.sharding.spec),
    "shards": sorted([list(s.data.shape) for s in sol.q.addressable_shards]),
    "shard_devices": len({s.device for s in sol.q.addressable_shards}),
}
q0_new, w0_new = jax.block_until_ready((q0[::-1], w0[::-1]))  # new values, same shapes
compiles = []
def on_event(event, duration, **kwargs):
    if event == "/jax/core/compile/backend_compile_duration":
        compiles.append(event)
jax.monitoring.register_event_duration_secs_listener(on_event)
again = batch(q0_new, w0_new, False)
out["explicit"]["compiles_on_new_values"] = len(compiles)
out["explicit"]["reversed_codes"] = np.asarray(again.result._value).tolist()
for name, call in (
    ("eager_throw", lambda: batch(q0, w0, True)),
    ("jit_throw", lambda: jax.jit(lambda w: batch(q0, w, True).q)(w0)),
):
    try:
        call()
        out[name] = None
    except Exception as error:
        out[name] = f"{type(error).__name__}: {error}"

# 3. Batches the user sharded: arrays on a mesh of `jax.make_mesh` (Explicit axes, its default),
#    and a user's `jax.shard_map` of `jax.vmap(simulate)`; 8 members of 002 Example 1.
from jax.sharding import AxisType, NamedSharding
keys = jax.random.split(jax.random.PRNGKey(2), 8)
q0, w0 = jax.vmap(lambda k: s2.random_state(k, 2))(keys)
options = dict(dt=0.01, num_steps=30, save_every=10)
params = dsp.paper_params()
def one(q, w, throw=True):
    return s2.simulate(dsp.lagrangian, q, w, params, throw=throw, **options).q
reference = jax.vmap(one)(q0, w0)
mesh = jax.make_mesh((4,), ("b",))
on_mesh = [jax.device_put(x, NamedSharding(mesh, PartitionSpec("b"))) for x in (q0, w0)]
own = {"axis_types": str(mesh.axis_types)}
batch = s2.simulate_batch(dsp.lagrangian, *on_mesh, params, **options).q
own["simulate_batch"] = gap(batch, reference)
own["simulate_batch_sharding"] = [list(batch.sharding.mesh.axis_names), str(batch.sharding.spec)]
vmapped = jax.vmap(lambda q, w: one(q, w, throw=False))(*on_mesh)
own["vmap_no_throw"] = gap(vmapped, reference)
own["vmap_no_throw_spec"] = str(vmapped.sharding.spec)
def shard_map(check_vma):
    return jax.shard_map(jax.vmap(one), mesh=mesh, in_specs=PartitionSpec("b"), out_specs=PartitionSpec("b"),
                         check_vma=check_vma)
sharded = jax.jit(shard_map(False))(*on_mesh)
own["shard_map"] = gap(sharded, reference)
own["mixed"] = float(jnp.max(jnp.abs(sharded - batch)))  # one mesh: an operation of JAX's takes both
def depth(l1, check_vma, batched=True):
    run = lambda q, w: s2.simulate(dsp.lagrangian, q, w, {**params, "l1": l1}, **options).q[-1, 1, 2]
    per_device = jax.vmap(run) if batched else lambda q, w: run(q[0], w[0])[None]  # unbatched: a member each
    body = jax.shard_map(per_device, mesh=mesh, in_specs=PartitionSpec("b"), out_specs=PartitionSpec("b"),
                         check_vma=check_vma)
    return jnp.sum(body(*on_mesh))
def depth_alone(l1):
    run = lambda q, w: s2.simulate(dsp.lagrangian, q, w, {**params, "l1": l1}, **options).q[-1, 1, 2]
    return jnp.sum(jax.vmap(run)(q0, w0))
own["shard_map_grad"] = [float(jax.jit(jax.grad(depth), static_argnums=1)(params["l1"], False)),
                         float(jax.grad(depth_alone)(params["l1"]))]
with jax.set_mesh(mesh):  # the mesh in context, as `jax.set_mesh(mesh)` sets it for a whole program
    in_context = s2.simulate_batch(dsp.lagrangian, q0, w0, params, **options).q
    own["in_context"] = gap(in_context, reference)
    own["in_context_sharding"] = [list(in_context.sharding.mesh.axis_names), str(in_context.sharding.spec)]
    for name, call in (
        ("in_context_jit", lambda: jax.jit(lambda q, w: s2.simulate_batch(dsp.lagrangian, q, w, params, **options).q)(
            q0, w0)),
        ("in_context_vmap_throw", lambda: jax.vmap(one)(q0, w0)),
    ):
        try:
            call()
            own[name] = None
        except Exception as error:
            own[name] = f"{type(error).__name__}: {error}"
for name, call in (
    ("vmap_throw", lambda: jax.vmap(one)(*on_mesh)),
    ("shard_map_check_vma", lambda: jax.jit(shard_map(True))(*on_mesh)),
    ("shard_map_check_vma_grad", lambda: jax.grad(depth)(params["l1"], True, False)),
    ("simulate_batch_jit", lambda: jax.jit(lambda q, w: s2.simulate_batch(dsp.lagrangian, q, w, params, **options).q)(
        *on_mesh)),
):
    try:
        call()
        own[name] = None
    except Exception as error:
        own[name] = f"{type(error).__name__}: {error}"
out["own_sharding"] = own
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def four_devices():
    env = {
        **os.environ,
        # Keeps conftest's flags (the optimisation level), adds the four host devices.
        "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_sharded_batch_equals_vmap_and_a_loop_of_simulations(four_devices):
    assert four_devices["devices"] == 4
    vi = four_devices["vi"]
    assert vi["shape"] == [6, 5, 2, 3]  # the 2 members of padding are dropped
    assert vi["codes"] == [0] * 6
    # The same arithmetic per member; XLA may fuse a vmapped slice of 2 differently from one
    # of 6, and the round-off (1e-16) grows on the chaotic pendulum over the 40 steps.
    assert vi["vs_vmap"] < 1e-12
    assert vi["vs_loop"] < 1e-12
    assert vi["chunked_vs_vmap"] < 1e-12


@pytest.mark.slow
def test_batch_is_split_evenly_over_the_devices(four_devices):
    explicit = four_devices["explicit"]
    assert explicit["spec"] in ("P('batch',)", "PartitionSpec('batch',)")  # the repr changed across jax versions
    assert explicit["shard_devices"] == 4
    assert explicit["shards"] == [[2, 21, 3, 3]] * 4
    assert explicit["compiles_on_new_values"] == 0


@pytest.mark.slow
def test_bad_members_are_named_and_spare_the_others(four_devices):
    explicit = four_devices["explicit"]
    codes = explicit["codes"]
    assert codes[1] == s2.RESULTS.step_too_large._value
    assert codes[5] == s2.RESULTS.invalid_initial_state._value
    assert [c for b, c in enumerate(codes) if b not in (1, 5)] == [0] * 6
    assert explicit["failed_steps"][1] == 0 and explicit["failed_steps"][5] == 0
    assert explicit["good_vs_loop"] < 1e-12
    # reversed, the bad members are 6 and 2
    assert [b for b, c in enumerate(explicit["reversed_codes"]) if c] == [2, 6]
    assert four_devices["eager_throw"].startswith("SimulationError: s2jax.simulate (batch index (1,)): step 0 → 1")
    assert four_devices["jit_throw"].startswith("ValueError: simulate_batch with throw=True inside jax.jit")


@pytest.mark.slow
def test_batches_the_user_sharded(four_devices):
    """Arrays sharded over a mesh with Explicit axes (`jax.make_mesh`'s default in this JAX) run
    in `simulate_batch` (its result back on their mesh) and, with `throw=False`, in a user's
    `jax.vmap(simulate)` (the result sharded as they were); a user's `jax.shard_map` of
    `jax.vmap(simulate)` with `check_vma=False` runs and differentiates. Within
    `jax.set_mesh(mesh)`, `simulate_batch` of plain states runs and returns on that mesh. What
    cannot run is refused with what to do instead: the host check of `throw=True` under such a
    `jax.vmap` or in such a context, `check_vma=True` under `jax.vmap` or `jax.grad`, and
    `simulate_batch` inside `jax.jit` on such arrays or in such a context. Each against
    `jax.vmap(simulate)` of the same unsharded states (one device's program, so round-off apart:
    the chaotic pendulum over 30 steps)."""
    own = four_devices["own_sharding"]
    assert "Explicit" in own["axis_types"]
    for key in ("simulate_batch", "vmap_no_throw", "shard_map", "mixed"):
        assert own[key] < 1e-12, (key, own[key])
    assert own["simulate_batch_sharding"] == [["b"], "P('b',)"]  # back on the caller's mesh
    assert own["vmap_no_throw_spec"] in ("P('b',)", "P('b', None, None, None)")
    sharded, alone = own["shard_map_grad"]
    assert abs(alone) > 1e-4
    np.testing.assert_allclose(sharded, alone, rtol=1e-12)
    assert own["vmap_throw"].startswith("ValueError: s2jax checks for failures on the host (throw=True)")
    assert own["shard_map_check_vma"].startswith(
        "ValueError: s2jax.simulate inside jax.shard_map with check_vma=True cannot be batched (jax.vmap)"
    )
    assert own["shard_map_check_vma_grad"].startswith(
        "ValueError: s2jax.simulate inside jax.shard_map with check_vma=True cannot be differentiated"
    )
    assert own["simulate_batch_jit"].startswith("ValueError: simulate_batch inside jax.jit got an array of type")
    # within `jax.set_mesh(mesh)`: plain states, the result on the context's mesh
    assert own["in_context"] < 1e-12
    assert own["in_context_sharding"] == [["b"], "P('b',)"]
    assert own["in_context_jit"].startswith("ValueError: simulate_batch inside jax.jit within a jax.set_mesh context")
    assert own["in_context_vmap_throw"].startswith("ValueError: s2jax checks for failures on the host (throw=True)")


def test_bad_arguments_are_named():
    q0, omega0 = (jnp.asarray(x) for x in dsp.paper_state())
    params = dsp.paper_params()
    batch_q0, batch_omega0 = jnp.stack([q0, q0]), jnp.stack([omega0, omega0])

    def run(q0=batch_q0, omega0=batch_omega0, params=params, **kwargs):
        return s2.simulate_batch(dsp.lagrangian, q0, omega0, params, dt=kwargs.pop("dt", 0.01), num_steps=2, **kwargs)

    with pytest.raises(ValueError, match=r"q0 must have shape \(B, n, 3\)"):
        run(q0=q0, omega0=omega0)
    with pytest.raises(ValueError, match=r"B ≥ 1"):
        run(q0=batch_q0[:0], omega0=batch_omega0[:0])
    with pytest.raises(ValueError, match="omega0 must have the shape of q0"):
        run(omega0=batch_omega0[:1])
    with pytest.raises(ValueError, match=r"params\['l1'\] has params_axis 0.* size 2; got \(3,\)"):
        run(params={**params, "l1": jnp.ones(3)}, params_axis={**dict.fromkeys(params), "l1": 0})
    with pytest.raises(ValueError, match=r"params\['g'\] has params_axis 0.* size 2; got \(\)"):
        run(params_axis=0)
    with pytest.raises(ValueError, match=r"must be None or 0 .* got 1 for params\['g'\]"):
        run(params_axis=1)
    with pytest.raises(ValueError, match="PyTree prefix of params"):
        run(params_axis={"l1": 0})
    with pytest.raises(ValueError, match="dt must be positive"):
        run(dt=-0.01)
    with pytest.raises(ValueError, match="q0 is complex"):
        run(q0=batch_q0.astype(jnp.complex128))


@pytest.mark.slow
def test_one_device_matches_simulate():
    """The same code path on this process's single device (no padding, no split)."""
    q0, omega0 = (np.asarray(x) for x in dsp.paper_state())
    scales = np.array([1.0, 0.5, 2.0])
    params = {**dsp.paper_params(), "l1": jnp.asarray(9.81 * scales)}
    batch = s2.simulate_batch(
        dsp.lagrangian, np.stack([q0] * 3), scales[:, None, None] * omega0, params,
        params_axis={**dict.fromkeys(params), "l1": 0},
        dt=0.01, num_steps=20, save_every=20,
    )
    for b, scale in enumerate(scales):
        alone = s2.simulate(
            dsp.lagrangian, q0, scale * omega0, {**dsp.paper_params(), "l1": 9.81 * scale}, dt=0.01, num_steps=20,
            save_every=20,
        )
        np.testing.assert_allclose(batch.q[b], alone.q, rtol=0, atol=1e-12)


@pytest.mark.slow
def test_chunks_change_nothing_but_the_schedule(compilations):
    """On CPU each device maps its slice in chunks (`chunk_size`): 7 double pendula, l1 per member,
    in chunks of 3 (so 2 members of padding) give what the whole slice and `jax.vmap(simulate)`
    give, and so do their gradients in l1; a member that fails is named by its own index; new
    values do not recompile."""
    keys = jax.random.split(jax.random.PRNGKey(3), 7)
    q0, omega0 = jax.vmap(lambda k: s2.random_state(k, 2))(keys)
    omega0 = omega0.at[5].multiply(300.0)  # member 5: no rotation solves (3.16) at its first step
    lengths = jnp.linspace(8.0, 11.0, 7)
    params = {**dsp.paper_params(), "l1": lengths}
    axes = {**dict.fromkeys(params), "l1": 0}
    options = dict(dt=0.01, num_steps=30, save_every=10, params_axis=axes)

    def run(chunk_size, omega0=omega0, throw=False):
        return s2.simulate_batch(dsp.lagrangian, q0, omega0, params, chunk_size=chunk_size, throw=throw, **options)

    chunked, whole = run(3), run(7)

    def one(q, w, l1):
        return s2.simulate(dsp.lagrangian, q, w, {**dsp.paper_params(), "l1": l1}, dt=0.01, num_steps=30,
                           save_every=10, throw=False)

    vmapped = jax.vmap(one)(q0, omega0, lengths)
    codes = np.asarray(chunked.result._value)
    assert np.flatnonzero(codes).tolist() == [5]
    np.testing.assert_array_equal(codes, np.asarray(whole.result._value))
    np.testing.assert_array_equal(codes, np.asarray(vmapped.result._value))
    for field in ("q", "omega"):
        # The same arithmetic per member; XLA may compile a loop over 3 members whole and one over
        # 7 op by op (`_jit.LOOP_BYTES`), contracting multiply-adds differently: round-off only.
        np.testing.assert_allclose(getattr(chunked, field), getattr(whole, field), rtol=0, atol=1e-12)
        np.testing.assert_allclose(getattr(chunked, field), getattr(vmapped, field), rtol=0, atol=1e-12)
    with pytest.raises(s2.SimulationError, match=r"batch index \(5,\)\): step 0 → 1"):
        run(3, throw=True)

    def height(lengths, chunk_size):  # the members that do not fail, to their last save
        sol = s2.simulate_batch(dsp.lagrangian, q0[:5], omega0[:5], {**params, "l1": lengths}, chunk_size=chunk_size,
                                **options)
        return jnp.sum(sol.q[:, -1, 1, 2])

    chunked_gradient, whole_gradient = (jax.grad(height)(lengths[:5], chunk) for chunk in (2, 5))
    assert np.all(np.abs(np.asarray(chunked_gradient)) > 1e-6)
    np.testing.assert_allclose(chunked_gradient, whole_gradient, rtol=1e-10)
    reversed_omega0 = jax.block_until_ready(omega0[::-1])
    assert compilations(lambda: run(3, omega0=reversed_omega0).q.block_until_ready()) == 0


@pytest.mark.slow
def test_members_step_together_and_a_failure_inside_a_run_is_frozen():
    """On CPU `simulate_batch`'s members step together (`_loop.MEMBERS_AXIS`: a step that every
    member of the vmap took skips the per-member selects). Member 3 (g = 3e4) fails at step 4,
    mid-block, while its chunk-mate goes on: every member equals its own `simulate` run under a
    plain `jax.vmap` (codes, failed steps, q and ω), and member 3's later saves repeat its last
    good state bitwise."""
    q0, omega0 = (jnp.asarray(x) for x in dsp.paper_state())
    scales = jnp.asarray([1.0, 0.9, 1.1, 1.0])
    gravities = jnp.asarray([9.81, 9.81, 9.81, 3e4])
    params = {**dsp.paper_params(), "g": gravities}
    axes = {**dict.fromkeys(params), "g": 0}
    qs, omegas = jnp.broadcast_to(q0, (4, 2, 3)), scales[:, None, None] * omega0[None]
    options = dict(dt=0.01, num_steps=30, save_every=5, throw=False)

    def batch(omegas):
        return s2.simulate_batch(dsp.lagrangian, qs, omegas, params, params_axis=axes, chunk_size=2, **options)

    together = batch(omegas)
    alone = jax.vmap(lambda q, w, g: s2.simulate(dsp.lagrangian, q, w, {**dsp.paper_params(), "g": g}, **options))(
        qs, omegas, gravities
    )
    # the members' loops step together: vmapped, by a `lax.pmin` over them; with the members along
    # the last axis (the default) the same `pmin` is a reduction along that axis (`_members_last`)
    vmapped = jax.make_jaxpr(lambda w: s2.simulate_batch(
        dsp.lagrangian, qs, w, params, params_axis=axes, chunk_size=2, members_last=False, **options
    ))(omegas)
    assert "pmin" in str(vmapped)
    inside_jit = jax.jit(batch)(omegas)  # the same program inside a user's jax.jit
    np.testing.assert_array_equal(inside_jit.result._value, together.result._value)
    np.testing.assert_allclose(inside_jit.q, together.q, rtol=0, atol=1e-12)
    assert np.flatnonzero(np.asarray(together.result._value)).tolist() == [3]
    np.testing.assert_array_equal(together.failed_step, alone.failed_step)
    assert int(together.failed_step[3]) == 4
    np.testing.assert_array_equal(together.result._value, alone.result._value)
    for field in ("q", "omega"):
        np.testing.assert_allclose(getattr(together, field), getattr(alone, field), rtol=0, atol=1e-12)
        frozen = np.asarray(getattr(together, field)[3, 1:])
        np.testing.assert_array_equal(frozen, np.broadcast_to(frozen[0], frozen.shape))


@pytest.mark.slow
def test_a_forced_batch_in_chunks_equals_each_members_simulate():
    """A force that reads ω (linear damping: the VI's velocity update is a Newton solve) through
    `simulate_batch` in chunks of 2, members stepping together, against each member's `simulate`."""
    q0, omega0 = (np.asarray(x) for x in dsp.paper_state())
    scales = np.array([1.0, 0.5, 1.5])
    force = s2.forces.LinearDamping(0.3)
    options = dict(dt=0.01, num_steps=20, save_every=10, force=force)
    batch = s2.simulate_batch(dsp.lagrangian, np.stack([q0] * 3), scales[:, None, None] * omega0[None],
                              dsp.paper_params(), chunk_size=2, **options)
    for b, scale in enumerate(scales):
        alone = s2.simulate(dsp.lagrangian, q0, scale * omega0, dsp.paper_params(), **options)
        np.testing.assert_allclose(batch.q[b], alone.q, rtol=0, atol=1e-12)
        np.testing.assert_allclose(batch.omega[b], alone.omega, rtol=0, atol=1e-12)


def test_default_chunks():
    """The default chunk: on CPU, from `CHUNK_MIN_WORK` body-steps, `CHUNK_BODIES // n` members, at
    most `MAX_CHUNK`, evened out over the slice; a shorter run, or a GPU's slice, is not chunked;
    with the members along the last axis, `MEMBERS_LAST_BODIES // n` members, 16 to `MAX_CHUNK`. Bad values of
    `chunk_size` are refused."""
    from s2jax._batch import CHUNK_BODIES, CHUNK_MIN_WORK, MAX_CHUNK, _chunk
    from s2jax._member_program import MEMBERS_LAST_BODIES

    cpu = Mesh(np.array(jax.devices("cpu")[:1]), ("batch",))
    steps = int(CHUNK_MIN_WORK)  # long enough for any batch below
    assert CHUNK_BODIES // 2 >= MAX_CHUNK == _chunk(None, 1024, cpu, 2, steps)
    assert _chunk(None, 1000, cpu, 2, steps) == 63  # 16 chunks of 63, not 15 of 64 and one of 40
    assert _chunk(None, 1024, cpu, 16, steps) == CHUNK_BODIES // 16
    assert _chunk(None, 10, cpu, 2, steps) == 10  # a slice smaller than a chunk is one chunk
    assert _chunk(None, 10, cpu, 10 * CHUNK_BODIES, steps) == 1
    short = int(CHUNK_MIN_WORK // (1024 * 2)) - 1
    assert _chunk(None, 1024, cpu, 2, short) == 1024  # not worth the extra compilation
    assert _chunk(4, 10, cpu, 2, 1) == 4  # 3 chunks of 4 (two members of padding), as asked
    for bad in (0, -2, 2.0, True):
        with pytest.raises(ValueError, match="chunk_size must be a positive int"):
            _chunk(bad, 10, cpu, 2, steps)
    # with the members along the last axis, chunks of MEMBERS_LAST_BODIES bodies for any run length
    assert _chunk(None, 1024, cpu, 2, 10, members_last=True) == MAX_CHUNK
    assert _chunk(None, 1024, cpu, 16, 10, members_last=True) == MEMBERS_LAST_BODIES // 16 == 32
    assert _chunk(None, 1024, cpu, 100, 10, members_last=True) == 16
    assert _chunk(None, 1000, cpu, 2, 10, members_last=True) == 63
    assert _chunk(None, 10, cpu, 2, 10, members_last=True) == 10
    assert _chunk(4, 10, cpu, 2, 10, members_last=True) == 4


def test_a_batch_of_a_non_2_2_lagrangian_runs_the_general_integrator():
    """simulate_batch leaves the choice of integrator to simulate: a Lagrangian with a term
    linear in q̇ (a rotating frame) runs the general VI, member by member as simulate does."""
    model = s2.models.rotating_spherical_pendulum
    q0, omega0 = (np.asarray(x) for x in model.paper_state())
    scales = np.array([1.0, 0.5])
    batch = s2.simulate_batch(
        model.lagrangian, np.stack([q0] * 2), scales[:, None, None] * omega0, model.paper_params(),
        dt=0.01, num_steps=10, save_every=10,
    )
    assert batch.integrator == "GeneralVariationalIntegrator"
    for b, scale in enumerate(scales):
        alone = s2.simulate(model.lagrangian, q0, scale * omega0, model.paper_params(), dt=0.01, num_steps=10,
                            save_every=10)
        np.testing.assert_allclose(batch.q[b], alone.q, rtol=0, atol=1e-12)


_PROCESS = r"""
import json, sys
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=sys.argv[2], num_processes=2, process_id=int(sys.argv[1]))
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
import s2jax as s2

params = {"m": jnp.array([1.0, 2.0, 0.5]), "g": 9.81}
def lagrangian(q, qdot, p):
    return 0.5 * jnp.sum(p["m"][:, None] * qdot**2) + jnp.sum(p["m"] * p["g"] * q[:, 2])
q0, w0 = jax.vmap(lambda k: s2.random_state(k, 3))(jax.random.split(jax.random.PRNGKey(1), 6))
options = dict(dt=0.01, num_steps=20, integrator=s2.ExplicitVariationalIntegrator())
sol = s2.simulate_batch(lagrangian, q0, w0, params, **options)
whole = multihost_utils.process_allgather(sol.q, tiled=True)
alone = jax.vmap(lambda q, w: s2.simulate(lagrangian, q, w, params, **options).q)(q0, w0)
out = {
    "devices": jax.device_count(),
    "addressable": sol.q.is_fully_addressable,
    "rows": [[s.index[0].start, s.index[0].stop] for s in sol.q.addressable_shards],
    "gap": float(np.max(np.abs(whole - np.asarray(alone)))),
}
try:
    s2.simulate_batch(lagrangian, q0, w0.at[4].multiply(200.0), params, **options)
    out["error"] = None
except s2.SimulationError as error:
    out["error"] = str(error)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_two_processes_with_jax_distributed():
    """The recipe of docs/multi_host.md on one machine: two processes, one CPU device each."""
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        address = f"localhost:{probe.getsockname()[1]}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("XLA_FLAGS", None)
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _PROCESS, str(i), address], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env,
        )
        for i in range(2)
    ]
    outputs = [process.communicate(timeout=600) for process in processes]
    for process, (_, stderr) in zip(processes, outputs):
        assert process.returncode == 0, stderr[-3000:]
    results = [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in outputs]
    assert [r["rows"] for r in results] == [[[0, 3]], [[3, 6]]]
    for result in results:
        assert result["devices"] == 2 and not result["addressable"]
        assert result["gap"] < 1e-13  # the same arithmetic per member as the vmap
        # member 4 ran on process 1; both processes name it
        assert result["error"].startswith("s2jax.simulate (batch index (4,)): step 0 → 1")


_DENSE_SCRIPT = r"""
import json
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import numpy as np
import s2jax as s2

n, batch = 16, 512  # 256 members per device: where a LAPACK factorisation in the loop deadlocked
rng = np.random.default_rng(0)
a = rng.normal(size=(n, n))
params = {"M": jnp.asarray(a @ a.T / n + np.eye(n))}

def lagrangian(q, qdot, params):
    return 0.5 * jnp.einsum("ij,ic,jc->", params["M"], qdot, qdot) + 9.81 * jnp.sum(q[:, 2])

q, omega = s2.random_state(jax.random.PRNGKey(0), n)
scale = jnp.linspace(0.1, 0.5, batch)[:, None, None]
q0, omega0 = jnp.broadcast_to(q, (batch, n, 3)), scale * omega
out = {"devices": jax.device_count()}
for name in ("VariationalIntegrator", "RungeKutta4", "Rattle"):
    integrator = getattr(s2, name)()
    run = dict(dt=1e-3, num_steps=20, save_every=20, integrator=integrator)
    final = s2.simulate_batch(lagrangian, q0, omega0, params, **run).q[:, -1]
    alone = [s2.simulate(lagrangian, q0[i], omega0[i], params, **run).q[-1] for i in (0, batch - 1)]
    out[name] = max(float(jnp.max(jnp.abs(final[i] - x))) for i, x in zip((0, batch - 1), alone))
print(json.dumps(out))
"""


@pytest.mark.slow
def test_a_dense_batch_over_two_host_devices_returns():
    """16 bodies with a dense M (its n × n solves factorised in every step), 512 members over two
    host devices: with LAPACK's Cholesky in the loop this program never returned (jaxlib 0.10.2);
    `_inertia.cholesky` is XLA code. The members equal their own `simulate` runs."""
    env = {
        **os.environ,
        "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run([sys.executable, "-c", _DENSE_SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["devices"] == 2
    for name in ("VariationalIntegrator", "RungeKutta4", "Rattle"):
        # the same arithmetic per member; XLA may fuse a vmapped slice differently (round-off)
        assert out[name] < 1e-12, (name, out[name])
