"""The IPUs' planes of the XSpace jax.profiler collects: a trace's runs, ops and transfers on each
IPU's timeline, in modelled time placed on the host's clock (tensorflow.profiler's xplane.proto).

An IPU does one thing at a time, as its model clock counts: each activity starts when the host
issued it, or when the device finished the one before if that is later, and lasts the cycles the
model gives it at the chip's clock."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from jax_ipu.protowriter import Writer

# XProf's trace viewer shows accelerators from planes named /device:GPU:*, /device:TPU:* and
# /device:CUSTOM:* only (a /device:IPU:0 plane is dropped); the IPU's ordinal follows, as TPU's.
PLANE_PREFIX = "/device:CUSTOM:IPU:"
MODULES, HOST, STREAMING = "XLA Modules", "Host transfers", "Streaming Memory"
OPS = "XLA Ops: "  # one line per program, named after it
# Op events one XSpace holds; past it, runs keep their program event and lose their ops.
MAX_OP_EVENTS = 500_000

# Field numbers of tensorflow.profiler messages (tsl/profiler/protobuf/xplane.proto).
SPACE_PLANES = 1
PLANE_ID, PLANE_NAME, PLANE_LINES, PLANE_EVENT_METADATA, PLANE_STAT_METADATA, PLANE_STATS = (
    1, 2, 3, 4, 5, 6)
LINE_ID, LINE_NAME, LINE_TIMESTAMP_NS, LINE_EVENTS, LINE_DISPLAY_ID = 1, 2, 3, 4, 10
EVENT_METADATA_ID, EVENT_OFFSET_PS, EVENT_DURATION_PS, EVENT_STATS = 1, 2, 3, 4
STAT_METADATA_ID, STAT_DOUBLE, STAT_INT64, STAT_STR = 1, 2, 4, 5
EVENT_METADATA_ID_FIELD, EVENT_METADATA_NAME, EVENT_METADATA_STATS = 1, 2, 5
STAT_METADATA_ID_FIELD, STAT_METADATA_NAME, STAT_METADATA_DESCRIPTION = 1, 2, 3
MAP_KEY, MAP_VALUE = 1, 2  # a map<int64, M> field is a repeated entry message

STATS = {  # name: description (XStatMetadata), for every stat the planes carry
    "program": "the jitted program",
    "source": "the user's source line (file:line (function))",
    "shapes": "operand and result types",
    "executions": "times the op runs in one run of its program (loop trips)",
    "cycles": "cycles on the chip at its clock, in all",
    "compute_cycles": "cycles the busiest tile computes",
    "exchange_cycles": "cycles of exchange between tiles (and over IPU-Links)",
    "sync_cycles": "cycles of bulk-synchronous syncs",
    "host_exchange_cycles": "cycles of stream copies with the host inside the program",
    "streaming_cycles": "cycles of moves to and from Streaming Memory and host memory",
    "call_cycles": "cycles the host adds to the call (Engine::run)",
    "bytes_accessed": "bytes the op reads and writes",
    "bytes": "bytes moved",
    "tiles_used": "tiles the op runs on",
    "tile_balance": "tiles the op runs on, as a fraction of the chip's (1: every tile works)",
    "note": "the model's note (plan chosen, trip counts)",
    "run": "index of the program's run in this trace",
    "host_call_us": "wall time of the host's call that issued it (us); XLA:CPU computes the "
                    "numbers, and may still be working when the call returns",
    "queued_us": "time it waited for the device to finish earlier work, in model time (us)",
    "peak_bytes": "peak bytes of tile memory, over all tiles",
    "version": "IPU version",
    "num_tiles": "tiles on the chip",
    "clock_hz": "the chip's clock (Hz)",
    "device": "emulated by the IPU Model: modelled cycles, numbers from XLA:CPU on the host",
    "from": "memory kind moved from",
    "to": "memory kind moved to",
    "warning": "what the trace left out",
}


class _Plane:
    """One IPU's plane while it is built: its lines, and metadata interned by key."""

    def __init__(self, device: Any, origin_ns: int) -> None:
        self.device = device
        self.origin_ns = origin_ns
        self.target = device.target
        self.ps_per_cycle = 1e12 / self.target.clock_hz
        self.free_ps = 0  # when the device is done with what it was given, from the origin
        self.lines: dict[str, list[Writer]] = {}
        self.event_ids: dict[Any, int] = {}
        self.event_metadata: list[Writer] = []
        self.stat_ids: dict[str, int] = {}
        self.runs: dict[str, int] = {}

    def stat(self, name: str, value: Any) -> Writer:
        stat_id = self.stat_ids.setdefault(name, len(self.stat_ids) + 1)
        stat = Writer().integer(STAT_METADATA_ID, stat_id)
        if isinstance(value, str):
            return stat.text(STAT_STR, value)
        if isinstance(value, float):
            return stat.double(STAT_DOUBLE, value)
        return stat.integer(STAT_INT64, value)

    def metadata(self, key: Any, name: str, stats: Iterable[tuple[str, Any]] = ()) -> int:
        """The id of the event metadata `key` names, made on first use with its name and the
        stats every event of it shares."""
        found = self.event_ids.get(key)
        if found is not None:
            return found
        meta_id = self.event_ids[key] = len(self.event_ids) + 1
        meta = Writer().integer(EVENT_METADATA_ID_FIELD, meta_id).text(EVENT_METADATA_NAME, name)
        for stat_name, value in stats:
            meta.message(EVENT_METADATA_STATS, self.stat(stat_name, value))
        self.event_metadata.append(meta)
        return meta_id

    def add(self, line: str, meta_id: int, start_ps: int, duration_ps: int,
            stats: Iterable[tuple[str, Any]] = ()) -> None:
        event = (Writer().integer(EVENT_METADATA_ID, meta_id).integer(EVENT_OFFSET_PS, start_ps)
                 .integer(EVENT_DURATION_PS, duration_ps))
        for name, value in stats:
            event.message(EVENT_STATS, self.stat(name, value))
        self.lines.setdefault(line, []).append(event)

    def occupy(self, host_ps: int, cycles: float) -> tuple[int, int]:
        """(start, duration) in ps of `cycles` of device work the host issued at host_ps: it
        starts once the device is free."""
        start = max(host_ps, self.free_ps)
        duration = self.ps(cycles)
        self.free_ps = start + duration
        return start, duration

    def ps(self, cycles: float) -> int:
        return round(cycles * self.ps_per_cycle)

    def to_writer(self, plane_id: int, warnings: Sequence[str]) -> Writer:
        plane = Writer().integer(PLANE_ID, plane_id).text(PLANE_NAME,
                                                          f"{PLANE_PREFIX}{self.device.id}")
        order = [MODULES] + sorted(n for n in self.lines if n.startswith(OPS)) + [HOST, STREAMING]
        for line_id, name in enumerate((n for n in order if self.lines.get(n)), start=1):
            line = (Writer().integer(LINE_ID, line_id).text(LINE_NAME, name)
                    .integer(LINE_TIMESTAMP_NS, self.origin_ns).integer(LINE_DISPLAY_ID, line_id))
            for event in self.lines[name]:
                line.message(LINE_EVENTS, event)
            plane.message(PLANE_LINES, line)
        for key, value in (("version", self.target.version), ("num_tiles", self.target.num_tiles),
                           ("clock_hz", float(self.target.clock_hz)), ("device", "IPU Model"),
                           *(("warning", w) for w in warnings)):
            plane.message(PLANE_STATS, self.stat(key, value))
        for meta_id, meta in enumerate(self.event_metadata, start=1):
            plane.message(PLANE_EVENT_METADATA, Writer().integer(MAP_KEY, meta_id)
                          .message(MAP_VALUE, meta))
        for name, stat_id in self.stat_ids.items():
            meta = (Writer().integer(STAT_METADATA_ID_FIELD, stat_id)
                    .text(STAT_METADATA_NAME, name)
                    .text(STAT_METADATA_DESCRIPTION, STATS[name]))
            plane.message(PLANE_STAT_METADATA, Writer().integer(MAP_KEY, stat_id)
                          .message(MAP_VALUE, meta))
        return plane


