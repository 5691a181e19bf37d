"""The memories of an IPU Model device, one per JAX memory kind: tile memory, Streaming Memory,
host memory. Each holds the counters of its buffers' bytes (the PJRT layer updates them in place)
and decides what moving its bytes to or from the host costs."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from jax_ipu.model import TO_HOST
from jax_ipu.model.streaming import DEVICE, KINDS, NAMES, UNPINNED_HOST, capacity

if TYPE_CHECKING:
    from jax_ipu.runtime.device import IpuDevice

# The layout of a memory's counters (the PJRT layer's buffers update them in place).
STATS_FIELDS = ("bytes_in_use", "peak_bytes_in_use", "num_allocs", "largest_alloc_size")


@dataclass(frozen=True)
class MemoryStats:
    """Bytes held in one memory, in the model's sizes; bytes_limit None: no modelled limit."""

    bytes_in_use: int
    peak_bytes_in_use: int
    num_allocs: int
    largest_alloc_size: int
    bytes_limit: int | None


class IpuMemory:
    """One memory of one device (a PJRT memory): `kind` is JAX's memory kind, its id the kind's
    position in KINDS (device, pinned_host, unpinned_host)."""

    def __init__(self, device: IpuDevice, kind: str, memory_id: int) -> None:
        self.device = device
        self.kind = kind
        self.kind_id = KINDS.index(kind)
        self.id = memory_id
        self.bytes_limit = capacity(device.target, kind)
        self.stats_counters = np.zeros(len(STATS_FIELDS), np.int64)
        self.handle: Any = None  # set by the PJRT layer

    @property
    def description(self) -> str:
        """What the kind is on the chip: "tile memory", "Streaming Memory", "host memory"."""
        return NAMES[self.kind]

    @property
    def stats(self) -> MemoryStats:
        return MemoryStats(*(int(v) for v in self.stats_counters), bytes_limit=self.bytes_limit)

    @property
    def bytes_free(self) -> int | None:
        if self.bytes_limit is None:
            return None
        return self.bytes_limit - int(self.stats_counters[0])

    def reset_peak(self) -> None:
        self.stats_counters[1] = self.stats_counters[0]

    def transfer_advance(self, nbytes: int, direction: str) -> np.ndarray:
        """What one copy of `nbytes` between the host and this memory in `direction`
        (model.TO_DEVICE or TO_HOST) adds to its device's clock, by CLOCK_FIELDS (read-only):
        a stream copy over the host link, or nothing for host memory (the host's own)."""
        if self.kind == UNPINNED_HOST:
            return _no_advance(len(self.device.clock))
        return self.device.transfer_advance(nbytes, direction)

    def read_advance(self, nbytes: int) -> np.ndarray:
        """What the host reading `nbytes` of this memory adds to its device's clock: the one
        rule for every read (ToHostBuffer, in-place views, copies to another device)."""
        return self.transfer_advance(nbytes, TO_HOST)

    def shortfall(self, nbytes: int, what: str, freed: int = 0) -> str:
        """Why `what`, `nbytes` more, does not fit here once `freed` bytes are freed (by the
        inputs a call donates), and what to do: the words of RESOURCE_EXHAUSTED."""
        device, limit = self.device, self.bytes_limit or 0
        in_use = int(self.stats_counters[0])
        if self.kind == DEVICE:
            holds = (f"its tile memory holds {limit} bytes ({device.target.num_tiles} tiles x "
                     f"{device.target.bytes_per_tile})")
            elsewhere = ("put them in Streaming Memory (memory_kind='pinned_host'), keep them on "
                         "the host (or on cpu)")
        else:
            holds = (f"an {device.target.version} has no {self.description} (memory kind "
                     f"{self.kind}): a C2 PCIe card has none" if limit == 0 else
                     f"its {self.description} (memory kind {self.kind}) holds {limit} bytes, "
                     f"its share of its {device.target.version} machine's")
            elsewhere = "keep them in host memory (memory_kind='unpinned_host') or on cpu"
        donated = f", of which {freed} are freed by donated inputs" if freed else ""
        return (
            f"Cannot place {what} ({nbytes} bytes) on {device!r}: {holds} and {in_use} are in "
            f"use{donated}. Delete arrays you no longer need (x.delete(), or drop the last "
            f"reference), donate the inputs a call replaces (donate_argnums), {elsewhere}, or "
            "shard them over several IPUs.")

    def __repr__(self) -> str:
        return f"IpuMemory(id={self.id}, kind={self.kind}, device={self.device.id})"


def memories_of(device: IpuDevice) -> dict[str, IpuMemory]:
    """A device's memories by kind, in KINDS order (device first: the default memory), with ids
    unique in the client (device ids are)."""
    return {kind: IpuMemory(device, kind, device.id * len(KINDS) + i)
            for i, kind in enumerate(KINDS)}


@functools.cache
def _no_advance(num_fields: int) -> np.ndarray:
    advance = np.zeros(num_fields, np.int64)
    advance.flags.writeable = False  # shared by every buffer in host memory
    return advance
