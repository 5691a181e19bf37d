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
}
# The custom call a move between kinds inside a program lowers to, and its attribute.
MOVE_TARGET = "annotate_device_placement"
_PLACEMENT = "_xla_buffer_placement"
# Ops jax's compute_on("device_host") marks run on the host, not on the tiles.
_COMPUTE_TYPE = "_xla_compute_type"
# Ops that read only part of an operand: a host operand streams in only what they read.
_PARTIAL_READS = frozenset({"slice", "dynamic_slice", "gather"})


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
    # bytes each off-tile kind holds: arguments, and values moved or computed there
    held: dict[str, int] = field(default_factory=dict)

    def kind(self, value: int) -> str:
        return self.kinds.get(value, DEVICE)

    @property
    def off_tile(self) -> frozenset[int]:
        return frozenset(v for v, k in self.kinds.items() if k != DEVICE)

    def moves_of(self, ops: Iterable[Op]) -> list[Move]:
        return [m for op in ops for m in self.moves.get(id(op), [])]


def frontend_attribute(op: Op, name: str) -> object:
    attrs = op.attributes.get("mhlo.frontend_attributes")
    return attrs.get(name) if isinstance(attrs, dict) else None


def place(program: Program, target: Target) -> Placement:
    """The kind of every value of `program` and the moves between kinds its ops make.

    Arguments take the kinds the program declares (mhlo.memory_kind); a move op's result takes
    its placement; views, pass-through ops and loop carries keep their operand's kind; in-place
    updates keep their destination's, moving the update there; ops jax's compute_on runs on
    the host leave results in host memory; every other op runs on the tiles, so an operand in
    another kind streams in first (a slice's only what it reads)."""
    placement = Placement()
    inputs = program.per_device(program.inputs, program.input_ids)
    for vid, kind, t in zip(program.input_ids, program.input_kinds, inputs, strict=False):
        if kind != DEVICE:
            placement.kinds[vid] = kind
            placement.held[kind] = placement.held.get(kind, 0) + t.nbytes
    _place_block(program.ops, placement, target, program)
    return placement


def _nbytes(t: TensorType, vid: int, program: Program) -> int:
    return t.shard(program.shards.get(vid)).nbytes


def _place_block(ops: list[Op], placement: Placement, target: Target, program: Program) -> None:
    for op in ops:
        kinds = [placement.kind(v) for v in op.operand_ids]
        moves: list[Move] = []
        if op.kind == "custom_call" and op.attributes.get("call_target_name") == MOVE_TARGET:
            dest = str(frontend_attribute(op, _PLACEMENT) or DEVICE)
            dest = dest if dest in KINDS else DEVICE
            results = [dest] * len(op.results)
            for vid, t, kind in zip(op.operand_ids, op.operands, kinds, strict=False):
                moves.append(move(_nbytes(t, vid, program), kind, dest, target))
            for rid, t, kind in zip(op.result_ids, op.results, kinds, strict=False):
                if dest != DEVICE and kind != dest:  # a new copy there, not a view
                    placement.held[dest] = placement.held.get(dest, 0) + \
                        _nbytes(t, rid, program)
        elif frontend_attribute(op, _COMPUTE_TYPE) == "host":
            results = [UNPINNED_HOST] * len(op.results)
            for vid, t, kind in zip(op.operand_ids, op.operands, kinds, strict=False):
                moves.append(move(_nbytes(t, vid, program), kind, UNPINNED_HOST, target))
            for rid, t in zip(op.result_ids, op.results, strict=False):
                placement.held[UNPINNED_HOST] = placement.held.get(UNPINNED_HOST, 0) + \
                    _nbytes(t, rid, program)
        elif op_class(op) == "control":
            # Loops, branches and shard_map bodies: their arguments keep the operands' kinds,
            # a loop's carries keep theirs, and other results take what the body returns.
            for region in op.regions:
                for arg, kind in zip(region.arg_ids, kinds, strict=False):
                    if kind != DEVICE:
                        placement.kinds[arg] = kind
                _place_block(region.ops, placement, target, program)
            returned = op.regions[0].result_ids if op.regions else ()
            results = kinds[:len(op.results)] if op.kind == "while" else \
                [placement.kind(v) for v in returned][:len(op.results)]
        elif op_class(op) in ALIASING:
            # Views and pass-through ops (e.g. optimization_barrier) keep each operand's kind.
            results = [kinds[k] if k < len(kinds) else (kinds[0] if kinds else DEVICE)
                       for k in range(len(op.results))]
        elif op_class(op) in IN_PLACE and kinds:
            results = [kinds[0]] * len(op.results)
            for vid, t, kind in list(zip(op.operand_ids, op.operands, kinds, strict=False))[1:]:
                moves.append(move(_nbytes(t, vid, program), kind, kinds[0], target))
        else:
            results = [DEVICE] * len(op.results)
            for vid, t, kind in zip(op.operand_ids, op.operands, kinds, strict=False):
                read = op.results[0] if op.kind in _PARTIAL_READS and op.results else t
                moves.append(move(_nbytes(read, vid, program), kind, DEVICE, target))
        for rid, kind in zip(op.result_ids, results, strict=False):
            if kind != DEVICE:
                placement.kinds[rid] = kind
        moves = [m for m in moves if m.total]
        if moves:
            placement.moves[id(op)] = moves
