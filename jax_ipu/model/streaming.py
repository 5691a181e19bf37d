"""Memory kinds: where each value of a program lives (tile memory, Streaming Memory, host memory),
what each move between kinds costs, and how much of each kind a program holds.

Pure rules on the model's IR and a Target (figures in targets.py); analyze() and the runtime
call them. JAX's kinds: device (tile SRAM), pinned_host (the IPU-Machine's Streaming Memory,
behind its IPU-Gateway), unpinned_host (the host server's memory, over the host link)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from jax_ipu.model.costs import ALIASING, IN_PLACE, op_class
from jax_ipu.model.host import TO_DEVICE, TO_HOST, host_transfer
from jax_ipu.model.ir import Op, Program, TensorType
from jax_ipu.model.targets import (
    C600_STREAMING_MEMORY_BYTES_PER_MACHINE,
    IPU1_STREAMING_MEMORY_BYTES_PER_MACHINE,
    IPU2_STREAMING_MEMORY_BYTES_PER_MACHINE,
    IPU21_STREAMING_MEMORY_BYTES_PER_MACHINE,
    STREAM_COPY_MID_S,
    STREAMING_COPY_SYNCS,
    STREAMING_MEMORY_BYTES_PER_S,
    Target,
)

DEVICE = "device"
PINNED_HOST = "pinned_host"
UNPINNED_HOST = "unpinned_host"
KINDS = (DEVICE, PINNED_HOST, UNPINNED_HOST)  # a kind's PJRT id is its position
NAMES = {DEVICE: "tile memory", PINNED_HOST: "Streaming Memory", UNPINNED_HOST: "host memory"}

_STREAMING_BYTES_PER_MACHINE = {
    "ipu1": IPU1_STREAMING_MEMORY_BYTES_PER_MACHINE,
    "ipu2": IPU2_STREAMING_MEMORY_BYTES_PER_MACHINE,
    "ipu21": IPU21_STREAMING_MEMORY_BYTES_PER_MACHINE,
    "c600": C600_STREAMING_MEMORY_BYTES_PER_MACHINE,
}
# The custom call a move between kinds inside a program lowers to, and its attribute.
MOVE_TARGET = "annotate_device_placement"
_PLACEMENT = "_xla_buffer_placement"
# Ops jax's compute_on("device_host") marks run on the host, not on the tiles.
_COMPUTE_TYPE = "_xla_compute_type"
# Ops that read only part of an operand: a host operand streams in only what they read.
_PARTIAL_READS = frozenset({"slice", "dynamic_slice", "gather"})
# Annotations that compute nothing: their results stay where their operands are.
_ANNOTATIONS = frozenset({"sharding_constraint", "optimization_barrier"})
_ANNOTATION_TARGETS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape",
                                 "LayoutConstraint"})


def capacity(target: Target, kind: str) -> int | None:
    """Bytes one IPU can hold in `kind`: its tiles' memory, its share of its machine's Streaming
    Memory, or None (host memory: the model sets no limit)."""
    if kind == DEVICE:
        return target.total_bytes
    if kind == PINNED_HOST:
        return _STREAMING_BYTES_PER_MACHINE[target.version] // target.ipus_per_machine
    if kind == UNPINNED_HOST:
        return None
    raise ValueError(f"unknown memory kind {kind!r}; the kinds are {', '.join(KINDS)}")


@dataclass(frozen=True)
class Move:
    """One copy of `nbytes` from one kind to another, in cycles of the target's clock."""

    source: str
    dest: str
    nbytes: int
    setup_cycles: int  # a move's fixed part
    transfer_cycles: int  # its bytes over the gateway or the host link

    @property
    def total(self) -> int:
        return self.setup_cycles + self.transfer_cycles


def streaming_setup_cycles(target: Target) -> int:
    """Fixed cycles of one copy between tile memory and Streaming Memory: a sync and a stream
    copy's data phase, without the host's handshakes (the gateway serves it)."""
    return math.ceil(STREAM_COPY_MID_S * target.clock_hz) + \
        STREAMING_COPY_SYNCS * target.sync_cycles


def move(nbytes: int, source: str, dest: str, target: Target) -> Move:
    """What moving nbytes from `source` to `dest` costs: between tile memory and Streaming
    Memory, the gateway's rate plus a copy's set-up; to or from host memory, a stream copy
    over the host link (host.host_transfer). Nothing moves within a kind or for 0 bytes."""
    for kind in (source, dest):
        if kind not in KINDS:
            raise ValueError(f"unknown memory kind {kind!r}; the kinds are {', '.join(KINDS)}")
    if source == dest or nbytes <= 0:
        return Move(source, dest, max(nbytes, 0), 0, 0)
    if {source, dest} == {DEVICE, PINNED_HOST}:
        link = math.ceil(nbytes / STREAMING_MEMORY_BYTES_PER_S * target.clock_hz)
        return Move(source, dest, nbytes, streaming_setup_cycles(target), link)
    # Host memory is the host server's: bytes cross the host link, towards the IPU-Machine
    # (its tiles or its Streaming Memory) or back.
    copy = host_transfer(nbytes, target, TO_HOST if dest == UNPINNED_HOST else TO_DEVICE)
    return Move(source, dest, nbytes, copy.setup_cycles, copy.link_cycles)


