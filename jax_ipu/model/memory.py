"""Memory per tile: liveness over program order, tile mapping, code, peak, out-of-memory tiles.

Inputs kept on device, constants and code are always live; op results live def..last use; loop
state shares one buffer with the loop's operand and result, as XLA's buffer assignment does."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from jax_ipu.model import tiles
from jax_ipu.model.code import code_per_tile
from jax_ipu.model.costs import ALIASING, IN_PLACE, op_class
from jax_ipu.model.cycles import OpRow, fusion, use_counts
from jax_ipu.model.ir import Op, Program, Region, TensorType
from jax_ipu.model.mapping import linear_mapping, tiles_used, uniform_share
from jax_ipu.model.report import Contributor, LivenessPoint, MemoryReport
from jax_ipu.model.streaming import PINNED_HOST, Placement, capacity
from jax_ipu.model.targets import Target

MAX_CONTRIBUTORS = 8
_IN_PLACE = ("elementwise", "conversion")


@dataclass
class _Buffer:
    name: str
    category: str
    nbytes: int
    start: int
    end: int  # last step it is live at (inclusive)
    location: str
    always_live: bool = False
    layout: dict[int, int] | None = None  # bytes per tile, when placed (jax_ipu.tile)
    # A buffer of an enclosing block seen from a region (a loop's state, a shard_map operand):
    # it takes no bytes here (its owner counts them); `size` is what it can hold in place.
    external: bool = False
    size: int = 0
    # the carried value k whose state buffer this is (while bodies), -1 for none
    carried: int = -1
    parameter: int = -1  # the entry parameter this buffer is, -1 for none
    through_loop: bool = False  # a loop's state took this buffer over

    def lay_out(self, layout: dict[int, int]) -> None:
        self.layout, self.nbytes = layout, sum(layout.values())


# What an op needs only while it runs: (bytes spread linearly, or evenly over `tiles` tiles
# when that is not 0, and bytes per named tile for tile-level programs).
Transient = tuple[int, int, "dict[int, int] | None"]


@dataclass
class _Liveness:
    buffers: list[_Buffer]
    steps: list[Op]  # the stored (non-fused) ops, one per step
    # per step: matmul workspace, vertex temporaries or loop-body temporaries
    transient: list[Transient]
    outputs: list[list[int]]  # the buffers holding each of the block's results
    # per step: operand data the op's tiles received from other tiles, (bytes on each
    # receiving tile, receiving tiles)
    received: list[tuple[int, int]]


def _uses_at(op: Op) -> list[int]:
    """Values an op reads, including those read inside its regions."""
    return [v for o in op.walk() for v in o.operand_ids] + \
        [v for r in op.regions for v in r.result_ids]


def _capacity(b: _Buffer) -> int:
    """The bytes a result can write over in place: an external buffer's own size."""
    return b.size if b.external else b.nbytes


