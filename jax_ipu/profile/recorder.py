"""The profiler the runtime talks to: writes each program's report folder and the host timeline.

Graph reports are written at compile; runs are kept in memory and written by flush() (at exit)."""

from __future__ import annotations

import atexit
import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jax_ipu.config import ENGINE_OPTIONS_VAR
from jax_ipu.profile.execution import MAX_RUNS_LISTED, Run, execution_profile
from jax_ipu.profile.graph import graph_profile
from jax_ipu.profile.html import render_html
from jax_ipu.profile.options import ProfileOptions
from jax_ipu.profile.summary import render
from jax_ipu.profile.trace import Timeline

logger = logging.getLogger(__name__)

GRAPH_FILE = "graph.json"
EXECUTION_FILE = "execution.json"
SUMMARY_FILE = "summary.txt"
HTML_FILE = "report.html"


def folder_name(program: str, fingerprint: str) -> str:
    """<program>_<8 hex digits>: readable, unique per program text, safe on every filesystem."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", program).strip("._")[:60] or "program"
    return f"{safe}_{fingerprint[:8]}"


@dataclass
class _Reports:
    """What is known about one program: its graph profile and the runs seen so far."""

    graph: dict[str, Any]
    folder: Path
    runs: list[Run] = field(default_factory=list)
    run_count: int = 0
    dirty: bool = False


class Recorder:
    """Implements jax_ipu.profile.Profiler for the options the environment asked for."""

    def __init__(self, options: ProfileOptions) -> None:
        self.options = options
        self.origin = time.perf_counter()
        self.timeline = Timeline(self.origin) if options.timeline else None
        self.programs: dict[str, _Reports] = {}
        self.lock = threading.Lock()
        self.unwritable = False  # a report could not be written: said once, not per program
        atexit.register(self.flush)

    def compiled(self, executable: Any, start: float, end: float) -> None:
        report = executable.report
        if self.timeline:
            self.timeline.add(
                f"compile {executable.name}", "compile", "compile", start, end,
                {"program": executable.name, "fingerprint": executable.fingerprint,
                 "cycles_per_run": executable.cycles, "peak_bytes": report.memory.peak_bytes,
                 "fits": not report.memory.out_of_memory,
                 "note": "includes loading: the IPU Model has no separate load step"})
        if not self.options.reports:
            return
        graph = graph_profile(report, executable.program, executable.fingerprint,
                              self.options.flops)
        folder = self.options.directory / folder_name(executable.name, executable.fingerprint)
        entry = _Reports(graph, folder)
        with self.lock:
            self.programs[executable.fingerprint] = entry
        self._write(entry)

    def executed(self, executable: Any, device: Any, start: float, end: float) -> None:
        if self.timeline:
            self.timeline.add(
                f"execute {executable.name}", "execute", f"execute ipu{device.id}", start, end,
                {"program": executable.name, "model_cycles": executable.cycles,
                 "device_clock_cycles": device.cycles})
        if not self.options.execution:
            return
        with self.lock:
            entry = self.programs.get(executable.fingerprint)
            if entry is None:
                return
            if len(entry.runs) < MAX_RUNS_LISTED:
                entry.runs.append(Run(device.id, start, end, device.cycles))
            entry.run_count += 1
            entry.dirty = True

    def transferred(self, direction: str, nbytes: int, device: Any, start: float,
                    end: float, cycles: int) -> None:
        if self.timeline:
            self.timeline.add(direction.replace("_", " "), "transfer", f"transfers ipu{device.id}",
                              start, end, {"bytes": nbytes, "device": device.id,
                                           "model_cycles": cycles})

    def moved(self, device: Any, nbytes: int, source: str, dest: str, start: float, end: float,
              setup_cycles: float, transfer_cycles: float) -> None:
        if self.timeline:
            self.timeline.add(f"move {source} -> {dest}", "transfer", f"transfers ipu{device.id}",
                              start, end, {"bytes": nbytes, "device": device.id,
                                           "model_cycles": setup_cycles + transfer_cycles})

    def flush(self) -> None:
        """Write the execution profiles of programs that ran since the last flush, and the
        timeline. Called at exit; call it earlier to read the reports while the process runs."""
        with self.lock:
            pending = [e for e in self.programs.values() if e.dirty]
            for entry in pending:
                entry.dirty = False
        for entry in pending:
            self._write(entry)
        if self.timeline:
            try:
                path = self.timeline.write(self.options.timeline_directory)
                logger.info("host timeline written to %s", path)
            except OSError:
                logger.exception("could not write the host timeline to %s",
                                 self.options.timeline_directory)

    def _write(self, entry: _Reports) -> None:
        """(Re)write a program's folder: the JSON profiles asked for, the summary and the page."""
        graph = entry.graph if self.options.graph else None
        execution = None
        if self.options.execution and entry.run_count:
            execution = execution_profile(entry.graph, list(entry.runs), entry.run_count,
                                          self.origin)
        try:
            entry.folder.mkdir(parents=True, exist_ok=True)
            if graph:
                (entry.folder / GRAPH_FILE).write_text(json.dumps(graph, indent=1))
            if execution:
                (entry.folder / EXECUTION_FILE).write_text(json.dumps(execution, indent=1))
            if graph or execution:
                (entry.folder / SUMMARY_FILE).write_text(render(graph, execution))
                (entry.folder / HTML_FILE).write_text(render_html(graph, execution))
        except OSError as e:
            # A report that cannot be written must not stop the user's program: say so once,
            # with the reason (a traceback per program would bury the user's own output).
            if not self.unwritable:
                self.unwritable = True
                logger.warning("could not write the IPU Model report to %s: %s. No report is "
                               "written where that fails; set autoReport.directory in %s to a "
                               "directory you can write.", entry.folder, e.strerror or e,
                               ENGINE_OPTIONS_VAR)
            return
        logger.info("IPU Model report written to %s", entry.folder)
