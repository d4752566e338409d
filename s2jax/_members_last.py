"""A batch with the members along the last axis: a per-member function evaluated for many members.

`jax.vmap` puts the members of a batch along the first (major) axis: a batch of double pendula is
(members, 2, 3), and every operation of a step works on 3-vectors, member after member. XLA's CPU
compiler vectorises along the last (minor) axis, so such operations run at most three lanes wide.
`members_last(fn, *example)` traces `fn` for one member (the shapes of `example`) and evaluates
its jaxpr on arguments that carry the members along a trailing axis, (2, 3, members): every
elementwise operation, reduction and small product is then a loop over the members, which XLA
vectorises. Measured through `simulate_batch` on the double pendulum (1024 members × 1000 steps
in chunks of 64, one and two host devices, docs/batches.md, "The layout of a batch"): against
`jax.vmap` over whole slices and in chunks, 2.1–2.5× the throughput for the VI, 1.8–2.1× for
`Rattle`, 2.4–2.5× for `RungeKutta4`.

Each equation is evaluated by a rule that keeps the members last: elementwise operations (their
member shapes broadcast as the jaxpr's own shapes say), reductions and scans along the member
axes, the structural operations (`broadcast_in_dim`, `reshape`, `transpose`, `slice`,
`concatenate`, `pad`, ...), small `dot_general`s as products and sums across the members, and
the loops and branches (`while`, `scan`, `cond`) with every carry batched: a member whose
`while` condition is false keeps its carry, as under `jax.vmap`. Any other primitive (a
`gather`, a LAPACK call, ...) is batched by `jax.vmap` itself, its members moved to the first
axis and back: the same results, at the price of two transposes. A value no member changes stays
unbatched.

**Forward only.** A `custom_jvp` or `custom_vjp` function (the implicit-function derivative of
Newton's solve) is evaluated through its primal: the result is what the function computes, but
differentiating it would differentiate the iterations. `simulate`'s batching rule
(`_member_program`, which `jax.vmap(simulate)` and `simulate_batch` go through) wraps it in a
`jax.custom_jvp` whose rule differentiates the vmapped program.
"""

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jax import lax
from jax.extend import core as jex_core

_ELEMENTWISE = frozenset({
    "abs", "acos", "add", "add_any", "and", "asin", "atan", "atan2", "cbrt", "ceil", "clamp", "convert_element_type",
    "copy", "cos", "cosh", "div", "eq", "erf", "exp", "exp2", "expm1", "floor", "ge", "gt", "integer_pow",
    "is_finite", "le", "log", "log1p", "logistic", "lt", "max", "min", "mul", "ne", "neg", "nextafter", "not", "or",
    "pow", "reduce_precision", "rem", "round", "rsqrt", "select_n", "sign", "sin", "sinh", "sqrt", "square",
    "stop_gradient", "sub", "tan", "tanh", "xor",
})
# Primitives of one operand whose parameters name member axes only, so the trailing member axis
# passes through them unchanged.
_MEMBER_AXES = frozenset({
    "argmax", "argmin", "cumlogsumexp", "cummax", "cummin", "cumprod", "cumsum", "reduce_and", "reduce_max",
    "reduce_min", "reduce_or", "reduce_prod", "reduce_sum", "rev", "squeeze",
})
_IDENTITY = frozenset({"name", "optimization_barrier"})
_COLLECTIVES = frozenset({"pmax", "pmin", "psum"})
SMALL_PRODUCT = 4096
"""A `dot_general` of two batched operands whose output entries × contracted length is at most
this is computed as products and a sum across the members; a larger one by XLA's `dot` with the
members as a batch dimension (then moved last)."""


class _Value:
    """A value of the evaluation: `array` has the member shape, plus a trailing axis of the
    members where `batched`."""

    __slots__ = ("array", "batched")

    def __init__(self, array, batched: bool):
        self.array, self.batched = array, batched


