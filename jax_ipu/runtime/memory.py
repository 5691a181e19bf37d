"""The memories of an IPU Model device, one per JAX memory kind: tile memory, Streaming Memory,
host memory. Each holds the counters of its buffers' bytes (the PJRT layer updates them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from jax_ipu.model.streaming import KINDS, NAMES, capacity

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

    def __repr__(self) -> str:
        return f"IpuMemory(id={self.id}, kind={self.kind}, device={self.device.id})"


def memories_of(device: IpuDevice) -> dict[str, IpuMemory]:
    """A device's memories by kind, in KINDS order (device first: the default memory), with ids
    unique in the client (device ids are)."""
    return {kind: IpuMemory(device, kind, device.id * len(KINDS) + i)
            for i, kind in enumerate(KINDS)}

