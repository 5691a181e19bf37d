"""IPU Model devices and their memories (one per JAX memory kind: tile memory, Streaming Memory,
host memory): what PJRT reports of them, their byte counters and the model clock."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from jax_ipu.model import TO_DEVICE, TO_HOST, engine_run_cycles, host_transfer
from jax_ipu.model.streaming import DEVICE, KINDS, NAMES, PINNED_HOST, UNPINNED_HOST, capacity
from jax_ipu.model.targets import Target

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
            # TessellateIPU's names: the tiles' clock in Hz, workers a tile, what the device is.
            "tile_clock_frequency": int(self.target.clock_hz),
            "num_worker_contexts": self.target.worker_threads,
            "target_type": "IPU_MODEL",
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


# ---- memories ---------------------------------------------------------------------------
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
        if self.kind != DEVICE and limit == 0:  # nothing to delete or donate: there is none
            return (f"Cannot place {what} ({nbytes} bytes) on {device!r}: {holds}. "
                    f"{elsewhere[0].upper()}{elsewhere[1:]} "
                    "instead, or emulate an IPU whose machine has it (jax_ipu_model_version).")
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