def members_last(
    fn: Callable, *example, axis_name: str | None = None, members: int | None = None,
    batched: Sequence[bool] | None = None,
) -> Callable:
    """`fn` of one member (its arguments shaped as `example`), evaluated for many members whose
    arguments carry them along a trailing axis: `members_last(fn, *example)(*args)` is
    `jax.vmap(fn, in_axes=-1, out_axes=-1)(*args)` up to round-off (the sums of small products
    may be taken in another order). Every array leaf of `args` is batched, with the same number
    of members, or, with `batched` (a flag per leaf of `example`), the leaves flagged; the others
    are shared by every member and have the shapes of `example`. Every output is batched. The
    returned function's `vmapped` attribute names, once it has been evaluated
    (traced: `jax.eval_shape` will do), the primitives on batched values that no rule took
    (batched by `jax.vmap` between two transposes): where it is not empty the layout may cost
    more than it saves (a dense M's LAPACK Cholesky in every Newton iteration: 1024
    members × 100 steps of a 16-body dense M, VI 1.9 s against 0.49 s vmapped).

    With `axis_name` (and the number of `members`), `fn` is traced with that axis bound, as
    `jax.vmap(..., axis_name=axis_name)` binds it: `lax.pmin`, `lax.pmax` and `lax.psum` over it
    reduce over the members.
    """
    axis_env = [] if axis_name is None else [(axis_name, members)]
    closed, shapes = jax.make_jaxpr(fn, axis_env=axis_env, return_shape=True)(*example)
    out_tree = jtu.tree_structure(shapes)

    def evaluate(*args):
        leaves = jtu.tree_leaves(args)
        flags = [True] * len(leaves) if batched is None else list(batched)
        members = next(x.shape[-1] for x, flag in zip(leaves, flags) if flag)
        inputs = [_Value(x, flag) for x, flag in zip(leaves, flags)]
        _VMAPPED.append(set())
        try:
            outputs = _evaluate(closed.jaxpr, closed.consts, inputs, members)
        finally:
            evaluate.vmapped = frozenset(_VMAPPED.pop())
        return jtu.tree_unflatten(out_tree, [_batch(value, members) for value in outputs])

    evaluate.vmapped = None  # known once evaluated (`jax.eval_shape` evaluates it without computing)
    return evaluate


_VMAPPED: list[set] = []  # per evaluation under way, the primitives batched by `jax.vmap`


def _evaluate(jaxpr, consts: Sequence[Any], inputs: Sequence[_Value], members: int) -> list[_Value]:
    env: dict = {}

    def read(atom):
        return _Value(atom.val, False) if isinstance(atom, jex_core.Literal) else env[atom]

    for var, const in zip(jaxpr.constvars, consts):
        env[var] = const if isinstance(const, _Value) else _Value(const, False)
    env.update(zip(jaxpr.invars, inputs))
    for eqn in jaxpr.eqns:
        outputs = _apply(eqn, [read(atom) for atom in eqn.invars], members)
        env.update(zip(eqn.outvars, outputs))
    return [read(atom) for atom in jaxpr.outvars]


def _batch(value: _Value, members: int):
    """The value's array with the trailing member axis (an unbatched value broadcast to it)."""
    if value.batched:
        return value.array
    array = jnp.asarray(value.array)
    return lax.broadcast_in_dim(array, (*array.shape, members), tuple(range(array.ndim)))


def _to_member_shape(value: _Value, shape: tuple[int, ...], members: int):
    """The value broadcast to `shape` + (members,), its member shape aligned to the right as numpy
    broadcasting aligns it (the jaxprs of JAX's elementwise operations broadcast size-1 axes)."""
    array = jnp.asarray(value.array)
    rank = array.ndim - value.batched
    dims = tuple(range(len(shape) - rank, len(shape))) + ((len(shape),) if value.batched else ())
    target = (*shape, members)
    return array if array.shape == target else lax.broadcast_in_dim(array, target, dims)


