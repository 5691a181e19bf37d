"""Reports and traces a person reads: Poplar-style graph/execution profiles, HTML, host timeline.

The runtime asks `from_environment()` once per client; it returns None unless reports are wanted."""

from __future__ import annotations

from typing import Any, Protocol


class Profiler(Protocol):
    """What the runtime tells the profiler; every time is time.perf_counter() seconds."""

    def compiled(self, executable: Any, start: float, end: float) -> None: ...

    def executed(self, executable: Any, device: Any, start: float, end: float) -> None: ...

    def transferred(self, direction: str, nbytes: int, device: Any, start: float,
                    end: float) -> None: ...


def from_environment() -> Profiler | None:
    """The profiler POPLAR_ENGINE_OPTIONS and PVTI_OPTIONS ask for, or None."""
    return None