def _liveness(ops: list[Op], uses: Counter, rows: dict[int, OpRow], arg_ids: tuple[int, ...],
              args: list[_Buffer], output_ids: tuple[int, ...],
              shards: dict[int, tuple[int, ...]], off_tile: frozenset[int],
              entry: bool = False) -> _Liveness:
    """Buffers of one block; args are the block's inputs (None for values owned elsewhere;
    external buffers for a region's arguments, whose bytes its op's operands hold). In the
    program's own block (`entry`), a result the program returns is a buffer of its own even
    when its op is a view (_stored_output).

    Results with known shards (Program.shards) take the bytes of one device's shard; results in
    another memory kind than tile memory (`off_tile`, see streaming.py) take none."""
    ops = schedule(ops, uses)
    groups = fusion(ops, uses)
    root_of: dict[int, int] = {}  # a producer computed in several roots lives to the last
    for root, producers in groups.items():
        for p in producers:
            root_of[id(p)] = max(root, root_of.get(id(p), root))
    stored = [i for i, op in enumerate(ops) if id(op) not in root_of]
    step_of = {i: s for s, i in enumerate(stored)}
    n = max(1, len(stored))
    last: dict[int, int] = {}
    for i, op in enumerate(ops):
        s = step_of[root_of.get(id(op), i)]
        for v in _uses_at(op):
            last[v] = max(last.get(v, 0), s)
    outputs = set(output_ids)
    for v in outputs:
        last[v] = n - 1
    # A constant is reported at the line that first uses it, as checks.py does: jax hoists an
    # array a function closes over to the call's line.
    user_at: dict[int, str] = {}
    for op in ops:
        for v in _uses_at(op):
            user_at.setdefault(v, str(op.location))

    buffers: list[_Buffer] = []
    # the buffers holding each value: one for most, several for a view of several values
    # (a concatenation), none for a value owned by an enclosing block
    buf_of: dict[int, list[int]] = {}
    for vid, b in zip(arg_ids, args, strict=False):
        if b is not None:
            if not b.always_live:
                b.end = last.get(vid, 0)
            buf_of[vid] = [len(buffers)]
            buffers.append(b)
    transient: list[Transient] = []
    received: list[tuple[int, int]] = []
    for i in stored:
        op, s = ops[i], step_of[i]
        transient.append(_transient(op, uses, rows, shards, off_tile))
        received.append(_received(op, rows.get(id(op)), shards))
        for j, layout in tiles.operand_layouts(op).items():  # constants laid out where used
            for b in buf_of.get(op.operand_ids[j], []):
                if buffers[b].category == "constants":
                    buffers[b].lay_out(layout)
        cls = op_class(op)
        reads = [v for o in (op, *groups.get(i, [])) for v in o.operand_ids]
        for k, rid in enumerate(op.result_ids):
            rtype = op.results[k].shard(shards.get(rid))
            if rid in off_tile:
                rtype = TensorType((0,), rtype.dtype)
            if op.kind == "constant":
                buf_of[rid] = [len(buffers)]
                buffers.append(_Buffer("constant", "constants", rtype.nbytes, 0, n - 1,
                                       user_at.get(rid, str(op.location)), always_live=True))
                continue
            reuse = _reused(op, k, cls, reads, s, rtype.nbytes, buf_of, buffers, last)
            if entry and rid in outputs and _stored_output(op, cls, reuse, buffers):
                reuse = None
            if reuse is not None:
                buf_of[rid] = reuse
                for j in reuse:
                    b = buffers[j]
                    b.end = max(b.end, last.get(rid, s))
                    if rid in outputs and b.category == "temporaries":
                        b.category = "outputs"
                    # a kept input a loop only reads stays the caller's, not loop state
                    if op.kind == "while" and not b.external and not b.through_loop and \
                            not b.always_live:
                        b.through_loop = True
                        b.name += (f", aliased with parameter {b.parameter} through the loop"
                                   if b.parameter >= 0 else ", carried through the loop")
                continue
            buf_of[rid] = [len(buffers)]
            buffers.append(_Buffer(
                f"{op.kind} result", "outputs" if rid in outputs else "temporaries",
                rtype.nbytes, s, max(s, last.get(rid, s)), str(op.location)))
            layout = tiles.result_layout(op, k)
            if layout is not None:
                buffers[-1].lay_out(layout)
    return _Liveness(buffers, [ops[i] for i in stored], transient or [(0, 0, None)],
                     [buf_of.get(v, []) for v in output_ids], received or [(0, 0)])


def schedule(ops: list[Op], uses: Counter) -> list[Op]:
    """The order a block runs in for memory: program order, except that an elementwise op
    that can write over an operand it alone reads runs as soon as its operands exist (so a
    gradient is added into its accumulator as soon as it is made, not after the whole
    backward pass), as Poplar's and XLA's schedulers order such ops to shorten lifetimes."""
    made: dict[int, tuple[int, int]] = {}  # value -> (anchor op index, depth)
    keys = []
    for i, op in enumerate(ops):
        if _early(op, uses):
            anchor = max((made.get(v, (-1, 0)) for v in op.operand_ids), default=(-1, 0))
            key = (anchor[0], anchor[1] + 1, i)
        else:
            key = (i, 0, i)
        for r in op.result_ids:
            made[r] = key[:2]
        keys.append(key)
    return [ops[i] for i in sorted(range(len(ops)), key=keys.__getitem__)]


def _early(op: Op, uses: Counter) -> bool:
    if op_class(op) not in _IN_PLACE or op.regions or len(op.results) != 1:
        return False
    size = op.results[0].size
    return any(uses[v] == 1 and t.size == size
               for v, t in zip(op.operand_ids, op.operands, strict=False))


