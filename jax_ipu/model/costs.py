"""Cost rules: one table entry per op class giving flops, bytes, compute/exchange cycles, syncs.

Elementwise chains are fused into their last op (as Poplar fuses map expressions); data
movement is charged for the bytes that change tiles, views (slices, pads...) for nothing."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from jax_ipu.model.casts import cast_alu_cycles
from jax_ipu.model.collectives import plan_collective
from jax_ipu.model.complex_ops import float_work, parts, real_form
from jax_ipu.model.ir import Op, TensorType
from jax_ipu.model.mapping import (
    KEY_SHIFT,
    Everywhere,
    Layouts,
    Linear,
    Mapped,
    Placement,
    distinct_per_tile,
    fresh,
    sample_indices,
    tiles_used,
    view_index,
)
from jax_ipu.model.matmul import Kernel, choose_conv, choose_matmul
from jax_ipu.model.plans import Choice
from jax_ipu.model.slicing import (
    Slab,
    Table,
    copy_cycles,
    fill_cycles,
    plan_dynamic_slice,
    plan_dynamic_update,
    plan_gather,
    plan_scatter,
)
from jax_ipu.model.targets import (
    ACCUMULATOR_BYTES,
    DIVIDE_CYCLES_PER_VECTOR,
    SIMPLE_CYCLES_PER_VECTOR,
    TRANSCENDENTAL_CYCLES_PER_VECTOR,
    VECTOR_BYTES,
    Target,
)
from jax_ipu.model.windows import Window, static_window

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
    "transpose": "view", "pad": "view", "reverse": "view", "slice": "view",
    "concatenate": "view", "copy": "rearrange",
    "dynamic_slice": "dynamic_slice", "dynamic_update_slice": "dynamic_update_slice",
    "gather": "gather", "scatter": "scatter", "sort": "sort",
    "top_k": "sort",  # chlo.top_k (and approx top-k on ipu): Poplar's topK sorts each row
    "while": "control", "case": "control", "if": "control", "manual_computation": "control",
    "constant": "constant",
    "reshape": "free", "get_tuple_element": "free", "tuple": "free",
    "optimization_barrier": "free", "after_all": "free", "create_token": "free",
    "sharding_constraint": "free",  # sdy: an annotation for XLA's partitioner
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
# Classes whose results are their operands, or views of them, not new memory.
ALIASING = frozenset({"free", "view", "broadcast"})
# Classes that update their first operand in place.
IN_PLACE = frozenset({"dynamic_update_slice", "scatter", "static_copy"})
# Indexed ops that become a static slice (a view) or a static copy at constant indices.
_STATIC = {"dynamic_slice": "view", "dynamic_update_slice": "static_copy",
           "scatter": "static_copy"}


def op_class(op: Op) -> str:
    """The cost class of an op; unknown ops fall back to 'unmodelled'. A reduction over
    dimensions of size 1 only is a reshape (XLA's simplifier makes it one): free. A dynamic
    slice at constant indices is a static slice (a view), a dynamic update or an overwriting
    scatter of one window at constant indices a static copy, as Poplar's backend makes them."""
    if op.kind == "reduce" and op.operands and _unit_reduce(op) or _same_type_convert(op):
        return "free"
    if op.kind in _STATIC and "constant_indices" in op.attributes and \
            static_window(op) is not None:
        return _STATIC[op.kind]
    return OP_CLASSES.get(op.kind, "unmodelled")


def _same_type_convert(op: Op) -> bool:
    """A conversion to the type it already has: XLA's algebraic simplifier removes it (jax
    writes them around loop counters and indices)."""
    return op.kind == "convert" and len(op.operands) == 1 and len(op.results) == 1 and \
        op.operands[0] == op.results[0]


def _unit_reduce(op: Op) -> bool:
    shape = op.operands[0].shape
    dims = op.attributes.get("dimensions") or []
    return all(0 <= d < len(shape) and shape[d] == 1 for d in dims)


def reshape_like(op: Op) -> bool:
    """Ops that only rename a value's dimensions: each element keeps its flat index."""
    return op.kind in ("reshape", "bitcast_convert") or op.kind in ("reduce", "convert") and \
        op_class(op) == "free"


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
    host_bytes_to_host: int = 0
    host_bytes_to_device: int = 0
    link_bytes: int = 0  # bytes one IPU sends to other IPUs
    unmodelled: bool = False
    note: str = ""
    # where an elementwise result lives (like its first full-size operand), for its readers
    placement: Placement | None = None
    # per-tile figures of a jax_ipu.tile op (model/tiles.py TileFigures)
    tile_figures: Any = None
    # steps that add exchange code and vertex state on each tile (model/memory.py): 0
    # exchange steps means one per exchange phase seen in exchange_cycles
    exchange_steps: int = 0
    compute_steps: int = 0
    messages: int = 0  # exchange instructions per exchange step on a tile (0: one each way)
    kernel_positions: int = 0  # for AMP ops: kernel positions its worklists cover
    # the tiles the op runs on when known one by one (a placement a program chose); else it
    # runs on `tiles` tiles from a rotating start (model/code.py places its code there)
    on_tiles: tuple[int, ...] | None = None
    plan: str = ""  # the plan a planner chose, with its cycles
    alternative: str = ""  # the runner-up plan and why it lost
    # What an expression's vertices read from other tiles: Poplar's exchange writes it into a
    # buffer on the reading tile, held from the exchange to the op's compute set
    # (model/memory.py). Its busiest tile, how many tiles receive, and that tile's share of
    # each operand read from elsewhere: (elements, bytes an element).
    received: Received | None = None


@dataclass(frozen=True)
class Received:
    """Operand elements an op's tiles receive from other tiles, each element once a tile."""

    bytes_per_tile: float  # on the busiest receiving tile
    tiles: int  # tiles that receive
    by_operand: tuple[tuple[float, int], ...]  # the busiest tile's (elements, itemsize) each
    # elements of the result on a tile spread linearly, as memory holds it: a tile receives
    # no more of an operand than its result elements read
    share: float


Rule = Callable[[Op, list[Op], Target, Layouts], OpCost]


def _vector_elems(dtype: str) -> int:
    # Float ops run on the 64-bit SIMD path; integer and bool ops are scalar.
    if dtype.startswith(("float", "bfloat", "complex")):
        return max(1, VECTOR_BYTES // max(1, TensorType((), dtype).itemsize))
    return 1


def alu_cycles(kind: str) -> int:
    if kind in _TRANSCENDENTAL:
        return TRANSCENDENTAL_CYCLES_PER_VECTOR
    if kind in _DIVIDE:
        return DIVIDE_CYCLES_PER_VECTOR
    return SIMPLE_CYCLES_PER_VECTOR


def op_alu_cycles(op: Op, width: int) -> float:
    """ALU cycles of one vector of `width` result elements of `op`: an op on complex values
    takes the float32 work it becomes (model/complex_ops.py), a cast to or from an 8-bit float
    what popops' Cast vertex spends (model/casts.py), others their ALU step."""
    work = float_work(op, op.kind in _TRANSCENDENTAL)
    if work is not None:
        return work.cycles(width)
    if op.kind == "convert" and op.operands and op.results:
        cast = cast_alu_cycles(op.operands[0].dtype, op.results[0].dtype, width)
        if cast is not None:
            return cast
    return alu_cycles(op.kind)


def op_flops(op: Op) -> int:
    """Floating-point operations of one result element of an elementwise op."""
    work = float_work(op, op.kind in _TRANSCENDENTAL)
    return 1 if work is None else work.flops


def _accesses(width: int, t: TensorType, target: Target) -> int:
    """Loads or stores of one vector of `width` elements of t (one access moves 64 bits)."""
    return max(1, math.ceil(width * t.itemsize / target.local_bytes_per_tile_cycle))


def worker_cycles(vectors: int, per_vector: float, target: Target) -> int:
    """Cycles of a tile whose workers share `vectors` vectors: the six workers issue in turn,
    one instruction a cycle between them, so the busiest worker's vectors set the time."""
    w = target.worker_threads
    return math.ceil(vectors / w) * w * math.ceil(per_vector) if vectors else 0


def exchange_cycles(nbytes: float, target: Target) -> int:
    """One exchange phase in which the busiest tile sends or receives nbytes."""
    if nbytes <= 0:
        return 0
    return target.exchange_setup_cycles + math.ceil(nbytes / target.exchange_bytes_per_tile_cycle)


def _spread(t: TensorType, target: Target) -> tuple[int, int]:
    """(tiles, elements on the busiest tile) of a linearly mapped tensor."""
    tiles = max(1, tiles_used(t.nbytes, target.num_tiles))
    return tiles, -(-t.size // tiles)


def _main(op: Op) -> TensorType:
    return op.results[0] if op.results else (op.operands[0] if op.operands else
                                              TensorType((), "float32"))


# --- elementwise --------------------------------------------------------------------------------
Index = Callable[[np.ndarray], np.ndarray]


@dataclass
class _Stream:
    """One operand an elementwise expression reads from memory, and which of its elements
    each element of the result reads (None: the same index; else through broadcasts)."""

    vid: int
    type: TensorType
    index: Index | None


def _compose(outer: Index | None, inner: Index | None) -> Index | None:
    """Index map of `outer` then `inner` (None is the identity)."""
    if outer is None:
        return inner
    if inner is None:
        return outer
    return lambda r: inner(outer(r))


def _streams(op: Op, fused: list[Op]) -> list[_Stream]:
    """The operands a fused chain reads from memory (scalars excepted: they sit with the
    vertex), each with the index map from the root's result."""
    produced = {r for o in fused for r in o.result_ids}
    to_root: dict[int, Index | None] = {op.result_ids[0] if op.result_ids else -1: None}
    streams: list[_Stream] = []
    for o in [op, *reversed(fused)]:
        here = to_root.get(o.result_ids[0] if o.result_ids else -1)
        step = None
        if op_class(o) == "broadcast":
            index = view_index(o)
            step = (lambda r, f=index: f(r)[1]) if index is not None else None
        for v, t in zip(o.operand_ids, o.operands, strict=False):
            path = _compose(here, step)
            if v in produced:
                to_root[v] = path
            elif t.size > 1:
                streams.append(_Stream(v, t, path))
    return streams


def elementwise(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """One vertex per tile runs the fused expression on the tile's elements. The result lives
    like its first full-size operand; other operand elements on other tiles (a slice shifted
    against another, a transposed view, a broadcast vector) cross the exchange first."""
    out = _main(op)
    chain = [op, *fused]
    streams = _streams(op, fused)
    width = _vector_elems(out.dtype)
    computing = [o for o in chain if op_class(o) not in ("broadcast", "free")]
    once = {id(o): o for o in _scalars(computing, out.size)}
    alu = sum(op_alu_cycles(o, width) for o in computing if id(o) not in once)
    per_vector = max(alu, sum(_accesses(width, s.type, target) for s in streams) +
                     _accesses(width, out, target))
    placement, per_tile, tiles, received = _operand_tiles(out, streams, target, layouts)
    vectors = -(-per_tile // width)
    arithmetic = sum(op_flops(o) * (1 if id(o) in once else out.size) for o in computing
                     if op_class(o) == "elementwise")
    exchange = exchange_cycles(received.bytes_per_tile if received else 0, target)
    return OpCost(
        flops=arithmetic,
        bytes_accessed=out.size * (sum(s.type.itemsize for s in streams) + out.itemsize),
        compute_cycles=target.vertex_cycles + _scalar_cycles(once.values(), target) +
        worker_cycles(vectors, per_vector, target),
        exchange_cycles=exchange, syncs=1 + (1 if exchange else 0), tiles=tiles,
        placement=placement, received=received)


def _operand_tiles(out: TensorType, streams: list[_Stream], target: Target, layouts: Layouts
                   ) -> tuple[Placement, int, int, Received | None]:
    """(where the result lives, elements on its busiest tile, tiles used, what its tiles
    receive from other tiles) for an elementwise result reading `streams`."""
    places = [layouts.of(s.vid, s.type) for s in streams]
    full = [i for i, s in enumerate(streams) if s.index is None and s.type.size == out.size
            and not isinstance(places[i], Everywhere)]
    home = places[full[0]] if full else fresh(out, target.num_tiles)
    linear = isinstance(home, Linear)
    aligned = all(s.index is None and (p is home or isinstance(p, Everywhere) or
                                       linear and isinstance(p, Linear))
                  for s, p in zip(streams, places, strict=True))
    if aligned and linear:
        # Results of earlier ops line up element for element: nothing moves.
        return home, -(-out.size // home.tiles), home.tiles, None
    if aligned and isinstance(home, Mapped):
        counts = home.counts(target.num_tiles)
        return Mapped(out.size, home.runs_start, home.runs_tile), math.ceil(counts.max()), \
            int((counts > 0).sum()), None
    r, scale, whole = sample_indices(out.size, home)
    fallback = r * max(1, tiles_used(out.nbytes, target.num_tiles)) // max(1, out.size)
    home_tiles, _ = home.locate(r)
    home_tiles = np.where(home_tiles < 0, fallback, home_tiles)
    counts = np.bincount(home_tiles, minlength=target.num_tiles) * scale
    wanted = []  # (stream, receiving tiles, keys) of elements that live on other tiles
    for i, (s, p) in enumerate(zip(streams, places, strict=True)):
        if full and i == full[0] or isinstance(p, Everywhere):
            continue
        tiles, keys = p.locate(r if s.index is None else s.index(r))
        remote = (tiles >= 0) & (tiles != home_tiles)
        if remote.any():
            wanted.append((i, home_tiles[remote], keys[remote], s.index is not None))
    need = _received_once(wanted, len(streams), target.num_tiles, scale)
    if whole > 0:  # a linear result: only its first `whole` tiles were looked at in full
        counts, need = counts[:whole], need[:, :whole]
        used = home.tiles
    else:
        used = int((counts > 0).sum())
    # A result over a view is a tensor of its own, laid out like the view (as Poplar clones
    # an elementwise op's first operand): it never nests placements.
    place = home if linear else Mapped.from_sample(out.size, r, home_tiles)
    sizes = np.array([s.type.itemsize for s in streams], dtype=np.float64)
    received = sizes @ need if len(streams) else np.zeros(1)
    if not received.any():
        return place, math.ceil(counts.max()), used, None
    busiest = int(np.argmax(received))
    receiving = int((received > 0).sum())
    if whole > 0:  # the pattern of the tiles looked at repeats over the others
        receiving = min(used, math.ceil(receiving * used / max(1, len(received))))
    by_operand = tuple((float(need[i, busiest]), s.type.itemsize)
                       for i, s in enumerate(streams) if need[i, busiest])
    share = -(-out.size // max(1, tiles_used(out.nbytes, target.num_tiles)))
    return place, math.ceil(counts.max()), used, \
        Received(float(received[busiest]), receiving, by_operand, share)


def _received_once(wanted: list[tuple[int, np.ndarray, np.ndarray, bool]], streams: int,
                   n_tiles: int, scale: float) -> np.ndarray:
    """Elements each tile receives (streams x tiles), each stored element once a tile however
    many operands (shifted slices, a broadcast's repeats) read it, counted to the first
    operand that reads it. `wanted`: per operand, the receiving tiles and keys of its
    elements on other tiles, and whether it repeats elements (a broadcast; else each result
    element reads one of its own). The sample stands for `scale` times as many elements: an
    element seen once stands for unseen ones (Good-Turing, as mapping.distinct_per_tile)."""
    out = np.zeros((streams, n_tiles), dtype=np.float64)
    # Operands of tensors no other operand reads (most operands of most expressions) are
    # counted alone: each element once if it repeats none, else its distinct ones.
    spans = [(k.min() >> KEY_SHIFT, k.max() >> KEY_SHIFT) for _, _, k, _ in wanted]
    shared = []
    for n, (i, tiles, keys, repeats) in enumerate(wanted):
        lo, hi = spans[n]
        if all(hi < a or b < lo for m, (a, b) in enumerate(spans) if m != n):
            out[i] = distinct_per_tile(tiles, keys, n_tiles, scale) if repeats else \
                np.bincount(tiles, minlength=n_tiles) * scale
        else:
            shared.append((i, tiles, keys, repeats))
    if not shared:
        return out
    which = np.concatenate([np.full(len(t), i, dtype=np.int64) for i, t, _, _ in shared])
    tiles = np.concatenate([t for _, t, _, _ in shared])
    keys = np.concatenate([k for _, _, k, _ in shared])
    order = np.lexsort((keys, tiles))  # stable: the first operand's reading comes first
    w, t, k = which[order], tiles[order], keys[order]
    first = np.ones(len(t), dtype=bool)
    first[1:] = (t[1:] != t[:-1]) | (k[1:] != k[:-1])
    starts = np.flatnonzero(first)
    seen = np.diff(np.append(starts, len(t)))
    weight = np.where(seen == 1, scale, 1.0)
    out += np.bincount(w[starts] * n_tiles + t[starts], weights=weight,
                       minlength=streams * n_tiles).reshape(streams, n_tiles)
    return out


# --- reductions ---------------------------------------------------------------------------------
def _scalars(ops: list[Op], size: int) -> list[Op]:
    """The ops of an expression over `size` elements that make a scalar (for a broadcast):
    each worker works them out once, not once a vector (_scalar_cycles)."""
    return [o for o in ops if size > 1 and o.results and o.results[0].size == 1]


def _scalar_cycles(scalars: Iterable[Op], target: Target) -> int:
    return target.worker_threads * sum(op_alu_cycles(o, 1) for o in scalars)


def reduction(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """Each tile reduces its share of the input; when rows cross tiles, float32 partials cross
    the exchange and a second vertex combines them where the output lives (two syncs)."""
    n_in = max(1, len(op.operands) // 2)
    inputs, out = op.operands[:n_in], _main(op)
    # an expression fused into the reduction (a conversion, a square) is computed as it
    # reads: its own operands are what crosses memory
    read = [st.type for st in _streams(op, fused)] if fused else list(inputs)
    read = read or list(inputs)
    elems = inputs[0].size
    tiles_in = max(1, tiles_used(max(t.nbytes for t in read), target.num_tiles))
    per_tile = -(-elems // tiles_in)
    width = _vector_elems(inputs[0].dtype)
    expression = [o for o in fused if op_class(o) in ("elementwise", "conversion")]
    once = _scalars(expression, elems)
    body = (sum(op_alu_cycles(o, width) for r in op.regions for o in r.ops) or 1) + \
        sum(op_alu_cycles(o, width) for o in expression) - \
        sum(op_alu_cycles(o, width) for o in once)
    per_vector = max(body, sum(_accesses(width, t, target) for t in read))
    compute = target.vertex_cycles + worker_cycles(-(-per_tile // width), per_vector, target) \
        + _scalar_cycles(once, target)
    dims = op.attributes.get("dimensions") or []
    rank = len(inputs[0].shape)
    trailing = sorted(dims) == list(range(rank - len(dims), rank))
    # Rows reduced along the innermost dims stay on their tile except at tile boundaries.
    partials = min(elems, out.size + tiles_in) if trailing else min(elems, out.size * tiles_in)
    cost = OpCost(flops=elems * n_in * parts(inputs[0].dtype),
                  bytes_accessed=sum(t.nbytes for t in inputs) + out.nbytes * n_in,
                  compute_cycles=compute, syncs=1, tiles=tiles_in)
    if partials > out.size:
        acc_bytes = partials * ACCUMULATOR_BYTES * n_in * parts(inputs[0].dtype)
        per_tile2 = -(-acc_bytes // max(1, tiles_used(acc_bytes, target.num_tiles)))
        cost.exchange_cycles = exchange_cycles(per_tile2, target)
        cost.compute_cycles += target.vertex_cycles + math.ceil(
            per_tile2 / target.local_bytes_per_tile_cycle)
        cost.syncs += 1
    return cost


def window(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """reduce_window / select_and_scatter: every result element reads its window."""
    out = _main(op)
    size = math.prod(op.attributes.get("window_dimensions") or [1])
    tiles, per_tile = _spread(out, target)
    width = _vector_elems(out.dtype)
    body = sum(op_alu_cycles(o, width) for r in op.regions for o in r.ops) or 1
    per_vector = size * max(body, _accesses(width, op.operands[0], target)) + \
        _accesses(width, out, target)
    return OpCost(
        flops=out.size * size, bytes_accessed=op.operands[0].nbytes + out.nbytes,
        compute_cycles=target.vertex_cycles + worker_cycles(-(-per_tile // width), per_vector,
                                                            target),
        syncs=1, tiles=tiles)


# --- matmuls ------------------------------------------------------------------------------------
def _dot_dims(op: Op) -> tuple[int, int, int, int]:
    lhs, rhs = op.operands[0], op.operands[1]
    dn = op.attributes.get("dot_dimension_numbers") or {
        "lhs_batching_dimensions": [], "lhs_contracting_dimensions": [len(lhs.shape) - 1]}
    g = math.prod(lhs.shape[d] for d in dn.get("lhs_batching_dimensions", []))
    k = math.prod(lhs.shape[d] for d in dn.get("lhs_contracting_dimensions", []))
    m = lhs.size // max(1, g * k)
    n = rhs.size // max(1, g * k)
    return g, m, n, k


def _conv_dims(op: Op) -> tuple[int, int, int, Kernel]:
    """(groups, output rows, output channels per group, kernel) of a convolution."""
    kernel, out = op.operands[1], _main(op)
    dn = op.attributes.get("dimension_numbers") or {}
    groups = (op.attributes.get("feature_group_count") or 1) * \
        (op.attributes.get("batch_group_count") or 1)
    kof = dn.get("kernel_output_feature_dimension", 0)
    kif = dn.get("kernel_input_feature_dimension", 1)
    spatial = dn.get("kernel_spatial_dimensions") or []
    out_features = kernel.shape[kof] if kernel.shape else 1
    channels = kernel.shape[kif] if len(kernel.shape) > kif else 1
    sizes = [kernel.shape[d] for d in spatial if d < len(kernel.shape)]
    shape = Kernel(max(1, math.prod(sizes)), max(1, sizes[-1] if sizes else 1),
                   max(1, channels))
    return groups, out.size // max(1, out_features), out_features // max(1, groups), shape


def _placed(op: Op, layouts: Layouts) -> tuple[bool, bool]:
    placed = tuple(layouts.planned(v) for v in op.operand_ids[:2])
    return placed if len(placed) == 2 else (True, True)


def _product(op: Op, choice: Choice, target: Target, placed: tuple[bool, bool],
             flops: int) -> OpCost:
    return _planned(choice, target, flops=flops,
                    bytes_accessed=sum(t.nbytes for t in op.operands) + _main(op).nbytes,
                    note="" if all(placed) else "operand rearranged for the plan")


def dot(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """A matmul, planned by model/matmul.py; a complex one as the real matmul it becomes."""
    g, m, n, k = _dot_dims(op)
    twice, size = real_form(op.operands[0].dtype)
    n, k = twice * n, twice * k
    placed = _placed(op, layouts)
    return _product(op, choose_matmul(g, m, n, k, size, target, placed),
                    target, placed, 2 * g * m * n * k)


def conv(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """A convolution, planned by model/matmul.py; a complex one as the real convolution it
    becomes (input and output channels twice as many)."""
    g, m, n, kernel = _conv_dims(op)
    twice, size = real_form(op.operands[0].dtype)
    n, kernel = twice * n, replace(kernel, channels=twice * kernel.channels)
    placed = _placed(op, layouts)
    choice = choose_conv(max(1, g), max(1, m), max(1, n), kernel, size, target, placed)
    return _product(op, choice, target, placed,
                    2 * g * m * n * kernel.positions * kernel.channels)


# --- data movement ------------------------------------------------------------------------------
def view(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """Slices, pads, transposes, reverses, concatenations and unfused broadcasts are views, as
    in Poplar: nothing is copied here; whoever reads the view fetches what lies elsewhere."""
    return OpCost(note="view: elements stay where they are; readers fetch what they need")


def rearrange(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """A copy into a tensor of its own, laid out as its source: one local pass per tile."""
    out = _main(op)
    tiles, per_tile = _spread(out, target)
    width = _vector_elems(out.dtype)
    return OpCost(bytes_accessed=2 * out.nbytes, tiles=tiles, syncs=1,
                  compute_cycles=target.vertex_cycles + worker_cycles(
                      -(-per_tile // width), 2 * _accesses(width, out, target), target))


def carry_copies(types: list[TensorType], homes: list[Placement], target: Target) -> OpCost:
    """A loop's replaced carries copied into its state at the end of an iteration, all in one
    step: each tile copies its share of every one (a load and a store per vector), where the
    carry lives (`homes`: on the tiles a tile program named, else spread linearly)."""
    work, tiles, named = 0, 0, set()
    for t, home in zip(types, homes, strict=True):
        own = home.named_tiles()
        if own is None:
            n, per_tile = _spread(t, target)
        else:
            n, per_tile = len(own), -(-t.size // len(own))
            named.update(int(x) for x in own)
        tiles = max(tiles, n)
        width = _vector_elems(t.dtype)
        work += worker_cycles(-(-per_tile // width), 2 * _accesses(width, t, target), target)
    all_named = all(home.named_tiles() is not None for home in homes)
    return OpCost(bytes_accessed=2 * sum(t.nbytes for t in types), syncs=1, tiles=tiles,
                  compute_cycles=target.vertex_cycles + work,
                  on_tiles=tuple(sorted(named)) if all_named else None,
                  note=f"{len(types)} loop carr{'y' if len(types) == 1 else 'ies'} copied "
                       "into the loop's state each iteration")


def _slab(op: Op, operand: TensorType, piece: TensorType, layouts: Layouts) -> Slab:
    """The dynamic slice or update of `piece` within `operand`: the dims where the piece is
    smaller are those sliced at a run-time offset."""
    sliced = [d for d, (a, b) in enumerate(zip(operand.shape, piece.shape, strict=False))
              if b < a]
    rows = math.prod(operand.shape[d] for d in sliced) if sliced else 1
    taken = math.prod(piece.shape[d] for d in sliced) if sliced else 1
    placed = layouts.planned(op.operand_ids[0]) if op.operand_ids else True
    return Slab(max(1, rows), max(1, operand.size // max(1, rows)), max(1, taken),
                piece.itemsize, placed)


def dynamic_slice(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """A slice at a run-time offset (x[i] in a loop): planned by model/slicing.py."""
    out, src = _main(op), op.operands[0]
    return _planned(plan_dynamic_slice(_slab(op, src, out, layouts), target), target,
                    bytes_accessed=2 * out.nbytes)


def dynamic_update_slice(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """A write at a run-time offset, in place: planned by model/slicing.py."""
    dst, update = op.operands[0], op.operands[1]
    return _planned(plan_dynamic_update(_slab(op, dst, update, layouts), target), target,
                    bytes_accessed=2 * update.nbytes)


def static_copy(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """An update at constant indices (x.at[1:-1, 1:-1].set(v), dynamic_update_slice(x, v,
    (1, 1))): Poplar's XLA backend makes it a Copy of the update into that slice of the
    operand, in place (graphcore/tensorflow's const_slice_update: Copy(update,
    input.slice(begin, end))). An element whose destination tile already holds it is copied
    on the tile; the others cross the exchange once. Nothing is multicast and no index is
    read. An operand that is a constant splat is written first (a fill), and so is one that is
    a view of other tensors (copied into a tensor of its own, its elements fetched)."""
    window = static_window(op)
    if window is None or not op.operands[0].size or not math.prod(window.shape):
        return OpCost(note="static copy of nothing")
    k = 1 if op.kind == "dynamic_update_slice" else -1  # a scatter's updates come last
    dst, update = op.operands[0], op.operands[k]
    base = layouts.of(op.operand_ids[0], dst)
    source = layouts.of(op.operand_ids[k], update)
    home = base if isinstance(base, Linear | Mapped) else fresh(dst, target.num_tiles)
    written, received, tiles = _copied(source, update.size, window, dst, home, target)
    written, received = written * update.itemsize, received * update.itemsize
    regions = min(math.ceil(written / update.itemsize),
                  math.ceil(written / update.itemsize / window.run(dst.shape)) + 1)
    compute = copy_cycles(written, regions, target) if written else 0.0
    syncs = (1 if written else 0) + (1 if received else 0)
    note = ""
    if home is not base:
        per_tile = -(-dst.nbytes // max(1, tiles_used(dst.nbytes, target.num_tiles)))
        if isinstance(base, Everywhere):
            compute += fill_cycles(per_tile, 1, target)
            note = "; the constant operand written first"
        else:
            moved = _view_moved(base, dst, home, target) * dst.itemsize
            compute += copy_cycles(per_tile, 1, target)
            received += moved
            note = "; the operand (a view) copied into a tensor of its own first"
        syncs += 1
    exchange = exchange_cycles(received, target)
    return OpCost(
        bytes_accessed=2 * update.nbytes, compute_cycles=compute, exchange_cycles=exchange,
        syncs=syncs, tiles=tiles, placement=home, plan="static copy",
        note=f"static copy: constant indices (start {list(window.starts)}), copied in place; "
             f"busiest tile writes {written:,.0f} B, {received:,.0f} B of them from other "
             f"tiles{note}")


def _copied(source: Placement, size: int, window: Window, dst: TensorType, home: Placement,
            target: Target) -> tuple[float, float, int]:
    """(elements the busiest tile writes, elements the busiest tile receives, tiles written)
    when the `size` elements of an update living as `source` are copied into `window` of a
    tensor of type dst living as `home`."""
    r, scale, _ = sample_indices(size, source)
    shape = window.shape
    idx = np.unravel_index(r, shape) if shape else ()
    flat = np.zeros_like(r)
    for i, s, n in zip(idx, window.starts, dst.shape, strict=True):
        flat = flat * n + (i + s)
    to_tiles, _ = home.locate(flat)
    from_tiles, _ = source.locate(r)
    written = np.bincount(to_tiles[to_tiles >= 0], minlength=target.num_tiles) * scale
    return float(written.max(initial=0)), _received(to_tiles, from_tiles, scale, target), \
        int((written > 0).sum())


def _view_moved(view: Placement, t: TensorType, home: Placement, target: Target) -> float:
    """Elements the busiest tile receives when a view is copied into `home`."""
    r, scale, _ = sample_indices(t.size, home)
    return _received(home.locate(r)[0], view.locate(r)[0], scale, target)


def _received(to_tiles: np.ndarray, from_tiles: np.ndarray, scale: float, target: Target
              ) -> float:
    """Elements the busiest tile receives from other tiles, of sampled elements going from
    `from_tiles` to `to_tiles` (-1: nowhere), each standing for `scale` elements."""
    remote = (from_tiles >= 0) & (to_tiles >= 0) & (from_tiles != to_tiles)
    return float((np.bincount(to_tiles[remote], minlength=target.num_tiles) * scale)
                 .max(initial=0))


def _planned(choice: Choice, target: Target, **fields) -> OpCost:
    """An op's cost from the plan its planner chose, naming the runner-up and why it lost."""
    plan = choice.chosen
    return OpCost(
        compute_cycles=plan.compute_cycles, exchange_cycles=plan.exchange_cycles,
        syncs=plan.syncs, tiles=plan.tiles, workspace_bytes_per_tile=plan.temp_bytes_per_tile,
        exchange_steps=plan.exchange_steps, compute_steps=plan.compute_steps,
        messages=plan.messages, kernel_positions=plan.kernel_positions,
        plan=choice.describe(target), alternative=choice.alternative(target), **fields)


def gather(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """Rows of a table looked up by index (jnp.take, x[idx]): PopLibs' multiSlice planner
    (model/slicing.py). The exchange is compiled, not data-dependent, so indices are taken
    as uniform over the rows; the result is laid out linearly for its readers."""
    operand, indices, out = op.operands[0], op.operands[1], _main(op)
    dn = op.attributes.get("dimension_numbers") or {}
    row_elems = max(1, math.prod(op.attributes.get("slice_sizes") or [1]))
    lookups = max(1, out.size // row_elems)
    rows = max(1, math.prod(operand.shape[d] for d in dn.get("start_index_map") or [0]))
    placed = layouts.planned(op.operand_ids[0]) if op.operand_ids else True
    table = Table(rows, row_elems, lookups, out.itemsize, placed)
    return _planned(plan_gather(table, out.nbytes, target), target,
                    bytes_accessed=indices.nbytes + 2 * out.nbytes,
                    note=f"{lookups} lookups of {row_elems * out.itemsize} B rows from "
                         f"{rows} rows; indices taken as uniform over the rows")


def scatter(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """Rows of a table updated by index (x.at[idx].set/add, segment_sum): PopLibs'
    multiUpdate planner (model/slicing.py), in place. Added updates may be split over
    lookup groups whose float32 partials are then reduced; a constant table (zeros) is
    written first. Indices are taken as uniform over the rows."""
    n = max(1, (len(op.operands) - 1) // 2)
    operand, indices, updates = op.operands[0], op.operands[n], op.operands[-1]
    dn = op.attributes.get("scatter_dimension_numbers") or {}
    window = max(1, math.prod(updates.shape[d] for d in dn.get("update_window_dims") or []))
    count = max(1, updates.size // window)
    rows = max(1, math.prod(operand.shape[d] for d in
                            dn.get("scattered_dims_to_operand_dims") or [0]))
    combine = any(alu_cycles(o.kind) for r in op.regions for o in r.ops)
    base = op.operand_ids[0] if op.operand_ids else None
    fill = base is not None and isinstance(layouts.of(base, operand), Everywhere)
    placed = base is None or layouts.planned(base)
    table = Table(rows, window, count, updates.itemsize, placed)
    cost = _planned(plan_scatter(table, combine, fill, target), target,
                    flops=updates.size if combine else 0,
                    bytes_accessed=indices.nbytes + 3 * updates.nbytes,
                    note=f"{count} updates of {window * updates.itemsize} B rows into {rows} "
                         "rows; indices taken as uniform over the rows")
    cost.compute_cycles *= n  # variadic scatters update each table alike
    return cost


def sort(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """Each sorted row is sorted locally on its tiles, then merged across them in a bitonic
    network: log2(tiles)^2 steps, each an exchange of the tile's share and a merge."""
    data = op.operands[0]
    dim = op.attributes.get("dimension", len(data.shape) - 1)
    n = data.shape[dim] if data.shape else 1
    tiles, per_tile = _spread(data, target)
    moved = -(-sum(t.nbytes for t in op.operands) // tiles)  # bytes of all keys on a tile
    row_tiles = min(tiles, -(-n * sum(t.itemsize for t in op.operands) // max(1, moved)))
    stages = math.ceil(math.log2(row_tiles)) ** 2 if row_tiles > 1 else 0
    keys = len(op.operands)
    local = worker_cycles(per_tile * max(1, math.ceil(math.log2(max(2, min(n, per_tile))))),
                          keys, target)
    return OpCost(
        flops=data.size * math.ceil(math.log2(max(2, n))), tiles=tiles,
        bytes_accessed=2 * sum(t.nbytes for t in op.operands),
        compute_cycles=target.vertex_cycles + local + stages * (
            target.vertex_cycles + worker_cycles(per_tile, keys, target)),
        exchange_cycles=stages * exchange_cycles(moved, target),
        syncs=1 + 2 * stages)


# --- the rest -----------------------------------------------------------------------------------
def free(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    return OpCost()


def host(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """Infeed, outfeed and callbacks: operands stream to the host and results back."""
    out = sum(t.nbytes for t in op.operands)
    back = sum(t.nbytes for t in op.results)
    return OpCost(host_bytes_to_host=out, host_bytes_to_device=back, bytes_accessed=out + back,
                  syncs=1, note="host exchange")


def custom_call(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    # checks.py lets through only annotations and host callbacks
    if "callback" in str(op.attributes.get("call_target_name", "")):
        return host(op, fused, target, layouts)
    return free(op, fused, target, layouts)


def collective(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """Link time from the collective's plan, plus the sums (or maxima...) on the tiles."""
    plan = plan_collective(op, target)
    data = _main(op)
    cost = OpCost(
        bytes_accessed=sum(t.nbytes for t in op.operands + op.results), syncs=1,
        exchange_cycles=plan.cycles, link_bytes=plan.link_bytes, note=plan.describe())
    if plan.reduced_bytes:
        reduced = TensorType((plan.reduced_bytes // max(1, data.itemsize),), data.dtype)
        tiles, per_tile = _spread(reduced, target)
        body = sum(op_alu_cycles(o, _vector_elems(data.dtype)) for r in op.regions
                   for o in r.ops) or 1
        # One combining vertex per step that received data to combine.
        cost.compute_cycles = plan.combine_steps * target.vertex_cycles + \
            math.ceil(per_tile / _vector_elems(data.dtype)) * body
        cost.flops, cost.tiles = reduced.size, tiles
    return cost


def unmodelled(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    cost = elementwise(op, [], target, layouts) if op.results else OpCost()
    cost.placement = None
    cost.unmodelled = True
    cost.note = f"no cost rule for {op.name}: costed as one elementwise pass over its result"
    return cost


RULES: dict[str, Rule] = {
    "elementwise": elementwise, "conversion": elementwise, "broadcast": view,
    "random": elementwise, "reduction": reduction, "window": window,
    "dot": dot, "conv": conv, "view": view, "rearrange": rearrange,
    "dynamic_slice": dynamic_slice, "dynamic_update_slice": dynamic_update_slice,
    "gather": gather, "scatter": scatter, "static_copy": static_copy, "sort": sort,
    "free": free, "constant": free,
    "host": host, "custom_call": custom_call, "collective": collective,
    "unmodelled": unmodelled,
}
