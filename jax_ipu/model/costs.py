"""Cost rules: one table entry per op class giving flops, bytes, compute/exchange cycles, syncs.

Elementwise chains are fused into their last op (as Poplar fuses map expressions)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from jax_ipu.model.collectives import plan_collective
from jax_ipu.model.ir import Op, TensorType
from jax_ipu.model.mapping import tiles_used
from jax_ipu.model.matmul import plan_matmul
from jax_ipu.model.targets import (
    ACCUMULATOR_BYTES,
    DIVIDE_CYCLES_PER_VECTOR,
    INDEX_CYCLES_PER_ELEMENT,
    SIMPLE_CYCLES_PER_VECTOR,
    TRANSCENDENTAL_CYCLES_PER_VECTOR,
    VECTOR_BYTES,
    VERTEX_OVERHEAD_CYCLES,
    Target,
)

_TRANSCENDENTAL = {
    "exponential", "exponential_minus_one", "log", "log_plus_one", "logistic", "tanh", "sine",
    "cosine", "tan", "sqrt", "rsqrt", "cbrt", "power", "atan2", "erf", "erf_inv", "lgamma",
    "digamma", "acos", "asin", "atan", "acosh", "asinh", "atanh", "cosh", "sinh", "bessel_i1e",
    "polygamma", "zeta", "igamma", "igammac",
}
_DIVIDE = {"divide", "remainder"}
_SIMPLE = {
    "add", "subtract", "multiply", "maximum", "minimum", "and", "or", "xor", "not", "negate",
    "abs", "sign", "floor", "ceil", "round_nearest_afz", "round_nearest_even", "compare",
    "select", "clamp", "is_finite", "shift_left", "shift_right_arithmetic",
    "shift_right_logical", "popcnt", "count_leading_zeros", "reduce_precision", "real", "imag",
    "complex", "iota", "next_after", "is_inf", "is_neg_inf", "is_pos_inf", "square",
}

OP_CLASSES: dict[str, str] = {
    **{k: "elementwise" for k in _TRANSCENDENTAL | _DIVIDE | _SIMPLE},
    "convert": "conversion", "bitcast_convert": "free",
    "broadcast_in_dim": "broadcast", "broadcast": "broadcast",
    "reduce": "reduction", "reduce_window": "window", "select_and_scatter": "window",
    "dot_general": "dot", "dot": "dot", "convolution": "conv",
    "transpose": "rearrange", "copy": "rearrange", "pad": "rearrange", "reverse": "rearrange",
    "slice": "slice", "dynamic_slice": "slice", "dynamic_update_slice": "slice",
    "concatenate": "concat", "gather": "gather", "scatter": "scatter", "sort": "sort",
    "while": "control", "case": "control", "if": "control", "manual_computation": "control",
    "constant": "constant",
    "reshape": "free", "get_tuple_element": "free", "tuple": "free",
    "optimization_barrier": "free", "after_all": "free", "create_token": "free",
    "replica_id": "free", "partition_id": "free", "get_dimension_size": "free",
    "return": "free",  # sdy.return ends a shard_map body (stablehlo.return is read away)
    "custom_call": "custom_call", "infeed": "host", "outfeed": "host", "send": "host",
    "recv": "host",
    "all_reduce": "collective", "all_gather": "collective", "reduce_scatter": "collective",
    "all_to_all": "collective", "collective_permute": "collective",
    "collective_broadcast": "collective",
    "rng_bit_generator": "random", "rng": "random",
}
# Classes whose ops Poplar folds into the consuming elementwise expression.
FUSABLE = frozenset({"elementwise", "conversion", "broadcast"})
# Classes whose results are views of an operand, not new memory.
ALIASING = frozenset({"free"})


def op_class(op: Op) -> str:
    """The cost class of an op; unknown ops fall back to 'unmodelled'."""
    return OP_CLASSES.get(op.kind, "unmodelled")


@dataclass
class OpCost:
    """What one op (with the ops fused into it) costs, per execution."""

    flops: int = 0
    bytes_accessed: int = 0
    compute_cycles: float = 0.0
    exchange_cycles: float = 0.0
    syncs: int = 0
    tiles: int = 0
    workspace_bytes_per_tile: int = 0
    host_bytes: int = 0
    link_bytes: int = 0  # bytes one IPU sends to other IPUs
    unmodelled: bool = False
    note: str = ""


def _vector_elems(dtype: str) -> int:
    # Float ops run on the 64-bit SIMD path; integer and bool ops are scalar.
    if dtype.startswith(("float", "bfloat")):
        return max(1, VECTOR_BYTES // max(1, TensorType((), dtype).itemsize))
    return 1


def _alu_cycles(kind: str) -> int:
    if kind in _TRANSCENDENTAL:
        return TRANSCENDENTAL_CYCLES_PER_VECTOR
    if kind in _DIVIDE:
        return DIVIDE_CYCLES_PER_VECTOR
    return SIMPLE_CYCLES_PER_VECTOR


def _spread(t: TensorType, target: Target) -> tuple[int, int]:
    """(tiles, elements on the busiest tile) of a linearly mapped tensor."""
    tiles = max(1, tiles_used(t.nbytes, target.num_tiles))
    return tiles, -(-t.size // tiles)


def _main(op: Op) -> TensorType:
    return op.results[0] if op.results else (op.operands[0] if op.operands else
                                              TensorType((), "float32"))


def elementwise(op: Op, fused: list[Op], target: Target) -> OpCost:
    out = _main(op)
    chain = [op, *fused]
    inner = {r for f in fused for r in f.result_ids}
    external = [t for o in chain for v, t in zip(o.operand_ids, o.operands, strict=False)
                if v not in inner and t.size > 1]
    tiles, per_tile = _spread(out, target)
    alu = sum(_alu_cycles(o.kind) for o in chain if op_class(o) != "broadcast")
    vectors = -(-per_tile // _vector_elems(out.dtype))
    bytes_per_elem = sum(t.itemsize for t in external) + out.itemsize
    memory_cycles = per_tile * bytes_per_elem / target.local_bytes_per_tile_cycle
    arithmetic = sum(1 for o in chain if op_class(o) == "elementwise")
    return OpCost(
        flops=out.size * arithmetic, bytes_accessed=out.size * bytes_per_elem,
        compute_cycles=VERTEX_OVERHEAD_CYCLES + max(vectors * alu, memory_cycles),
        syncs=1, tiles=tiles)


def reduction(op: Op, fused: list[Op], target: Target) -> OpCost:
    n_in = max(1, len(op.operands) // 2)
    inputs, out = op.operands[:n_in], _main(op)
    elems = sum(t.size for t in inputs)
    in_bytes = sum(t.nbytes for t in inputs)
    tiles_in = max(1, tiles_used(in_bytes, target.num_tiles))
    per_tile = -(-elems // tiles_in)
    body = sum(_alu_cycles(o.kind) for r in op.regions for o in r.ops) or 1
    compute = VERTEX_OVERHEAD_CYCLES + -(-per_tile // _vector_elems(inputs[0].dtype)) * body
    dims = op.attributes.get("dimensions") or []
    rank = len(inputs[0].shape)
    trailing = sorted(dims) == list(range(rank - len(dims), rank))
    # Rows reduced along the innermost dims stay on their tile except at tile boundaries.
    partials = min(elems, out.size + tiles_in) if trailing else min(elems, out.size * tiles_in)
    cost = OpCost(flops=elems, bytes_accessed=in_bytes + out.nbytes, compute_cycles=compute,
                  syncs=1, tiles=tiles_in)
    if partials > out.size:
        # second stage: partials cross the exchange and are summed where the output lives
        acc_bytes = partials * ACCUMULATOR_BYTES
        tiles2 = max(1, tiles_used(acc_bytes, target.num_tiles))
        cost.exchange_cycles = math.ceil(acc_bytes / tiles2 / target.exchange_bytes_per_tile_cycle)
        cost.compute_cycles += VERTEX_OVERHEAD_CYCLES + math.ceil(
            acc_bytes / tiles2 / VECTOR_BYTES)
        cost.syncs += 1
    return cost


def _dot_dims(op: Op) -> tuple[int, int, int, int]:
    lhs, rhs = op.operands[0], op.operands[1]
    dn = op.attributes.get("dot_dimension_numbers") or {
        "lhs_batching_dimensions": [], "lhs_contracting_dimensions": [len(lhs.shape) - 1]}
    g = math.prod(lhs.shape[d] for d in dn.get("lhs_batching_dimensions", []))
    k = math.prod(lhs.shape[d] for d in dn.get("lhs_contracting_dimensions", []))
    m = lhs.size // max(1, g * k)
    n = rhs.size // max(1, g * k)
    return g, m, n, k


def _conv_dims(op: Op) -> tuple[int, int, int, int]:
    kernel, out = op.operands[1], _main(op)
    dn = op.attributes.get("dimension_numbers") or {}
    groups = (op.attributes.get("feature_group_count") or 1) * \
        (op.attributes.get("batch_group_count") or 1)
    kof = dn.get("kernel_output_feature_dimension", 0)
    out_features = kernel.shape[kof] if kernel.shape else 1
    k = kernel.size // max(1, out_features)
    return groups, out.size // max(1, out_features), out_features // max(1, groups), k


def _amp(op: Op, dims: tuple[int, int, int, int], target: Target) -> OpCost:
    g, m, n, k = dims
    plan = plan_matmul(g, m, n, k, op.operands[0].itemsize, target)
    return OpCost(
        flops=2 * g * m * n * k,
        bytes_accessed=sum(t.nbytes for t in op.operands) + _main(op).nbytes,
        compute_cycles=plan.compute_cycles, exchange_cycles=plan.exchange_cycles,
        syncs=plan.syncs, tiles=plan.tiles,
        workspace_bytes_per_tile=plan.workspace_bytes_per_tile,
        note=f"plan tiles g,m,n,k={plan.splits} serial={plan.serial}")


def dot(op: Op, fused: list[Op], target: Target) -> OpCost:
    return _amp(op, _dot_dims(op), target)


def conv(op: Op, fused: list[Op], target: Target) -> OpCost:
    return _amp(op, _conv_dims(op), target)


def _move(nbytes: int, target: Target, syncs: int = 1) -> OpCost:
    """Data rearrangement: every moved byte crosses the exchange once, then is stored."""
    tiles = max(1, tiles_used(nbytes, target.num_tiles))
    per_tile = -(-nbytes // tiles)
    return OpCost(
        bytes_accessed=2 * nbytes, tiles=tiles, syncs=syncs,
        exchange_cycles=math.ceil(per_tile / target.exchange_bytes_per_tile_cycle),
        compute_cycles=VERTEX_OVERHEAD_CYCLES + per_tile / target.local_bytes_per_tile_cycle)


def rearrange(op: Op, fused: list[Op], target: Target) -> OpCost:
    return _move(_main(op).nbytes, target)


def slicing(op: Op, fused: list[Op], target: Target) -> OpCost:
    # dynamic_update_slice writes in place: only the update moves.
    moved = op.operands[1].nbytes if op.kind == "dynamic_update_slice" else _main(op).nbytes
    return _move(moved, target)


def indexed(op: Op, fused: list[Op], target: Target) -> OpCost:
    """gather / scatter: indexed rows move over the exchange; addressing per row per tile."""
    if op.kind == "gather":
        moved, rows = _main(op).nbytes, op.operands[1].size
    else:
        moved, rows = op.operands[-1].nbytes, op.operands[len(op.operands) // 2].size
    cost = _move(moved, target, syncs=2)
    cost.compute_cycles += math.ceil(rows / cost.tiles) * INDEX_CYCLES_PER_ELEMENT
    cost.flops = op.operands[-1].size if op.kind == "scatter" else 0
    return cost


def window(op: Op, fused: list[Op], target: Target) -> OpCost:
    dims = op.attributes.get("window_dimensions") or [1]
    cost = elementwise(op, [], target)
    size = math.prod(dims)
    cost.compute_cycles = VERTEX_OVERHEAD_CYCLES + (cost.compute_cycles -
                                                    VERTEX_OVERHEAD_CYCLES) * size
    cost.flops *= size
    return cost


def sort(op: Op, fused: list[Op], target: Target) -> OpCost:
    data = op.operands[0]
    tiles, per_tile = _spread(data, target)
    stages = math.ceil(math.log2(max(2, tiles))) ** 2
    local = per_tile * max(1, math.ceil(math.log2(max(2, per_tile)))) * len(op.operands)
    moved = sum(t.nbytes for t in op.operands) // tiles
    return OpCost(
        flops=data.size * math.ceil(math.log2(max(2, data.size))), tiles=tiles,
        bytes_accessed=2 * sum(t.nbytes for t in op.operands),
        compute_cycles=VERTEX_OVERHEAD_CYCLES * (stages + 1) + local + stages * per_tile,
        exchange_cycles=stages * math.ceil(moved / target.exchange_bytes_per_tile_cycle),
        syncs=stages + 1)


def free(op: Op, fused: list[Op], target: Target) -> OpCost:
    return OpCost()


def host(op: Op, fused: list[Op], target: Target) -> OpCost:
    moved = sum(t.nbytes for t in op.operands + op.results)
    return OpCost(host_bytes=moved, bytes_accessed=moved, syncs=1, note="host exchange")


def custom_call(op: Op, fused: list[Op], target: Target) -> OpCost:
    # checks.py lets through only annotations and host callbacks
    if "callback" in str(op.attributes.get("call_target_name", "")):
        return host(op, fused, target)
    return free(op, fused, target)


def collective(op: Op, fused: list[Op], target: Target) -> OpCost:
    """Link time from the collective's plan, plus the sums (or maxima...) on the tiles."""
    plan = plan_collective(op, target)
    data = _main(op)
    cost = OpCost(
        bytes_accessed=sum(t.nbytes for t in op.operands + op.results), syncs=1,
        exchange_cycles=plan.cycles, link_bytes=plan.link_bytes, note=plan.describe())
    if plan.reduced_bytes:
        reduced = TensorType((plan.reduced_bytes // max(1, data.itemsize),), data.dtype)
        tiles, per_tile = _spread(reduced, target)
        body = sum(_alu_cycles(o.kind) for r in op.regions for o in r.ops) or 1
        # One combining vertex per step that received data to combine.
        cost.compute_cycles = plan.combine_steps * VERTEX_OVERHEAD_CYCLES + \
            math.ceil(per_tile / _vector_elems(data.dtype)) * body
        cost.flops, cost.tiles = reduced.size, tiles
    return cost


def unmodelled(op: Op, fused: list[Op], target: Target) -> OpCost:
    cost = elementwise(op, [], target) if op.results else OpCost()
    cost.unmodelled = True
    cost.note = f"no cost rule for {op.name}: costed as one elementwise pass over its result"
    return cost


RULES: dict[str, Callable[[Op, list[Op], Target], OpCost]] = {
    "elementwise": elementwise, "conversion": elementwise, "broadcast": rearrange,
    "random": elementwise, "reduction": reduction, "window": window,
    "dot": dot, "conv": conv, "rearrange": rearrange, "slice": slicing, "concat": rearrange,
    "gather": indexed, "scatter": indexed, "sort": sort, "free": free, "constant": free,
    "host": host, "custom_call": custom_call, "collective": collective,
    "unmodelled": unmodelled,
}