def _stored_output(op: Op, cls: str, reuse: list[int] | None, buffers: list[_Buffer]) -> bool:
    """Whether a result of a view-like op (a pad, slice, transpose, concatenation, broadcast)
    the program returns needs a buffer of its own: an executable's output is an allocation of
    its own, so the view is copied into it (a pad's border written), as XLA's copy insertion
    copies an output that is not a buffer. A rename (a reshape, a barrier, a tuple's element)
    is the buffer it renames, unless that is an argument the caller keeps or a constant."""
    if cls not in ALIASING:
        return False
    if cls != "free" or reuse is None:
        return True
    return any(buffers[j].always_live or buffers[j].category == "constants" for j in reuse)


def _reused(op: Op, k: int, cls: str, reads: list[int], step: int, nbytes: int,
            buf_of: dict[int, list[int]], buffers: list[_Buffer], last: dict[int, int]
            ) -> list[int] | None:
    """The buffers result k of op takes over instead of a new one, or None.

    Views (slices, pads, transposes, concatenations, broadcasts, reshapes) and pass-through
    ops (barriers) are their operands' memory, as in Poplar. Dynamic updates and scatters
    write into their first operand when it is one whole buffer that dies there. An
    elementwise result takes over an operand of its size that dies at this op, as Poplar's
    in-place map expressions do. Tile-level ops say themselves (model/tiles.py)."""
    j = tiles.aliased_operand(op, k)
    if j is not None:
        return sorted(set(buf_of.get(op.operand_ids[j], []))) or None
    if op.kind == "while":
        # XLA gives a loop's operand, its body's argument and result and the loop's result one
        # buffer. Copy insertion copies the operand first only when the body writes it and it
        # is read after the loop, is a parameter the caller keeps, or a constant; an element
        # the body passes through unchanged (a closed-over input) stays in its own buffer.
        if k >= len(op.operand_ids):
            return None
        held = buf_of.get(op.operand_ids[k], [])
        body = op.regions[-1] if op.regions else None
        through = body is not None and k < min(len(body.arg_ids), len(body.result_ids)) and \
            body.result_ids[k] == body.arg_ids[k]
        if len(held) == 1 and (through or (
                last.get(op.operand_ids[k]) == step and not buffers[held[0]].always_live
                and _capacity(buffers[held[0]]) == nbytes)):
            return held
        return None
    if cls in ALIASING:
        if op.kind == "concatenate" or cls == "view":
            held = [j for v in op.operand_ids for j in buf_of.get(v, [])]
        else:
            held = buf_of.get(op.operand_ids[k], []) if k < len(op.operand_ids) else []
        return sorted(set(held)) if held else None
    j = tiles.in_place_operand(op, k)
    if j is None and cls in IN_PLACE and k < len(op.operand_ids):
        j = k
    if j is not None:
        v = op.operand_ids[j]
        held = buf_of.get(v, [])
        if len(held) == 1 and _capacity(buffers[held[0]]) == nbytes and last.get(v) == step \
                and not buffers[held[0]].always_live:
            return held
        return None
    if cls in _IN_PLACE:
        for v in reads:
            held = buf_of.get(v, [])
            if len(held) == 1 and last.get(v) == step and not buffers[held[0]].always_live \
                    and buffers[held[0]].end <= step and _capacity(buffers[held[0]]) == nbytes:
                return held
    return None


def _transient(op: Op, uses: Counter, rows: dict[int, OpRow],
               shards: dict[int, tuple[int, ...]], off_tile: frozenset[int]) -> Transient:
    """What an op needs only while it runs: matmul blocks, vertex temporaries, loop-body
    temporaries (those placed on named tiles stay on them)."""
    placed = tiles.workspace_layout(op)
    if placed is not None:
        return 0, 0, placed
    row = rows.get(id(op))
    work: Transient = (row.cost.workspace_bytes_per_tile * row.cost.tiles, row.cost.tiles,
                       None) if row else (0, 0, None)
    for region in op.regions:
        inner = _liveness(region.ops, uses, rows, region.arg_ids,
                          _region_args(op, region, shards), region.result_ids, shards,
                          off_tile)
        _write_results_in_place(op, inner)
        if _placed(inner):
            return _placed_peak(inner)
        peak = _peak(inner)
        if peak > work[0]:
            work = (peak, 0, None)
    return work


