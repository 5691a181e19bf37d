"""The PVTI_OPTIONS host timeline: written only when enabled, and valid trace-event JSON
(complete events with ts/dur/pid/tid, metadata naming the process and every thread)."""

from __future__ import annotations

import json
from numbers import Real
from pathlib import Path

from jax_ipu.profile.trace import Timeline
from tests.test_profile_reports import folders, run


def check_trace_events(trace: dict) -> list[dict]:
    """Assert the trace-event format; returns the complete events."""
    assert isinstance(trace["traceEvents"], list)
    named_threads, complete = set(), []
    for event in trace["traceEvents"]:
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        assert isinstance(event["name"], str) and event["ph"] in ("X", "M")
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "thread_name")
            assert isinstance(event["args"]["name"], str)
            if event["name"] == "thread_name":
                named_threads.add(event["tid"])
        else:
            assert isinstance(event["ts"], Real) and isinstance(event["dur"], Real)
            assert event["dur"] >= 0 and isinstance(event["cat"], str)
            complete.append(event)
    assert {e["tid"] for e in complete} <= named_threads
    return complete


def test_timeline_written_only_when_enabled(tmp_path: Path) -> None:
    run(tmp_path, pvti=json.dumps({"enable": "false", "directory": str(tmp_path / "t")}))
    assert not (tmp_path / "t").exists()

    model = run(tmp_path, pvti=json.dumps({"enable": "true", "directory": str(tmp_path / "t")}))
    (path,) = (tmp_path / "t").iterdir()
    assert path.name.startswith("host_timeline_") and path.suffix == ".json"
    assert folders(tmp_path / "t") == []  # the timeline alone: no report folders
    events = check_trace_events(json.loads(path.read_text()))

    names = [e["name"] for e in events]
    assert names.count("compile jit_affine") == 1
    assert names.count("execute jit_affine") == 3
    runs = [e for e in events if e["name"] == "execute jit_affine"]
    per_call = int(model["cycles"]["total"]) + model["cycles"]["call"]  # with the host's part
    assert all(e["args"]["model_cycles"] == per_call for e in runs)
    # x (32x64 float32) and w (64x16 float32) go up; three (16,) float32 results come back.
    up = sorted(e["args"]["bytes"] for e in events if e["name"] == "host to device")
    down = [e["args"]["bytes"] for e in events if e["name"] == "device to host"]
    assert up == [4096, 8192] and down == [64, 64, 64]
    starts = [e["ts"] for e in runs]
    assert starts == sorted(starts)


def test_timeline_events_are_bounded(monkeypatch) -> None:
    monkeypatch.setattr("jax_ipu.profile.trace.MAX_EVENTS", 2)
    timeline = Timeline(origin=10.0)
    for i in range(5):
        timeline.add("execute p", "execute", "execute ipu0", 10.0 + i, 10.5 + i, {})
    trace = timeline.to_dict()
    events = check_trace_events(trace)
    assert [(e["ts"], e["dur"]) for e in events] == [(0.0, 500000.0), (1e6, 500000.0)]
    assert trace["otherData"]["dropped_events"] == 3


def test_moves_between_memory_kinds_reach_the_timeline_and_a_jax_trace_at_once(
        tmp_path: Path) -> None:
    """With PVTI_OPTIONS on and a jax.profiler trace running, a move to Streaming Memory is told
    to both: a `move` event on the host timeline and on the IPU's Streaming Memory row."""
    from jax_ipu.model.streaming import move
    from jax_ipu.model.targets import get_target
    from jax_ipu.protowire import Message
    from tests._subprocess import run_python

    run_python(f"""
    import jax, numpy as np
    from jax.sharding import SingleDeviceSharding
    ipu = jax.devices("ipu")[0]
    x = jax.device_put(np.ones((64, 64), np.float32), ipu)
    with jax.profiler.trace({str(tmp_path / "xprof")!r}):
        jax.device_put(x, SingleDeviceSharding(ipu, memory_kind="pinned_host")).block_until_ready()
    """, env={"PVTI_OPTIONS": json.dumps({"enable": "true", "directory": str(tmp_path / "t")})})
    cycles = move(64 * 64 * 4, "device", "pinned_host", get_target("ipu2")).total
    (path,) = (tmp_path / "t").iterdir()
    (moved,) = [e for e in check_trace_events(json.loads(path.read_text()))
                if e["name"] == "move device -> pinned_host"]
    assert moved["args"]["model_cycles"] == cycles and moved["args"]["bytes"] == 16384
    (xplane,) = (tmp_path / "xprof").glob("plugins/profile/*/*.xplane.pb")
    (plane,) = [p for p in Message(xplane.read_bytes()).messages(1)
                if p.text(2) == "/device:CUSTOM:IPU:0"]
    (line,) = [line for line in plane.messages(3) if line.text(2) == "Streaming Memory"]
    (event,) = line.messages(4)
    assert event.integer(3) == round(cycles * 1e12 / get_target("ipu2").clock_hz)  # duration ps