def _apply(eqn, inputs: list[_Value], members: int) -> list[_Value]:
    primitive, params = eqn.primitive, eqn.params
    name = primitive.name
    if not any(value.batched for value in inputs) and name not in _COLLECTIVES:
        out = primitive.bind(*[value.array for value in inputs], **primitive.get_bind_params(params))
        return [_Value(x, False) for x in (out if primitive.multiple_results else [out])]
    if name in _IDENTITY:
        return list(inputs)
    if name in _ELEMENTWISE:
        shape = tuple(eqn.outvars[0].aval.shape)
        return [_Value(primitive.bind(*[_to_member_shape(v, shape, members) for v in inputs], **params), True)]
    if name in _MEMBER_AXES:
        return [_Value(primitive.bind(inputs[0].array, **params), True)]
    rule = _RULES.get(name)
    if rule is None:
        return _by_vmap(primitive, params, inputs)
    return rule(eqn, inputs, members)


def _by_vmap(primitive, params, inputs: list[_Value]) -> list[_Value]:
    """Any other primitive, batched by `jax.vmap` over the trailing member axis."""
    if _VMAPPED:
        _VMAPPED[-1].add(primitive.name)
    axes = tuple(-1 if value.batched else None for value in inputs)

    def bind(*arrays):
        return primitive.bind(*arrays, **primitive.get_bind_params(params))

    out = jax.vmap(bind, in_axes=axes, out_axes=-1)(*[value.array for value in inputs])
    return [_Value(x, True) for x in (out if primitive.multiple_results else [out])]


def _broadcast_in_dim(eqn, inputs, members):
    shape, dims = tuple(eqn.params["shape"]), tuple(eqn.params["broadcast_dimensions"])
    return [_Value(lax.broadcast_in_dim(inputs[0].array, (*shape, members), (*dims, len(shape))), True)]


def _reshape(eqn, inputs, members):
    if eqn.params.get("dimensions") is not None:
        return _by_vmap(eqn.primitive, eqn.params, inputs)
    return [_Value(lax.reshape(inputs[0].array, (*eqn.params["new_sizes"], members)), True)]


def _transpose(eqn, inputs, members):
    array = inputs[0].array
    return [_Value(lax.transpose(array, (*eqn.params["permutation"], array.ndim - 1)), True)]


def _slice(eqn, inputs, members):
    strides = eqn.params["strides"]
    return [_Value(lax.slice(
        inputs[0].array, (*eqn.params["start_indices"], 0), (*eqn.params["limit_indices"], members),
        None if strides is None else (*strides, 1),
    ), True)]


def _dynamic_slice(eqn, inputs, members):
    operand, *indices = inputs
    if any(index.batched for index in indices):
        return _by_vmap(eqn.primitive, eqn.params, inputs)
    starts = [index.array for index in indices] + [jnp.zeros((), jnp.asarray(indices[0].array).dtype)]
    return [_Value(lax.dynamic_slice(operand.array, starts, (*eqn.params["slice_sizes"], members)), True)]


def _dynamic_update_slice(eqn, inputs, members):
    operand, update, *indices = inputs
    if any(index.batched for index in indices):
        return _by_vmap(eqn.primitive, eqn.params, inputs)
    starts = [index.array for index in indices] + [jnp.zeros((), jnp.asarray(indices[0].array).dtype)]
    return [_Value(lax.dynamic_update_slice(_batch(operand, members), _batch(update, members), starts), True)]


def _concatenate(eqn, inputs, members):
    return [_Value(lax.concatenate([_batch(v, members) for v in inputs], eqn.params["dimension"]), True)]


def _pad(eqn, inputs, members):
    operand, padding = inputs
    if padding.batched:
        return _by_vmap(eqn.primitive, eqn.params, inputs)
    config = (*eqn.params["padding_config"], (0, 0, 0))
    return [_Value(lax.pad(operand.array, padding.array, config), True)]


def _split(eqn, inputs, members):
    return [_Value(x, True) for x in lax.split(inputs[0].array, eqn.params["sizes"], eqn.params["axis"])]