@dataclass
class Placement:
    """Where a program's values live and the moves its ops make (per execution of each op).

    Values absent from `kinds` are in tile memory."""

    kinds: dict[int, str] = field(default_factory=dict)
    moves: dict[int, list[Move]] = field(default_factory=dict)  # id(op) -> its moves
    # value id -> (kind, bytes) of each allocation off the tiles: arguments, and values moved,
    # offloaded or computed there; `held` sums them by kind
    allocated: dict[int, tuple[str, int]] = field(default_factory=dict)
    # values the offloading itself puts in a host kind: a loop carry that the body offloads
    # (e.g. the stack of residuals remat saves in pinned_host) and the value it starts from
    forced: dict[int, str] = field(default_factory=dict)
    # constants (and views of them): part of the program, present wherever they are read
    constants: set[int] = field(default_factory=set)
    # a pass-through result -> the operand whose memory it is
    views: dict[int, int] = field(default_factory=dict)

    def storage(self, value: int) -> int:
        """The value whose allocation `value` is (itself, or what a view of it passes on)."""
        while value in self.views:
            value = self.views[value]
        return value

    def kind(self, value: int) -> str:
        return self.kinds.get(value, DEVICE)

    @property
    def off_tile(self) -> frozenset[int]:
        return frozenset(v for v, k in self.kinds.items() if k != DEVICE)

    def moves_of(self, ops: Iterable[Op]) -> list[Move]:
        return [m for op in ops for m in self.moves.get(id(op), [])]

    def allocate(self, value: int, kind: str, nbytes: int) -> None:
        if kind != DEVICE:
            self.allocated[value] = (kind, nbytes)

    @property
    def held(self) -> dict[str, int]:
        """Bytes each off-tile kind holds for the program (its arguments included)."""
        held: dict[str, int] = {}
        for kind, nbytes in self.allocated.values():
            held[kind] = held.get(kind, 0) + nbytes
        return held


def frontend_attribute(op: Op, name: str) -> object:
    attrs = op.attributes.get("mhlo.frontend_attributes")
    return attrs.get(name) if isinstance(attrs, dict) else None


def place(program: Program, target: Target) -> Placement:
    """The kind of every value of `program` and the moves between kinds its ops make.

    Arguments take the kinds the program declares (mhlo.memory_kind); a move op's result takes
    its placement; views, pass-through ops and loop carries keep their operand's kind; an
    in-place update keeps its destination's kind, moving the update there, unless it writes an
    offloaded value into tile memory: then, as XLA's host offloader does, the destination is
    offloaded too (and a loop carrying it keeps it there from the start); ops jax's compute_on
    runs on the host leave results in host memory; every other op runs on the tiles, so an
    operand in another kind streams in first (a slice's only what it reads)."""
    forced: dict[int, str] = {}
    for _ in range(1 + sum(1 for op in program.walk() if op.kind == "while")):
        placement = Placement(forced=dict(forced))
        inputs = program.per_device(program.inputs, program.input_ids)
        for vid, kind, t in zip(program.input_ids, program.input_kinds, inputs, strict=False):
            if kind != DEVICE:
                placement.kinds[vid] = kind
                placement.allocate(vid, kind, t.nbytes)
        _place_block(program.ops, placement, target, program)
        if placement.forced == forced:
            break
        forced = placement.forced
    # An output aliasing a donated argument of its kind reuses that argument's memory.
    for i, o in program.aliases.items():
        if i < len(program.input_ids) and o < len(program.output_ids):
            arg, out = program.input_ids[i], program.output_ids[o]
            out = placement.storage(out)
            if out != arg and placement.kind(out) == placement.kind(arg):
                placement.allocated.pop(out, None)
    return placement


def _nbytes(t: TensorType, vid: int, program: Program) -> int:
    return t.shard(program.shards.get(vid)).nbytes


def _updates(op: Op) -> list[int]:
    """Positions of the operands an in-place op writes into its first operand."""
    if op.kind == "scatter":  # inputs..., indices, updates...
        n = (len(op.operand_ids) - 1) // 2
        return list(range(n + 1, len(op.operand_ids)))
    return [1] if len(op.operand_ids) > 1 else []


def _passes_through(op: Op) -> bool:
    """Whether an op's results are its operands, in the same memory: views, annotations."""
    return op_class(op) in ALIASING or op.kind in _ANNOTATIONS or (
        op.kind == "custom_call" and op.attributes.get("call_target_name") in _ANNOTATION_TARGETS)


