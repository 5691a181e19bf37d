"""IPU Model devices: what PJRT reports about them, their memories (one per JAX memory kind,
memory.py) and the model clock, an int64 array that the PJRT layer updates in place."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from jax_ipu.model import TO_DEVICE, TO_HOST, engine_run_cycles, host_transfer
from jax_ipu.model.streaming import DEVICE, PINNED_HOST
from jax_ipu.model.targets import Target
from jax_ipu.runtime.memory import IpuMemory, MemoryStats, memories_of

# What the model clock counts, in cycles of the device's target clock: the programs' own phases
# on the chip (host_exchange: their stream copies, e.g. callbacks and infeeds; streaming: their
# moves between memory kinds, streaming_setup their fixed parts), and the host side of each call
# (call: the Engine::run of its main program) and of each transfer to or from the host
# (stream_setup: a stream copy's fixed handshakes; the links: its bytes; host_staging: the host
# copying them between the user's array and the stream buffer; read_back_run: the Engine::run
# of the device-to-host program that reading back an array kept on the device takes).
CLOCK_FIELDS = ("compute", "exchange", "sync", "host_exchange", "call", "stream_setup",
                "host_to_device", "device_to_host", "host_staging", "streaming_setup",
                "streaming", "read_back_run")
# The clock field of each direction's bytes over the host link.
_LINK_FIELD = {TO_DEVICE: "host_to_device", TO_HOST: "device_to_host"}


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
        self.memories = memories_of(self)
        self.memory = self.memories[DEVICE]  # the default: tile memory
        self.clock = np.zeros(len(CLOCK_FIELDS), np.int64)
        self.handle: Any = None  # set by the PJRT layer

    @property
    def kind(self) -> str:
        return f"IPU Model {self.target.version}"

    def memory_of(self, kind: str) -> IpuMemory:
        """This device's memory of a JAX memory kind (device, pinned_host, unpinned_host)."""
        return self.memories[kind]

    @property
    def stats(self) -> MemoryStats:
        """Tile memory's figures (JAX's default memory)."""
        return self.memory.stats

    @property
    def streaming_stats(self) -> MemoryStats:
        """Streaming Memory's figures (memory kind pinned_host)."""
        return self.memories[PINNED_HOST].stats

    def reset_peak(self) -> None:
        for memory in self.memories.values():
            memory.reset_peak()

    def advance(self, field: str, cycles: int) -> None:
        """Move the model clock on by `cycles` spent on `field` (one of CLOCK_FIELDS)."""
        self.clock[CLOCK_FIELDS.index(field)] += cycles

    def transfer_advance(self, nbytes: int, direction: str) -> np.ndarray:
        """What one stream copy of `nbytes` in `direction` (model.TO_DEVICE or TO_HOST) adds
        to this device's clock, by CLOCK_FIELDS (read-only). Which copies are stream copies is
        each memory's to say (IpuMemory.transfer_advance)."""
        return _transfer_advance(self.target, nbytes, direction)

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
    advance[CLOCK_FIELDS.index("host_staging")] = transfer.staging_cycles
    if direction == TO_HOST and nbytes > 0:  # a read streams back through a program of its own
        advance[CLOCK_FIELDS.index("read_back_run")] = engine_run_cycles(target)
    advance.flags.writeable = False  # shared by every buffer of this size
    return advance
