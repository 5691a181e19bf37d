"""The small program IR the IPU Model judges: tensors, ops, source locations, programs.

compiler/program.py builds it from StableHLO; model/ reads it without importing jax or MLIR."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from jax_ipu.dtypes import itemsize


@dataclass(frozen=True)
class TensorType:
    """Shape and dtype of one value; dtype is a numpy dtype name, or 'token'."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def size(self) -> int:
        """Number of elements (dynamic dimensions, stored as -1, count as 1; zero-size is 0)."""
        n = 1
        for d in self.shape:
            n *= d if d >= 0 else 1
        return n

    @property
    def itemsize(self) -> int:
        """Bytes per element as stored on the tile (unknown dtypes count as 4 bytes)."""
        return itemsize(self.dtype)

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def shard(self, shards: tuple[int, ...] | None) -> TensorType:
        """The part one device holds when dimension i is split over shards[i] devices (the
        largest part when uneven); the whole tensor when there is no sharding."""
        if shards is None or len(shards) != len(self.shape):
            return self
        return TensorType(tuple(-(-d // n) if d >= 0 else d
                                for d, n in zip(self.shape, shards, strict=True)), self.dtype)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(str(d) for d in self.shape)}]"


@dataclass(frozen=True)
class SourceLocation:
    """The user's source line an op came from, and the JAX name stack (e.g. 'jit(f)/dot')."""

    file: str | None = None
    line: int | None = None
    function: str | None = None
    scope: str | None = None
    # Every frame of the op's traceback outside jax (file, line, function), innermost first:
    # file/line/function are the first; the rest say who called it (e.g. a library's caller).
    frames: tuple[tuple[str, int, str | None], ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        if self.file is None:
            return "<unknown>"
        where = f"{self.file}:{self.line}"
        return f"{where} ({self.function})" if self.function else where


@dataclass
class Region:
    """One region of an op (a while body, a reduce body, a case branch)."""

    arg_ids: tuple[int, ...]
    ops: list[Op]
    result_ids: tuple[int, ...] = ()


@dataclass
class Op:
    """One operation. Values are ints unique over the whole program.

    func.call to private functions is inlined by the reader, so calls never appear here:
    the callee's ops join the caller's list, keeping their own source locations."""

    name: str
    operands: tuple[TensorType, ...]
    results: tuple[TensorType, ...]
    operand_ids: tuple[int, ...] = ()
    result_ids: tuple[int, ...] = ()
    attributes: dict[str, Any] = field(default_factory=dict)
    location: SourceLocation = field(default_factory=SourceLocation)
    regions: list[Region] = field(default_factory=list)
    trip_count: int | None = None
    # What one tile runs for a tile-mapped vertex (jax_ipu.tile's tile_map): its lax
    # primitive's one-tile program, costed on one tile. Empty for every other op.
    vertex_ops: list[Op] = field(default_factory=list)

    @functools.cached_property
    def kind(self) -> str:
        """The op name without its dialect ('stablehlo.add' -> 'add'); asked for often."""
        return self.name.split(".", 1)[-1]

    def walk(self):
        """This op, then every op nested in its regions, depth first."""
        yield self
        for region in self.regions:
            for op in region.ops:
                yield from op.walk()


@dataclass
class Program:
    """One jitted function: entry signature, donation, and its ops in program order."""

    name: str
    inputs: tuple[TensorType, ...]
    outputs: tuple[TensorType, ...]
    ops: list[Op]
    input_ids: tuple[int, ...] = ()
    output_ids: tuple[int, ...] = ()
    input_names: tuple[str | None, ...] = ()
    # input index -> output index it aliases (tf.aliasing_output)
    aliases: dict[int, int] = field(default_factory=dict)
    # inputs JAX may reuse for any output (jax.buffer_donor), plus the aliased ones
    donated_inputs: frozenset[int] = frozenset()
    num_replicas: int | None = None
    num_partitions: int | None = None
    # JAX memory kind of each input and output (mhlo.memory_kind): "device" (tile memory),
    # "pinned_host" (Streaming Memory) or "unpinned_host" (host memory); empty: all "device"
    input_kinds: tuple[str, ...] = ()
    output_kinds: tuple[str, ...] = ()
    # value id -> number of shards of each dimension, for values outside shard_map bodies whose
    # sharding over the program's devices is known (shapes in the IR are global there, while
    # a device holds one shard; values inside a body already have per-device shapes)
    shards: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def per_device(self, types: tuple[TensorType, ...], ids: tuple[int, ...]
                   ) -> tuple[TensorType, ...]:
        """What one device holds of the values `ids` of `types` (e.g. inputs, input_ids).

        Hand-built programs may lack ids: their values are then taken whole."""
        if len(ids) != len(types):
            return types
        return tuple(t.shard(self.shards.get(v)) for t, v in zip(types, ids, strict=True))

    def walk(self):
        """Every op, nested ones included, depth first in program order."""
        for op in self.ops:
            yield from op.walk()