def _received(op: Op, row: OpRow | None, shards: dict[int, tuple[int, ...]]
              ) -> tuple[int, int]:
    """(bytes on each receiving tile, receiving tiles) of the operand elements an expression's
    vertices read from other tiles (a shifted slice's neighbour rows, a transposed view's
    rows, a broadcast vector): Poplar's exchange writes them into a buffer on the reading
    tile, live from the exchange to the end of the op's compute set, each element once.

    Of each operand read from elsewhere a tile receives no more than its share of the result
    reads, the result spread linearly as memory holds it. A result sharded over devices
    (Program.shards) is costed whole but held one shard a device, so its share is a shard's
    (a neighbour plane of a grid sharded on its first dimension is as far away, in
    elements, on each device)."""
    got = row.cost.received if row else None
    if got is None or not op.results:
        return 0, 0
    out = op.results[0]
    share = got.share * out.shard(shards.get(op.result_ids[0])).size / max(1, out.size)
    per_tile = min(got.bytes_per_tile, sum(min(n, share) * size for n, size in got.by_operand))
    return math.ceil(per_tile), got.tiles


def _region_args(op: Op, region: Region, shards: dict[int, tuple[int, ...]]
                 ) -> list[_Buffer | None]:
    """External buffers for a region's arguments that its op's operands hold: a while loop's
    carried state (one buffer with the loop's operand and result) and a shard_map body's
    operands (one device's shard). Views of them are their memory, not copies; results can
    write over them in place. Other regions' arguments (reducers' scalars) take none."""
    if op.kind not in ("while", "manual_computation") or \
            len(region.arg_ids) != len(op.operands):
        return []
    # A shard_map body's values are one device's; a loop body's have the loop's own shapes
    # (whole where the program's sharding of them is unknown, as for the body's other values).
    manual = op.kind == "manual_computation"
    return [_Buffer(f"{op.kind} operand {k}", "external", 0, 0, 0, str(op.location),
                    external=True, carried=-1 if manual else k,
                    size=(t.shard(shards.get(vid)) if manual else t).nbytes)
            for k, (t, vid) in enumerate(zip(op.operands, op.operand_ids, strict=True))]


def _write_results_in_place(op: Op, inner: _Liveness) -> None:
    """A region's results that XLA writes straight into its op's buffers take no bytes of the
    region's own: a branch's or a shard_map body's results are its op's results; a loop body's
    result k is the loop's state k when computed over it in place, or once nothing reads that
    state any more (else it is a temporary of the body, copied into the state at the end of
    the step)."""
    if op.kind in ("case", "if", "manual_computation"):
        for held in inner.outputs:
            for j in held:
                b = inner.buffers[j]
                if not b.external and not b.always_live and b.category != "constants":
                    b.nbytes = 0
    elif op.kind == "while":
        state = {b.carried: b for b in inner.buffers if b.external and b.carried >= 0}
        for k, held in enumerate(inner.outputs):
            if len(held) != 1 or k not in state:
                continue
            b = inner.buffers[held[0]]
            if not b.external and not b.always_live and b.category != "constants" and \
                    state[k].end < b.start:
                b.nbytes = 0


def _placed(live: _Liveness) -> bool:
    return any(b.layout for b in live.buffers) or any(t[2] for t in live.transient)


def _placed_peak(live: _Liveness) -> Transient:
    """A block holding values on named tiles, as one transient: the peak of its other bytes
    (spread linearly) and each named tile's own peak."""
    linear, per_tile = 0, Counter()
    for s, ((tbytes, _, layout), (got, receiving)) in enumerate(
            zip(live.transient, live.received, strict=True)):
        here = Counter(layout or {})
        flat = tbytes + got * receiving
        for b in live.buffers:
            if b.start <= s <= b.end:
                if b.layout:
                    here.update(b.layout)
                else:
                    flat += b.nbytes
        linear = max(linear, flat)
        for tile, nbytes in here.items():
            per_tile[tile] = max(per_tile[tile], nbytes)
    return linear, 0, dict(per_tile)


