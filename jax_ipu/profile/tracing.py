"""A jax.profiler trace of the IPUs: what it records while it runs, and the XSpace it hands back.

jax.profiler drives one TraceSession per trace through the PJRT profiler extension (the
Profiler_* slots). While one runs, Execute and reads back (in C) and the runtime's transfers and
moves between memory kinds (through profile.listening()) append to its `events`:
  ("run", executable, start_s, end_s)
  ("transfer", direction, device, nbytes, start_s, end_s, cycles)
  ("move", device, nbytes, source_kind, dest_kind, start_s, end_s, setup_cycles, transfer_cycles)
with times in time.perf_counter() seconds; profile/xplane.py lays them out when it is collected."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger(__name__)

# Events one trace keeps (a run is one, whatever its ops); later ones are counted, not kept.
MAX_EVENTS = 200_000

_running: TraceSession | None = None


def running() -> TraceSession | None:
    """The trace recording now, if any."""
    return _running


def _clock_pair() -> tuple[int, float]:
    """(time.time_ns(), time.perf_counter()) at one moment: of a few tries, the one read in the
    shortest bracket of perf_counter, with its middle (a preemption between the two reads would
    shift every event of the trace against the host's)."""
    best = (float("inf"), 0, 0.0)
    for _ in range(5):
        before = time.perf_counter()
        wall = time.time_ns()
        after = time.perf_counter()
        if after - before < best[0]:
            best = (after - before, wall, (before + after) / 2)
    return best[1], best[2]


class TraceSession:
    """One jax.profiler session's view of the IPUs."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.dropped = 0
        self.origin = _clock_pair()
        self.collected: bytes | None = None

    def start(self) -> None:
        """Record from now on."""
        global _running
        self.events.clear()
        self.dropped = 0
        self.collected = None
        self.origin = _clock_pair()
        _running = self

    def stop(self, dropped: int) -> None:
        """Stop recording; `dropped` more events were left out by the C side."""
        global _running
        if _running is self:
            _running = None
        self.dropped += dropped

    def transferred(self, direction: str, nbytes: int, device: Any, start: float, end: float,
                    cycles: int) -> None:
        self._append(("transfer", direction, device, nbytes, start, end, cycles))

    def moved(self, device: Any, nbytes: int, source: str, dest: str, start: float, end: float,
              setup_cycles: float, transfer_cycles: float) -> None:
        self._append(("move", device, nbytes, source, dest, start, end, setup_cycles,
                      transfer_cycles))

    def _append(self, event: tuple[Any, ...]) -> None:
        if len(self.events) < MAX_EVENTS:
            self.events.append(event)
        else:
            self.dropped += 1

    def collect(self, devices: Sequence[Any]) -> bytes:
        """The serialized XSpace of what was recorded, with a plane for each of `devices` (the
        process's IPUs) and for any other device the events name; made once, when first asked
        for, and the events let go then (and with them the executables they hold)."""
        if self.collected is None:
            from jax_ipu.profile.xplane import xspace

            self.collected, warnings = xspace(self.events, devices, self.origin, self.dropped)
            self.events.clear()
            for warning in warnings:
                logger.warning("%s", warning)
        return self.collected
