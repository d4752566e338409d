"""`jax.vmap(simulate)` with the members along the last axis: one member's program as a primitive.

A user's `jax.vmap` of `simulate` batches every operation of the run the way `jax.vmap` does, with
the members along the first axis, where XLA's CPU compiler vectorises over 3-vectors only
(`_members_last`'s docstring). A `jax.vmap` cannot be intercepted by a function: it batches
primitives. So, under a transformation,
`simulate` runs its compiled program as one primitive, `member_program_p`, which carries the
member's program (`MemberProgram`: the traced function and its argument shapes) and has a rule
for each transformation:

- evaluated or lowered unbatched, it is the program itself (the same computation as before);
- differentiated (`jax.jvp`, hence `jax.grad` by linearisation), it is replaced by the JVP of the
  program itself: derivatives see exactly the computation they saw before, with the custom
  derivatives of the Newton solves (implicit differentiation of (3.16)) in place;
- batched on CPU, it is evaluated with the members along the last axis (`_members_last`), in
  chunks of `MEMBERS_LAST_BODIES` bodies, as `simulate_batch` does, where every primitive of
  the program on batched values has a rule there (else, or on another platform, by `jax.vmap`).
  That evaluation drops custom derivatives, so it is wrapped in a `jax.custom_jvp` whose rule is
  the JVP of `jax.vmap` of the program: a `jax.grad` applied after the `jax.vmap` (of a `jax.jit`
  that contains it, say) differentiates the vmapped program, exactly as before, while the values
  come from the members-last evaluation (equal to round-off).

So `jax.vmap(simulate)` gains the members-last layout's throughput without changing what any
transformation computes: on the double pendulum the VI runs 2.5–2.7× faster than vmapped
(docs/batches.md, "`jax.vmap(simulate)`"). `simulate_batch` takes its layout through the same
rule (`plain_vmap` and `forced_members_last` carry its `members_last`).
"""

import contextlib
import functools
import math
import threading
from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jax import lax
from jax.extend import core as jex_core
from jax.interpreters import ad, batching, mlir

from ._jit import compiler_options, filter_jit
from ._loop import MEMBERS_AXIS
from ._members_last import members_last

MEMBERS_LAST_BODIES = 512
"""On CPU with the members along the last axis, the bodies (members × n) evaluated at a time,
between `MIN_CHUNK` and `MAX_CHUNK` members (1024 double pendula × 1000 steps through
`simulate_batch`, one host device: VI 7.2 / 10.9 / 13.7 / 14.0 / 11.6 M steps/s in chunks of
16 / 32 / 64 / 128 / 256 members; 16-link chains, the VI 0.49 / 0.58 / 0.48 / 0.34 and `Rattle`
1.45 / 1.41 / 1.65 / 1.59 in chunks of 16 / 32 / 64 / 128; ad hoc, one process each: the default
integrator's best, 64 and 32 members)."""
MIN_CHUNK, MAX_CHUNK = 16, 64


