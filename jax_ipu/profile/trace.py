"""The host timeline PVTI_OPTIONS asks for, as Chrome trace-event JSON (Perfetto, chrome://tracing).

Complete ("X") events with microsecond ts/dur on one process, a named thread per activity."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

# Events kept in memory; a long training loop would otherwise grow the file without bound.
MAX_EVENTS = 200_000


class Timeline:
    """Host-side events of this process, in trace-event form."""

    def __init__(self, origin: float) -> None:
        self.origin = origin  # time.perf_counter() at ts = 0
        self.wall_origin = time.time()
        self.pid = os.getpid()
        self.events: list[dict[str, Any]] = []
        self.dropped = 0
        self.threads: dict[str, int] = {}
        self.lock = threading.Lock()

    def _tid(self, thread: str) -> int:
        if thread not in self.threads:
            self.threads[thread] = len(self.threads) + 1
        return self.threads[thread]

    def add(self, name: str, category: str, thread: str, start: float, end: float,
            args: dict[str, Any]) -> None:
        """Record one complete event; start and end are time.perf_counter() seconds."""
        with self.lock:
            if len(self.events) >= MAX_EVENTS:
                self.dropped += 1
                return
            self.events.append({
                "name": name, "cat": category, "ph": "X", "pid": self.pid,
                "tid": self._tid(thread), "ts": (start - self.origin) * 1e6,
                "dur": max(end - start, 0.0) * 1e6, "args": args,
            })

    def to_dict(self) -> dict[str, Any]:
        """The whole trace: metadata events naming the process and threads, then the events."""
        with self.lock:
            meta = [{"name": "process_name", "ph": "M", "pid": self.pid, "tid": 0,
                     "args": {"name": f"jax-ipu host (pid {self.pid})"}}]
            meta += [{"name": "thread_name", "ph": "M", "pid": self.pid, "tid": tid,
                      "args": {"name": thread}} for thread, tid in self.threads.items()]
            return {
                "traceEvents": meta + list(self.events),
                "displayTimeUnit": "ms",
                "otherData": {"producer": "jax-ipu", "wall_clock_origin": self.wall_origin,
                              "dropped_events": self.dropped},
            }

    def write(self, directory: Path) -> Path:
        """Write host_timeline_<pid>.json into `directory`; returns its path."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"host_timeline_{self.pid}.json"
        path.write_text(json.dumps(self.to_dict()))
        return path