def _peak(live: _Liveness) -> int:
    """Largest bytes live at one step of a block, its transients included."""
    n = len(live.transient)
    delta = np.zeros(n + 1, dtype=np.int64)
    for b in live.buffers:
        if b.start <= b.end and b.start < n:
            delta[b.start] += b.nbytes
            delta[min(b.end, n - 1) + 1] -= b.nbytes
    work = np.array([t + sum((layout or {}).values()) + per_tile * tiles
                     for (t, _, layout), (per_tile, tiles) in zip(live.transient, live.received,
                                                                  strict=True)],
                    dtype=np.int64)
    return int((np.cumsum(delta[:n]) + work).max()) if n else 0


def _vector(layout: dict[int, int], num_tiles: int) -> np.ndarray:
    out = np.zeros(num_tiles, dtype=np.int64)
    for tile, nbytes in layout.items():
        if 0 <= tile < num_tiles:
            out[tile] += nbytes
    return out


def analyze_memory(program: Program, rows: list[OpRow], target: Target,
                   placement: Placement | None = None) -> MemoryReport:
    """Liveness, tile mapping and per-tile peaks of a program on a target. Tile memory holds only
    the values `placement` leaves in kind "device"; the others are what it says they hold."""
    t = target.num_tiles
    uses = use_counts(program)
    by_op = {id(r.op): r for r in rows}
    placement = placement or Placement()
    off_tile = placement.off_tile
    on_tile = {vid: vid not in off_tile for vid in (*program.input_ids, *program.output_ids)}
    all_inputs = program.per_device(program.inputs, program.input_ids)
    all_outputs = program.per_device(program.outputs, program.output_ids)
    inputs = _on_tile(all_inputs, program.input_ids, on_tile)
    outputs = _on_tile(all_outputs, program.output_ids, on_tile)
    args = [
        _Buffer(f"argument {i}" + (f" ({name})" if name else ""),
                "donated inputs" if i in program.donated_inputs else "inputs", ty.nbytes, 0,
                0, "<argument>", always_live=i not in program.donated_inputs, parameter=i)
        for i, (ty, name) in enumerate(zip(inputs, _names(program), strict=False))]
    live = _liveness(program.ops, uses, by_op, program.input_ids, args, program.output_ids,
                     program.shards, off_tile, entry=True)
    n = len(live.transient)
    for b in live.buffers:
        if b.always_live:
            b.start, b.end = 0, n - 1

    delta = np.zeros((n + 1, t), dtype=np.int64)
    always = np.zeros(t, dtype=np.int64)
    vectors = []
    start = 0
    for b in live.buffers:
        if b.layout:
            vec = _vector(b.layout, t)
        else:
            vec = linear_mapping(b.nbytes, t, start)
            start = (start + tiles_used(b.nbytes, t)) % t
        vectors.append(vec)
        if b.always_live:
            always += vec
        else:
            delta[b.start] += vec
            delta[b.end + 1] -= vec
    work_vecs = []
    for s, (nbytes, spread, layout) in enumerate(live.transient):
        vec = uniform_share(nbytes, spread, t) if spread else linear_mapping(nbytes, t)
        if layout:
            vec = vec + _vector(layout, t)
        work_vecs.append(vec)
        delta[s] += vec
        delta[s + 1] -= vec
    received_vecs = []
    for s, (per_tile, receiving) in enumerate(live.received):
        vec = uniform_share(per_tile * receiving, receiving, t)
        received_vecs.append(vec)
        delta[s] += vec
        delta[s + 1] -= vec
    code = code_per_tile(rows, target)
    code_here = sum(code.values())
    always += code_here
    per_step = np.cumsum(delta[:n], axis=0)
    per_tile = per_step.max(axis=0) + always
    curve = per_step.sum(axis=1) + int(always.sum())
    peak_step = int(np.argmax(curve))
    max_tile = int(np.argmax(per_tile))
    tile_step = int(np.argmax(per_step[:, max_tile]))

    def live_at(b: _Buffer, s: int) -> bool:
        return b.always_live or b.start <= s <= b.end

    by_category: Counter = Counter()
    for b in live.buffers:
        if live_at(b, peak_step):
            by_category[b.category] += b.nbytes
    by_category["workspace"] += int(work_vecs[peak_step].sum())
    by_category["received"] += int(received_vecs[peak_step].sum())
    for name, per in code.items():
        by_category[name] += int(per.sum())

    contributors = [Contributor(b.name, b.category, int(v[max_tile]), b.nbytes, b.location)
                    for b, v in zip(live.buffers, vectors, strict=False)
                    if live_at(b, tile_step) and v[max_tile] > 0]
    if work_vecs[tile_step][max_tile]:
        op = live.steps[tile_step] if tile_step < len(live.steps) else None
        contributors.append(Contributor(
            f"{op.kind if op else 'op'} workspace", "workspace",
            int(work_vecs[tile_step][max_tile]), int(work_vecs[tile_step].sum()),
            str(op.location) if op else "<unknown>"))
    if received_vecs[tile_step][max_tile]:
        op = live.steps[tile_step]
        contributors.append(Contributor(
            f"{op.kind} operands received from other tiles", "received",
            int(received_vecs[tile_step][max_tile]), int(received_vecs[tile_step].sum()),
            str(op.location)))
    contributors += [Contributor(name, name, int(per[max_tile]), int(per.sum()), "<code>")
                     for name, per in code.items() if per[max_tile]]
    contributors.sort(key=lambda c: -c.bytes_on_tile)

    always_total = int(always.sum())
    peak = int(curve[peak_step])
    return MemoryReport(
        by_category={k: int(v) for k, v in by_category.items() if v},
        always_live_bytes=always_total,
        not_always_live_peak_bytes=peak - always_total,
        peak_bytes=peak, peak_step=peak_step,
        code_bytes_per_tile=int(code_here[max_tile]),
        per_tile_bytes=per_tile, max_tile=max_tile, max_tile_bytes=int(per_tile[max_tile]),
        tiles_out_of_memory=[int(i) for i in np.nonzero(per_tile > target.bytes_per_tile)[0]],
        top_contributors=contributors[:MAX_CONTRIBUTORS],
        liveness=[LivenessPoint(s, live.steps[s].name if s < len(live.steps) else "",
                                str(live.steps[s].location) if s < len(live.steps) else "",
                                int(curve[s])) for s in range(n)],
        argument_bytes=sum(ty.nbytes for ty in inputs),
        output_bytes=sum(ty.nbytes for ty in outputs),
        alias_bytes=sum(inputs[i].nbytes for i in program.aliases if i < len(inputs)),
        temporary_bytes=int(by_category["temporaries"] + by_category["workspace"] +
                            by_category["received"]),
        other_kinds=dict(placement.held),
        host_argument_bytes=sum(a.nbytes for a in all_inputs) - sum(a.nbytes for a in inputs),
        host_output_bytes=sum(o.nbytes for o in all_outputs) - sum(o.nbytes for o in outputs),
        streaming_memory_limit=capacity(target, PINNED_HOST),
        loop_aliased_parameters=tuple(sorted(b.parameter for b in live.buffers
                                             if b.through_loop and b.parameter >= 0)))