def _op_name(op: Any) -> str:
    return "+".join([op.kind, *op.fused])


def _op_stats(op: Any, num_tiles: int) -> list[tuple[str, Any]]:
    stats = [("source", op.location), ("shapes", op.shapes), ("executions", op.executions),
             ("cycles", float(op.cycles)), ("compute_cycles", float(op.compute_cycles)),
             ("exchange_cycles", float(op.exchange_cycles)),
             ("sync_cycles", float(op.sync_cycles)),
             ("host_exchange_cycles", float(op.host_cycles)),
             ("streaming_cycles", float(op.streaming_setup_cycles + op.streaming_cycles)),
             ("bytes_accessed", int(op.bytes_accessed)), ("tiles_used", int(op.tiles)),
             ("tile_balance", op.tiles / num_tiles)]
    return stats + ([("note", op.note)] if op.note else [])


class _Space:
    """The planes of every IPU a trace saw, built from its events in the order they came."""

    def __init__(self, devices: Sequence[Any], origin: tuple[int, float]) -> None:
        self.origin_ns, self.origin_s = origin
        self.planes: dict[int, _Plane] = {}
        for device in devices:
            self.plane(device)
        self.op_events = 0
        self.runs_without_ops = 0

    def plane(self, device: Any) -> _Plane:
        found = self.planes.get(id(device))
        if found is None:
            found = self.planes[id(device)] = _Plane(device, self.origin_ns)
        return found

    def host_ps(self, seconds: float) -> int:
        return round((seconds - self.origin_s) * 1e12)

    def run(self, executable: Any, start: float, end: float) -> None:
        report = executable.report
        host_ps = self.host_ps(start)
        for device in executable.addressable:
            plane = self.plane(device)
            begin, duration = plane.occupy(host_ps, executable.cycles)
            cycles = report.cycles
            program = plane.metadata(("program", executable.fingerprint), executable.name, [
                ("cycles", float(executable.cycles)), ("compute_cycles", float(cycles.compute)),
                ("exchange_cycles", float(cycles.exchange)), ("sync_cycles", float(cycles.sync)),
                ("host_exchange_cycles", float(cycles.host_exchange)),
                ("streaming_cycles", float(cycles.streaming_setup + cycles.streaming)),
                ("call_cycles", float(cycles.call)),
                ("peak_bytes", int(report.memory.peak_bytes))])
            run = plane.runs.get(executable.fingerprint, -1) + 1
            plane.runs[executable.fingerprint] = run
            plane.add(MODULES, program, begin, duration, [
                ("run", run), ("host_call_us", (end - start) * 1e6),
                ("queued_us", (begin - host_ps) / 1e6)])
            if self.op_events + len(report.ops) + 1 > MAX_OP_EVENTS:
                self.runs_without_ops += 1
                continue
            self.ops(plane, executable, begin)

    def ops(self, plane: _Plane, executable: Any, begin: int) -> None:
        """A run's ops on its program's line, starting at `begin`: the host's call first, then
        each op in program order; their stream copies and moves on the transfer lines too."""
        report, line = executable.report, OPS + executable.name
        call = plane.metadata("call", "Engine::run (host call)",
                              [("call_cycles", float(report.cycles.call))])
        plane.add(line, call, begin, plane.ps(report.cycles.call))
        at = float(report.cycles.call)  # cycles since the run began
        for index, op in enumerate(report.ops):
            if op.cycles <= 0:
                continue
            meta = plane.metadata((executable.fingerprint, index), _op_name(op),
                                  [("program", executable.name),
                                   *_op_stats(op, plane.target.num_tiles)])
            plane.add(line, meta, begin + plane.ps(at), plane.ps(at + op.cycles) - plane.ps(at))
            self.op_events += 1
            # within the op: sync, exchange, compute, host exchange, then its moves
            host_at = at + op.sync_cycles + op.exchange_cycles + op.compute_cycles
            moves = op.streaming_setup_cycles + op.streaming_cycles
            for name, line_name, start, cycles in (
                    ("host exchange", HOST, host_at, op.host_cycles),
                    ("moves", STREAMING, host_at + op.host_cycles, moves)):
                if cycles > 0:
                    meta = plane.metadata((name, executable.fingerprint, index),
                                          f"{name}: {_op_name(op)}",
                                          [("program", executable.name), ("source", op.location),
                                           ("cycles", float(cycles))])
                    plane.add(line_name, meta, begin + plane.ps(start),
                              plane.ps(start + cycles) - plane.ps(start))
            at += op.cycles

    def transfer(self, direction: str, device: Any, nbytes: int, start: float, end: float,
                 cycles: int) -> None:
        plane, host_ps = self.plane(device), self.host_ps(start)
        begin, duration = plane.occupy(host_ps, cycles)
        name = direction.replace("_", " ")
        plane.add(HOST, plane.metadata(("transfer", name), name), begin, duration, [
            ("bytes", int(nbytes)), ("cycles", float(cycles)),
            ("host_call_us", (end - start) * 1e6), ("queued_us", (begin - host_ps) / 1e6)])

    def move(self, device: Any, nbytes: int, source: str, dest: str, start: float, end: float,
             setup_cycles: float, transfer_cycles: float) -> None:
        plane, host_ps = self.plane(device), self.host_ps(start)
        cycles = setup_cycles + transfer_cycles
        begin, duration = plane.occupy(host_ps, cycles)
        name = f"move {source} -> {dest}"
        plane.add(STREAMING, plane.metadata(("move", name), name, [("from", source), ("to", dest)]),
                  begin, duration, [
                      ("bytes", int(nbytes)), ("cycles", float(cycles)),
                      ("host_call_us", (end - start) * 1e6),
                      ("queued_us", (begin - host_ps) / 1e6)])