def _dot_general(eqn, inputs, members):
    """lhs·rhs as in `dot_general`, the members a batch of it: small products as products and a sum
    across the members (elementwise, vectorised over them), large ones by XLA's `dot`."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = eqn.params["dimension_numbers"]
    lhs, rhs = (_batch(v, members) for v in inputs)
    lhs_free = [d for d in range(lhs.ndim - 1) if d not in lhs_contract and d not in lhs_batch]
    rhs_free = [d for d in range(rhs.ndim - 1) if d not in rhs_contract and d not in rhs_batch]
    out_shape = eqn.outvars[0].aval.shape
    contracted = math.prod(lhs.shape[d] for d in lhs_contract)
    if math.prod(out_shape) * contracted > SMALL_PRODUCT:
        numbers = ((lhs_contract, rhs_contract), ((*lhs_batch, lhs.ndim - 1), (*rhs_batch, rhs.ndim - 1)))
        out = lax.dot_general(lhs, rhs, numbers, preferred_element_type=eqn.params.get("preferred_element_type"))
        return [_Value(jnp.moveaxis(out, len(lhs_batch), -1), True)]
    # (batch, lhs free, contracted, members) and (batch, rhs free, contracted, members), then
    # (batch, lhs free, rhs free, contracted, members) by broadcasting, summed over contracted
    left = lax.transpose(lhs, (*lhs_batch, *lhs_free, *lhs_contract, lhs.ndim - 1))
    right = lax.transpose(rhs, (*rhs_batch, *rhs_free, *rhs_contract, rhs.ndim - 1))
    nb, nl, nr = len(lhs_batch), len(lhs_free), len(rhs_free)
    left = left.reshape(*left.shape[:nb + nl], *[1] * nr, *left.shape[nb + nl:])
    right = right.reshape(*right.shape[:nb], *[1] * nl, *right.shape[nb:])
    product = left * right
    axes = tuple(range(nb + nl + nr, nb + nl + nr + len(lhs_contract)))
    out = jnp.sum(product, axis=axes) if axes else product
    return [_Value(out.astype(eqn.outvars[0].aval.dtype), True)]


def _call(eqn, inputs, members):
    """A sub-jaxpr called once: `jit`, `checkpoint` (a forward pass stores nothing anyway), and
    `custom_jvp_call` and `custom_vjp_call` through their primal."""
    sub = eqn.params["jaxpr"] if "jaxpr" in eqn.params else eqn.params["call_jaxpr"]
    if isinstance(sub, jex_core.ClosedJaxpr):
        return _evaluate(sub.jaxpr, sub.consts, inputs, members)
    return _evaluate(sub, (), inputs, members)


def _while(eqn, inputs, members):
    """`while` with every carry batched: the loop runs while any member's condition holds, and a
    member whose condition is false keeps its carry (as under `jax.vmap`)."""
    cond, body = eqn.params["cond_jaxpr"], eqn.params["body_jaxpr"]
    cond_consts, rest = inputs[:eqn.params["cond_nconsts"]], inputs[eqn.params["cond_nconsts"]:]
    body_consts, init = rest[:eqn.params["body_nconsts"]], rest[eqn.params["body_nconsts"]:]

    def holds(carry):
        (going,) = _evaluate(cond.jaxpr, cond.consts, [*cond_consts, *[_Value(x, True) for x in carry]], members)
        return _batch(going, members)

    def step(carry):
        going = holds(carry)
        new = _evaluate(body.jaxpr, body.consts, [*body_consts, *[_Value(x, True) for x in carry]], members)
        kept = []
        for old, value in zip(carry, new):
            value = _batch(value, members)
            kept.append(lax.select(lax.broadcast_in_dim(going, value.shape, (value.ndim - 1,)), value, old))
        return kept

    final = lax.while_loop(lambda carry: jnp.any(holds(carry)), step, [_batch(v, members) for v in init])
    return [_Value(x, True) for x in final]


def _scan(eqn, inputs, members):
    """`scan` with every carry and output batched; the scanned axis stays first."""
    params = eqn.params
    closed, (num_consts, num_carry) = params["jaxpr"], _scan_counts(params)
    consts, init, xs = inputs[:num_consts], inputs[num_consts:num_consts + num_carry], inputs[num_consts + num_carry:]
    xs_batched = [x.batched for x in xs]

    def step(carry, x):
        sliced = [_Value(a, b) for a, b in zip(x, xs_batched)]
        out = _evaluate(closed.jaxpr, closed.consts, [*consts, *[_Value(c, True) for c in carry], *sliced], members)
        return [_batch(v, members) for v in out[:num_carry]], [_batch(v, members) for v in out[num_carry:]]

    carry, ys = lax.scan(
        step, [_batch(v, members) for v in init], [x.array for x in xs], length=params["length"],
        reverse=params["reverse"], unroll=params["unroll"],
    )
    return [_Value(x, True) for x in (*carry, *ys)]


def _scan_counts(params) -> tuple[int, int]:
    """How many of a `scan`'s inputs are constants and carries: the parameters `num_consts` and
    `num_carry` before jax 0.11, the groups of its input tree `ft_in` (consts, carry, xs) since."""
    if "num_consts" in params:
        return params["num_consts"], params["num_carry"]
    consts, carry, _ = params["ft_in"].unpack()
    return len(consts), len(carry)


def _cond(eqn, inputs, members):
    """`cond`: with an unbatched index, the chosen branch; with a batched one, every branch and
    each member's own result (as under `jax.vmap`)."""
    index, operands = inputs[0], inputs[1:]
    branches = eqn.params["branches"]
    if not index.batched:
        batched = [value.batched for value in operands]

        def branch(closed):
            def run(*arrays):
                values = [_Value(a, b) for a, b in zip(arrays, batched)]
                return [_batch(v, members) for v in _evaluate(closed.jaxpr, closed.consts, values, members)]

            return run

        out = lax.switch(index.array, [branch(closed) for closed in branches], *[v.array for v in operands])
        return [_Value(x, True) for x in out]
    results = [
        [_batch(v, members) for v in _evaluate(closed.jaxpr, closed.consts, operands, members)] for closed in branches
    ]
    chosen = []
    for cases in zip(*results):
        which = lax.broadcast_in_dim(index.array, cases[0].shape, (cases[0].ndim - 1,))
        chosen.append(lax.select_n(which, *cases))
    return [_Value(x, True) for x in chosen]