def _on_tile(types: tuple[TensorType, ...], ids: tuple[int, ...], on_tile: dict[int, bool]
             ) -> tuple[TensorType, ...]:
    """`types`, with those of values in another memory kind than tile memory at 0 bytes."""
    return tuple(t if on_tile.get(vid, True) else TensorType((0,), t.dtype)
                 for t, vid in zip(types, ids, strict=False)) + types[len(ids):]


def _outside_shard_maps(ops: list[Op]) -> Iterator[Op]:
    """Ops of a block and of its nested regions, but not those inside shard_map bodies."""
    for op in ops:
        yield op
        if op.kind != "manual_computation":
            for region in op.regions:
                yield from _outside_shard_maps(region.ops)


def unsharded_values(program: Program) -> int:
    """Inputs and results outside shard_map bodies whose sharding is unknown, so the model
    counts them whole on every device (constants are whole on every device anyway)."""
    values = [*zip(program.input_ids, program.inputs, strict=False),
              *((rid, t) for op in _outside_shard_maps(program.ops) if op.kind != "constant"
                for rid, t in zip(op.result_ids, op.results, strict=False))]
    return sum(1 for vid, t in values if t.shape and vid not in program.shards)


def _names(program: Program) -> list[str | None]:
    names = list(program.input_names)
    return names + [None] * (len(program.inputs) - len(names))
