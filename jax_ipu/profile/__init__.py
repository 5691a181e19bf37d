"""Reports and traces a person reads: Poplar-style graph/execution profiles, HTML, host timeline,
and the IPUs' planes in jax.profiler's traces (tracing.py, xplane.py).

The runtime asks `from_environment()` once per client; it returns None unless reports are wanted."""

from __future__ import annotations

import os
from typing import Any, Protocol

from jax_ipu.profile import tracing


class Listener(Protocol):
    """What the runtime tells of data it moves; every time is time.perf_counter() seconds."""

    def transferred(self, direction: str, nbytes: int, device: Any, start: float,
                    end: float, cycles: int) -> None: ...

    def moved(self, device: Any, nbytes: int, source: str, dest: str, start: float, end: float,
              setup_cycles: float, transfer_cycles: float) -> None: ...


class Profiler(Listener, Protocol):
    """What the runtime tells the reports' profiler, which also hears of every compile and run."""

    def compiled(self, executable: Any, start: float, end: float) -> None: ...

    def executed(self, executable: Any, device: Any, start: float, end: float) -> None: ...


class _Both:
    """Two listeners told the same."""

    def __init__(self, first: Listener, second: Listener) -> None:
        self.listeners = (first, second)

    def transferred(self, *args: Any) -> None:
        for listener in self.listeners:
            listener.transferred(*args)

    def moved(self, *args: Any) -> None:
        for listener in self.listeners:
            listener.moved(*args)


def listening(recorder: Profiler | None) -> Listener | None:
    """Who hears of transfers now: the reports' `recorder`, a running jax.profiler trace of the
    IPUs, both, or None. (Runs and reads back reach a trace from C, pjrt/csrc/profiler.c.)"""
    trace = tracing.running()
    if trace is None:
        return recorder
    return trace if recorder is None else _Both(recorder, trace)


_RECORDERS: list[Any] = []


def from_environment() -> Profiler | None:
    """The profiler POPLAR_ENGINE_OPTIONS and PVTI_OPTIONS ask for, or None."""
    from jax_ipu import config

    # Cheap exit before importing the report writers: most processes ask for nothing.
    if not (os.environ.get(config.ENGINE_OPTIONS_VAR, "").strip()
            or os.environ.get(config.PVTI_OPTIONS_VAR, "").strip()):
        return None
    from jax_ipu.profile.options import read_options
    from jax_ipu.profile.recorder import Recorder

    options = read_options()
    if not options.wanted:
        return None
    recorder = Recorder(options)
    _RECORDERS.append(recorder)
    return recorder


def flush() -> None:
    """Write pending execution profiles and timelines now instead of at exit."""
    for recorder in _RECORDERS:
        recorder.flush()