def chunk_members(num_bodies: int) -> int:
    """The members evaluated at a time with the members last: 512 // n, from 16 to 64."""
    return max(MIN_CHUNK, min(MAX_CHUNK, MEMBERS_LAST_BODIES // num_bodies))


class MemberProgram:
    """One member's program: `fn(*arrays)`, a pytree of arrays, for arrays of the shapes and dtypes
    `avals` (`jax.ShapeDtypeStruct`s), simulating `num_bodies` bodies. Equal (as a primitive
    parameter) to a program made with an equal `key`, which must name everything `fn` computes
    from besides its arguments."""

    def __init__(self, fn: Callable, avals: tuple, num_bodies: int, key):
        self.fn, self.avals, self.num_bodies, self._key = fn, avals, num_bodies, key
        self._hash = hash(key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, MemberProgram) and self._hash == other._hash and self._key == other._key

    def flat(self, *arrays) -> list:
        """`fn`'s output leaves."""
        return jtu.tree_leaves(self.fn(*arrays))

    @functools.cached_property
    def _traced(self):
        return jax.make_jaxpr(self.fn, return_shape=True)(*self.avals)

    @property
    def jaxpr(self) -> jex_core.ClosedJaxpr:
        """The program traced once for one member."""
        return self._traced[0]

    @property
    def out_tree(self):
        return jtu.tree_structure(self._traced[1])

    @functools.cached_property
    def call(self) -> Callable:
        """The traced program as a function of the arrays, returning the output leaves."""
        return jex_core.jaxpr_as_fun(self.jaxpr)

    def __repr__(self) -> str:
        return f"MemberProgram({getattr(self.fn, '__name__', 'program')}, {self.num_bodies} bodies)"


member_program_p = jex_core.Primitive("s2jax_member_program")
member_program_p.multiple_results = True


def _abstract_eval(*avals, program: MemberProgram, jaxpr):
    return program.jaxpr.out_avals


def _impl(*arrays, program: MemberProgram, jaxpr):
    return _compiled(program)(*arrays)


@functools.lru_cache(maxsize=64)
def _compiled(program: MemberProgram) -> Callable:
    return filter_jit(program.call)


def _jvp(primals, tangents, *, program: MemberProgram, jaxpr):
    _check_vma_off("differentiated (jax.grad, jax.jvp)")
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    return jax.jvp(program.call, list(primals), tangents)


def _batched(arrays, dims, *, program: MemberProgram, jaxpr):
    _check_vma_off("batched (jax.vmap)")
    members = next(x.shape[d] for x, d in zip(arrays, dims) if d is not None)
    batched = tuple(d is not None for d in dims)
    # Outside any `jax.jit` (an eager `jax.vmap`) its program is the outermost: compiled with s2jax's options.
    outermost = not any(isinstance(x, jax.core.Tracer) for x in arrays)
    forced = _forced()
    if forced or jax.default_backend() == "cpu":
        run = _members_last_run(program, batched, members, outermost, forced)
        if run is not None:
            outs = run(*[x if d is None else jnp.moveaxis(x, d, -1) for x, d in zip(arrays, dims)])
            return outs, [x.ndim - 1 for x in outs]
    return _vmapped(program, tuple(dims), 0, members)(*arrays), [0] * len(program.jaxpr.out_avals)


def _check_vma_off(transformation: str) -> None:
    """Refuse, with what to do instead, a transformation of `simulate` inside `jax.shard_map` with
    `check_vma=True`: there JAX types each value as varying over the manual mesh axes or not, and
    the program's loops start from constants (invariant) that its steps make varying, which that
    check refuses (deep inside JAX, as an `AssertionError`). Untransformed, the program runs."""
    if jax.config.check_vma and jax.sharding.get_abstract_mesh().manual_axes:
        raise ValueError(
            f"s2jax.simulate inside jax.shard_map with check_vma=True cannot be {transformation} there: its "
            "loops start from constants that its steps make vary over the mesh's axes, which that check "
            "refuses. Pass check_vma=False to jax.shard_map (as s2jax.simulate_batch does; a body without "
            "collectives has nothing for the check to guard), or let s2jax.simulate_batch(..., devices=...) "
            "split the batch (docs/batches.md, 'Your own sharding')."
        )


def _vmapped(program: MemberProgram, in_axes: tuple, out_axes: int, members: int) -> Callable:
    """`jax.vmap` of the program (the members stepping together on CPU, `_loop.MEMBERS_AXIS`)."""
    on_cpu = jax.default_backend() == "cpu"
    return jax.vmap(
        program.flat, in_axes=in_axes, out_axes=out_axes, axis_name=MEMBERS_AXIS if on_cpu else None,
        axis_size=members,
    )


@functools.lru_cache(maxsize=64)
def _members_last_run(
    program: MemberProgram, batched: tuple, members: int, outermost: bool, forced: bool
) -> Callable | None:
    """The program over `members` members along the last axis (of the `batched` arrays), in
    chunks of `chunk_members` on CPU (else all at once), compiled once (with s2jax's XLA options
    where `outermost`); None where, not `forced`, a primitive on batched values has no rule there
    (a dense M's LAPACK Cholesky), which `jax.vmap` then runs faster."""
    on_cpu = jax.default_backend() == "cpu"
    chunk = min(members, chunk_members(program.num_bodies)) if on_cpu else members
    chunks = math.ceil(members / chunk)
    chunk = math.ceil(members / chunks)  # even chunks: 100 members as 2 of 50, not 64 and 36 padded
    padded = chunks * chunk
    example = program.avals
    last = members_last(program.flat, *example, axis_name=MEMBERS_AXIS, members=chunk, batched=batched)

    def forward(*arrays):
        if chunks == 1:
            return last(*arrays)

        def split(x):  # copies of member 0 up to `padded`, as (chunks, ..., chunk)
            x = jnp.concatenate([x, jnp.broadcast_to(x[..., :1], (*x.shape[:-1], padded - members))], axis=-1)
            return jnp.moveaxis(x.reshape(*x.shape[:-1], chunks, chunk), -2, 0)

        def one_chunk(parts):
            parts = iter(parts)
            return last(*[next(parts) if b else x for x, b in zip(arrays, batched)])

        outs = lax.map(one_chunk, [split(x) for x, b in zip(arrays, batched) if b])
        return [jnp.moveaxis(x, 0, -2).reshape(*x.shape[1:-1], padded)[..., :members] for x in outs]

    vmapped = _vmapped(program, tuple(-1 if b else None for b in batched), -1, members)
    run = jax.custom_jvp(forward)
    run.defjvp(lambda primals, tangents: jax.jvp(vmapped, primals, tangents))
    compiled = jax.jit(run, compiler_options=(compiler_options() or None) if outermost else None)
    if not forced:
        # Traced once here, abstractly: the evaluation notes what fell back (`last.vmapped`), and
        # the call that follows reuses this trace.
        jax.eval_shape(compiled, *[
            jax.ShapeDtypeStruct((*a.shape, members) if b else a.shape, a.dtype, weak_type=a.weak_type)
            for a, b in zip(example, batched)
        ])
        if last.vmapped:
            return None
    return compiled


member_program_p.def_impl(_impl)
member_program_p.def_abstract_eval(_abstract_eval)
ad.primitive_jvps[member_program_p] = _jvp
batching.primitive_batchers[member_program_p] = _batched
mlir.register_lowering(
    member_program_p, mlir.lower_fun(lambda *arrays, program, jaxpr: program.call(*arrays), multiple_results=True)
)

_LAYOUT = threading.local()


@contextlib.contextmanager
def _layout(value: str):
    before = getattr(_LAYOUT, "value", None)
    _LAYOUT.value = value
    try:
        yield
    finally:
        _LAYOUT.value = before


def plain_vmap():
    """Within it, `simulate` does not bind `member_program_p`: a `jax.vmap` of it batches the
    program as `jax.vmap` does (`simulate_batch(members_last=False)`)."""
    return _layout("plain")


def forced_members_last():
    """Within it, a batched `member_program_p` runs with the members last even where a primitive
    falls back to `jax.vmap` there, and on any platform (`simulate_batch(members_last=True)`)."""
    return _layout("forced")


def _forced() -> bool:
    return getattr(_LAYOUT, "value", None) == "forced"


def enabled() -> bool:
    """Whether `simulate` runs its program through `member_program_p`: on CPU, or within
    `forced_members_last`; never within `plain_vmap`."""
    value = getattr(_LAYOUT, "value", None)
    return value == "forced" or (value != "plain" and jax.default_backend() == "cpu")


def bind(program: MemberProgram, arrays):
    """The program's output for `arrays`, through the primitive (its jaxpr a parameter too, so that
    a printed jaxpr shows the program)."""
    outs = member_program_p.bind(*arrays, program=program, jaxpr=program.jaxpr)
    return jtu.tree_unflatten(program.out_tree, outs)