def xspace(events: Sequence[tuple[Any, ...]], devices: Sequence[Any], origin: tuple[int, float],
           dropped: int = 0) -> tuple[bytes, list[str]]:
    """The serialized XSpace of a trace's `events` (see profile/tracing.py for their form), a
    plane per IPU in `devices` or in the events, and what it left out, in words. `origin` is
    (time.time_ns(), time.perf_counter()) read together when the trace started; `dropped` events
    were left out when it was full. jaxlib keeps only an XSpace's planes, so each plane carries
    the words too (stat "warning")."""
    space = _Space(devices, origin)
    for event in events:
        kind, rest = event[0], event[1:]
        if kind == "run":
            space.run(*rest)
        elif kind == "transfer":
            direction, device, *figures = rest
            space.transfer(direction, device, *figures)
        elif kind == "move":
            space.move(*rest)
        else:
            raise ValueError(f"unknown IPU trace event {kind!r}")
    warnings = []
    if dropped:
        warnings.append(f"IPU trace: {dropped} event(s) left out: the trace was full "
                        "(jax_ipu.profile.tracing.MAX_EVENTS); trace fewer steps")
    if space.runs_without_ops:
        warnings.append(f"IPU trace: {space.runs_without_ops} run(s) shown without their ops "
                        f"(at most {MAX_OP_EVENTS} op events a trace); trace fewer steps")
    out = Writer()
    for plane_id, plane in enumerate(sorted(space.planes.values(), key=lambda p: p.device.id)):
        out.message(SPACE_PLANES, plane.to_writer(plane_id, warnings))
    return bytes(out), warnings