def _over_members(reduce: Callable, repeat: Callable):
    """A collective over the members' axis (the only named axis a member's trace has): the
    reduction along the trailing axis; on an unbatched value, what every member holds alike."""

    def rule(eqn, inputs, members):
        return [
            _Value(reduce(v.array, axis=-1) if v.batched else repeat(v.array, members), False) for v in inputs
        ]

    return rule


def _tile(eqn, inputs, members):
    return [_Value(eqn.primitive.bind(inputs[0].array, reps=(*eqn.params["reps"], 1)), True)]


def _stack(eqn, inputs, members):
    axis = eqn.params["axis"] % eqn.outvars[0].aval.ndim  # among the member axes
    return [_Value(eqn.primitive.bind(*[_batch(v, members) for v in inputs], **{**eqn.params, "axis": axis}), True)]


_RULES = {
    "broadcast_in_dim": _broadcast_in_dim,
    "checkpoint": _call,
    "remat2": _call,
    "stack": _stack,
    "concatenate": _concatenate,
    "cond": _cond,
    "custom_jvp_call": _call,
    "custom_vjp_call": _call,
    "dot_general": _dot_general,
    "dynamic_slice": _dynamic_slice,
    "dynamic_update_slice": _dynamic_update_slice,
    "jit": _call,
    "pad": _pad,
    "pjit": _call,
    "pmax": _over_members(jnp.max, lambda x, _: x),
    "pmin": _over_members(jnp.min, lambda x, _: x),
    "psum": _over_members(jnp.sum, lambda x, members: x * members),
    "reshape": _reshape,
    "scan": _scan,
    "slice": _slice,
    "split": _split,
    "tile": _tile,
    "transpose": _transpose,
    "while": _while,
}