def _place_block(ops: list[Op], placement: Placement, target: Target, program: Program) -> None:
    for op in ops:
        kinds = [placement.kind(v) for v in op.operand_ids]
        moves: list[Move] = []
        fresh = False  # whether the results are new allocations (not views of operands)
        if op.kind == "constant" or (_passes_through(op) and op.operand_ids and all(
                v in placement.constants for v in op.operand_ids)):
            placement.constants.update(op.result_ids)
            results = [DEVICE] * len(op.results)
        elif op.kind == "custom_call" and op.attributes.get("call_target_name") == MOVE_TARGET:
            dest = str(frontend_attribute(op, _PLACEMENT) or DEVICE)
            dest = dest if dest in KINDS else DEVICE
            results = [dest] * len(op.results)
            for vid, t, kind in zip(op.operand_ids, op.operands, kinds, strict=False):
                moves.append(move(_nbytes(t, vid, program), kind, dest, target))
            fresh = any(kind != dest for kind in kinds)
            if not fresh and op.operand_ids:  # already there: the same memory
                placement.views.update(zip(op.result_ids, op.operand_ids, strict=False))
        elif frontend_attribute(op, _COMPUTE_TYPE) == "host":
            results = [UNPINNED_HOST] * len(op.results)
            for vid, t, kind in zip(op.operand_ids, op.operands, kinds, strict=False):
                if vid not in placement.constants:
                    moves.append(move(_nbytes(t, vid, program), kind, UNPINNED_HOST, target))
            fresh = True
        elif op_class(op) == "control":
            results = _place_control(op, kinds, placement, target, program)
        elif _passes_through(op):
            # Views and pass-through ops (e.g. optimization_barrier) keep each operand's kind.
            results = [kinds[k] if k < len(kinds) else (kinds[0] if kinds else DEVICE)
                       for k in range(len(op.results))]
            for k, rid in enumerate(op.result_ids):
                if op.operand_ids:
                    placement.views[rid] = op.operand_ids[min(k, len(op.operand_ids) - 1)]
        elif op_class(op) in IN_PLACE and kinds:
            written = [kinds[i] for i in _updates(op) if i < len(kinds)]
            dest = kinds[0]
            offloaded = next((k for k in written if k != DEVICE), None)
            if dest == DEVICE and offloaded:  # the destination goes where its updates are
                dest = offloaded
                moves.append(move(_nbytes(op.operands[0], op.operand_ids[0], program), DEVICE,
                                  dest, target))
            results = [dest] * len(op.results)
            for i in _updates(op):
                moves.append(move(_nbytes(op.operands[i], op.operand_ids[i], program), kinds[i],
                                  dest, target))
        else:
            results = [DEVICE] * len(op.results)
            for vid, t, kind in zip(op.operand_ids, op.operands, kinds, strict=False):
                read = op.results[0] if op.kind in _PARTIAL_READS and op.results else t
                moves.append(move(_nbytes(read, vid, program), kind, DEVICE, target))
            fresh = True
        for rid, t, kind in zip(op.result_ids, op.results, results, strict=False):
            kind = placement.forced.get(rid, kind)
            if kind != DEVICE:
                placement.kinds[rid] = kind
                if fresh or (rid in placement.forced and op.kind != "while"):
                    placement.allocate(rid, kind, _nbytes(t, rid, program))
        moves = [m for m in moves if m.total]
        if moves:
            placement.moves[id(op)] = moves


def _place_control(op: Op, kinds: list[str], placement: Placement, target: Target,
                   program: Program) -> list[str]:
    """Kinds of a loop's, branch's or shard_map's results; places its bodies. Region arguments
    take the operands' kinds; a loop's carries keep theirs, unless its body returns a carry in a
    host kind: then that carry, and the value it starts from, are offloaded (placement.forced,
    taken on the next pass)."""
    for region in op.regions:
        for arg, kind in zip(region.arg_ids, kinds, strict=False):
            kind = placement.forced.get(arg, kind)
            if kind != DEVICE:
                placement.kinds[arg] = kind
        _place_block(region.ops, placement, target, program)
    if op.kind != "while":
        returned = op.regions[0].result_ids if op.regions else ()
        return [placement.kind(v) for v in returned][:len(op.results)]
    body = op.regions[-1]
    results = []
    for k, kind in enumerate(kinds[:len(op.results)]):
        back = placement.kind(body.result_ids[k]) if k < len(body.result_ids) else kind
        if kind == DEVICE and back != DEVICE:
            for vid in (op.operand_ids[k], op.result_ids[k],
                        *(r.arg_ids[k] for r in op.regions if k < len(r.arg_ids))):
                placement.forced[vid] = back
            kind = back
        results.append(kind)
    return results
