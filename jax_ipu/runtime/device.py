"""IPU Model devices and their memories: what PJRT reports about them, and the model clock.

A memory's byte counters and a device's clock are int64 arrays that the PJRT layer updates in
place."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from jax_ipu.model import TO_DEVICE, TO_HOST, host_transfer
from jax_ipu.model.targets import Target

# What the model clock counts, in cycles of the device's target clock: the programs' own phases
# on the chip (host_exchange: their stream copies, e.g. callbacks and infeeds), and the host side
# of each call (call: starting a program and hearing it end) and of each transfer to or from
# the host (stream_setup: a stream copy's fixed handshakes; the links: its bytes).
CLOCK_FIELDS = ("compute", "exchange", "sync", "host_exchange", "call", "stream_setup",
                "host_to_device", "device_to_host")
# The clock field of each direction's bytes over the host link.
_LINK_FIELD = {TO_DEVICE: "host_to_device", TO_HOST: "device_to_host"}
# The layout of a memory's counters (the PJRT layer's buffers update them).
STATS_FIELDS = ("bytes_in_use", "peak_bytes_in_use", "num_allocs", "largest_alloc_size")


@dataclass(frozen=True)
class MemoryStats:
    """Bytes held in one memory, in the model's sizes."""

    bytes_in_use: int
    peak_bytes_in_use: int
    num_allocs: int
    largest_alloc_size: int
    bytes_limit: int


class IpuMemory:
    """The tile memory of one device (PJRT memory kind 'device'): its bytes and their counters."""

    kind = "device"

    def __init__(self, device: IpuDevice, bytes_limit: int) -> None:
        self.device = device
        self.id = device.id
        self.bytes_limit = bytes_limit
        self.stats_counters = np.zeros(len(STATS_FIELDS), np.int64)
        self.handle: Any = None  # set by the PJRT layer

    @property
    def stats(self) -> MemoryStats:
        return MemoryStats(*(int(v) for v in self.stats_counters), bytes_limit=self.bytes_limit)

    def reset_peak(self) -> None:
        self.stats_counters[1] = self.stats_counters[0]

    @property
    def bytes_free(self) -> int:
        return self.bytes_limit - int(self.stats_counters[0])

    def shortfall(self, nbytes: int, what: str, freed: int = 0) -> str:
        """Why `what`, `nbytes` more, does not fit here once `freed` bytes are freed (by the
        inputs a call donates), and what to do: the words of RESOURCE_EXHAUSTED."""
        target = self.device.target
        in_use = int(self.stats_counters[0])
        donated = f", of which {freed} are freed by donated inputs" if freed else ""
        return (
            f"Cannot place {what} ({nbytes} bytes) on {self.device!r}: its tile memory holds "
            f"{self.bytes_limit} bytes ({target.num_tiles} tiles x {target.bytes_per_tile}) and "
            f"{in_use} are in use{donated}. Delete arrays you no longer need (x.delete(), or "
            "drop the last reference), donate the inputs a call replaces (donate_argnums), "
            "keep arrays on the host (or on cpu), or shard them over several IPUs.")

    def __repr__(self) -> str:
        return f"IpuMemory(id={self.id}, kind={self.kind}, device={self.device.id})"


class IpuDevice:
    """One emulated IPU: its target chip, the CPU device that holds its data, and its clock."""

    def __init__(self, device_id: int, target: Target, cpu_device: Any, process_index: int,
                 local_hardware_id: int, client: Any) -> None:
        self.id = device_id
        self.local_hardware_id = local_hardware_id
        self.process_index = process_index
        self.target = target
        self.cpu_device = cpu_device
        self.client = client  # the IpuClient that made it
        self.memory = IpuMemory(self, target.num_tiles * target.bytes_per_tile)
        self.clock = np.zeros(len(CLOCK_FIELDS), np.int64)
        self.handle: Any = None  # set by the PJRT layer

    @property
    def kind(self) -> str:
        return f"IPU Model {self.target.version}"

    def advance(self, field: str, cycles: int) -> None:
        """Move the model clock on by `cycles` spent on `field` (one of CLOCK_FIELDS)."""
        self.clock[CLOCK_FIELDS.index(field)] += cycles

    def transfer_advance(self, nbytes: int, direction: str) -> np.ndarray:
        """What one stream copy of `nbytes` in `direction` (model.TO_DEVICE or TO_HOST) adds
        to this device's clock, by CLOCK_FIELDS (read-only)."""
        return _transfer_advance(self.target, nbytes, direction)

    def read_advance(self, nbytes: int) -> np.ndarray:
        """What reading `nbytes` of this device back to the host adds to its clock."""
        return self.transfer_advance(nbytes, TO_HOST)

    def charge(self, advance: np.ndarray) -> int:
        """Move the clock on by `advance` (by CLOCK_FIELDS); the cycles it adds."""
        self.clock += advance
        return int(advance.sum())

    @property
    def cycles(self) -> int:
        return int(self.clock.sum())

    @property
    def seconds(self) -> float:
        """Model time elapsed on this device, in seconds at the target clock."""
        return self.cycles / self.target.clock_hz

    def clock_breakdown(self) -> dict[str, int]:
        return {name: int(v) for name, v in zip(CLOCK_FIELDS, self.clock, strict=True)}

    def attributes(self) -> dict[str, Any]:
        """Attributes jax exposes on the device object (device.num_tiles, device.version, ...)."""
        return {
            "num_tiles": self.target.num_tiles,
            "version": self.target.version,
            "tile_memory_bytes": self.target.bytes_per_tile,
            "clock_hz": int(self.target.clock_hz),
            "emulator": "IPU Model",
        }

    def __repr__(self) -> str:
        target = self.target
        return f"IpuDevice(id={self.id}, num_tiles={target.num_tiles}, version={target.version})"


@functools.lru_cache(maxsize=4096)
def _transfer_advance(target: Target, nbytes: int, direction: str) -> np.ndarray:
    transfer = host_transfer(nbytes, target, direction)
    advance = np.zeros(len(CLOCK_FIELDS), np.int64)
    advance[CLOCK_FIELDS.index("stream_setup")] = transfer.setup_cycles
    advance[CLOCK_FIELDS.index(_LINK_FIELD[direction])] = transfer.link_cycles
    advance.flags.writeable = False  # shared by every buffer of this size
    return advance
