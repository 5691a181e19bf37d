"""jax.profiler sees the IPUs: a trace of a training step read back by XProf's own tools (its
converter to the trace viewer's form, and its web UI in headless Chromium) shows each IPU's
runs, ops, host transfers and Streaming Memory moves with the model's figures, on the host's clock.

The extension's own rules (its layout in the table, a full trace) are pinned without XProf."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import SingleDeviceSharding

import jax_ipu
from jax_ipu.model import TO_DEVICE, TO_HOST, engine_run_cycles, host_transfer
from jax_ipu.model.report import ProgramReport
from jax_ipu.model.streaming import PINNED_HOST, move
from jax_ipu.pjrt import _table
from jax_ipu.profile import tracing
from jax_ipu.protowire import Message
from tests._devtools import Browser
from tests._xprof import Server, trace_viewer_json

IPU = jax.devices("ipu")[0]
PLANE = "/device:CUSTOM:IPU:0"
STEPS = 3
SIZES = (64, 128, 10)
BATCH = 32


def _loss(params: Any, x: Any, y: Any) -> Any:
    (w1, b1), (w2, b2) = params
    logits = jax.nn.relu(x @ w1 + b1) @ w2 + b2
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


@jax.jit
def train_step(params: Any, x: Any, y: Any) -> Any:
    loss, grads = jax.value_and_grad(_loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss


@dataclass
class Traced:
    logdir: Path
    xplane: Path
    report: ProgramReport
    batch_bytes: int
    clock_cycles: int  # what the IPU's model clock counted while the trace ran


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Traced:
    """A trace of: a batch put on the IPU, STEPS training steps, the batch moved to Streaming
    Memory and the loss read back. Compiled before the trace, as a user warms up."""
    rng = np.random.default_rng(0)
    params = jax.device_put([(rng.standard_normal((m, n)).astype(np.float32) / np.sqrt(m),
                              np.zeros(n, np.float32))
                             for m, n in zip(SIZES[:-1], SIZES[1:], strict=True)], IPU)
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = jax.device_put(np.eye(SIZES[-1], dtype=np.float32)[rng.integers(0, SIZES[-1], BATCH)],
                       IPU)
    report = jax_ipu.report(train_step.lower(params, x, y).compile())
    jax.block_until_ready(train_step(params, jax.device_put(x, IPU), y))
    logdir = tmp_path_factory.mktemp("xprof")
    with jax.profiler.trace(str(logdir)):
        before = jax_ipu.clock(IPU).cycles
        batch = jax.device_put(x, IPU)
        for _ in range(STEPS):
            params, loss = train_step(params, batch, y)
        jax.device_put(batch, SingleDeviceSharding(IPU, memory_kind=PINNED_HOST))
        float(loss)
        counted = jax_ipu.clock(IPU).cycles - before
    (xplane,) = logdir.glob("plugins/profile/*/*.xplane.pb")
    return Traced(logdir, xplane, report, x.nbytes, counted)


def _ipu_lines(trace: dict[str, Any]) -> tuple[dict[str, list[dict]], list[dict]]:
    """The IPU plane's events by line (time order), and the host's events, from XProf's JSON."""
    events = trace["traceEvents"]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e["name"] in ("process_name", "thread_name")}
    (pid,) = [p for (p, tid), name in names.items() if tid is None and name == PLANE]
    lines: dict[str, list[dict]] = {name: [] for (p, tid), name in names.items()
                                    if p == pid and tid is not None}
    host = []
    for e in events:
        if e.get("ph") != "X":
            continue
        if e["pid"] == pid:
            lines[names[pid, e["tid"]]].append(e)
        else:
            host.append(e)
    for line in lines.values():
        line.sort(key=lambda e: e["ts"])
    return lines, host


def _op_name(op: Any) -> str:
    return "+".join([op.kind, *op.fused])


def test_xprof_reads_each_run_and_op_with_the_models_figures(traced: Traced) -> None:
    lines, host = _ipu_lines(trace_viewer_json(traced.xplane))
    assert sorted(lines) == ["Host transfers", "Streaming Memory", "XLA Modules",
                             "XLA Ops: jit_train_step"]
    report, c = traced.report, traced.report.cycles
    clock, tiles = report.target.clock_hz, report.target.num_tiles
    us = 1e6 / clock  # microseconds a cycle

    # One program event per run: the device clock's cycles of a run (each phase rounded as the
    # clock counts it), lasting as long at the chip's clock.
    run_cycles = sum(round(v) for v in (c.compute, c.exchange, c.sync, c.host_exchange, c.call,
                                        c.streaming_setup, c.streaming))
    runs = lines["XLA Modules"]
    assert [e["name"] for e in runs] == ["jit_train_step"] * STEPS
    for index, run in enumerate(runs):
        args = run["args"]
        assert int(args["run"]) == index
        assert float(args["cycles"]) == run_cycles
        assert float(args["compute_cycles"]) == pytest.approx(c.compute)
        assert float(args["exchange_cycles"]) == pytest.approx(c.exchange)
        assert float(args["sync_cycles"]) == pytest.approx(c.sync)
        assert float(args["call_cycles"]) == c.call
        assert run["dur"] == pytest.approx(run_cycles * us, abs=1e-5)

    # Each run's ops in program order after the host's call, back to back, with their figures.
    costed = [op for op in report.ops if op.cycles > 0]
    ops = lines["XLA Ops: jit_train_step"]
    assert len(ops) == STEPS * (1 + len(costed))
    per_run = 1 + len(costed)
    for run, start in zip(runs, range(0, len(ops), per_run), strict=True):
        run_ops = ops[start:start + per_run]
        call, *rest = run_ops
        assert call["name"] == "Engine::run (host call)"
        assert call["ts"] == pytest.approx(run["ts"], abs=1e-3)
        assert call["dur"] == pytest.approx(c.call * us, abs=1e-5)
        assert [e["name"] for e in rest] == [_op_name(op) for op in costed]
        for before, after in zip(run_ops[:-1], run_ops[1:], strict=True):
            assert after["ts"] == pytest.approx(before["ts"] + before["dur"], abs=2e-3)
        assert sum(e["dur"] for e in run_ops) == pytest.approx(run["dur"], abs=1e-3)
        for event, op in zip(rest, costed, strict=True):
            args = event["args"]
            assert args["source"] == op.location and args["program"] == "jit_train_step"
            assert float(args["cycles"]) == pytest.approx(op.cycles)
            assert float(args["compute_cycles"]) == pytest.approx(op.compute_cycles)
            assert float(args["exchange_cycles"]) == pytest.approx(op.exchange_cycles)
            assert float(args["sync_cycles"]) == pytest.approx(op.sync_cycles)
            assert int(args["bytes_accessed"]) == op.bytes_accessed
            assert int(args["tiles_used"]) == op.tiles
            assert float(args["tile_balance"]) == pytest.approx(op.tiles / tiles, rel=1e-5)
            assert event["dur"] == pytest.approx(op.cycles * us, abs=1e-5)
    # the matmuls are the user's, at their source lines
    dots = [e for e in ops if e["name"] == "dot_general"]
    assert dots and all(e["args"]["source"].startswith(__file__) for e in dots)

    # The batch put on the IPU and the loss read back, as stream copies over the host link.
    target = report.target
    put, read = (host_transfer(n, target, d) for n, d in ((traced.batch_bytes, TO_DEVICE),
                                                          (4, TO_HOST)))
    transfers = lines["Host transfers"]
    assert [(e["name"], int(e["args"]["bytes"]), float(e["args"]["cycles"]))
            for e in transfers] == [
        ("host to device", traced.batch_bytes,
         put.setup_cycles + put.link_cycles + put.staging_cycles),
        ("device to host", 4, read.setup_cycles + read.link_cycles + read.staging_cycles
         + engine_run_cycles(target))]
    (moved,) = lines["Streaming Memory"]
    assert moved["name"] == f"move device -> {PINNED_HOST}"
    assert int(moved["args"]["bytes"]) == traced.batch_bytes
    assert float(moved["args"]["cycles"]) == move(traced.batch_bytes, "device", PINNED_HOST,
                                                  target).total
    for event in (*transfers, moved):
        assert event["dur"] == pytest.approx(float(event["args"]["cycles"]) * us, abs=1e-5)

    # The IPU's events add up to what its model clock counted meanwhile.
    assert sum(float(e["args"]["cycles"]) for e in (*runs, *transfers, moved)) == \
        traced.clock_cycles

    # The device does one thing at a time: each activity starts when the host issued it, or
    # when the device finished the one before (queued_us says how long it waited).
    device = sorted((*runs, *transfers, moved), key=lambda e: e["ts"])
    for before, after in zip(device[:-1], device[1:], strict=True):
        end = before["ts"] + before["dur"]
        assert after["ts"] >= end - 1e-3
        if float(after["args"]["queued_us"]) > 0:
            assert after["ts"] == pytest.approx(end, abs=1e-3)
    # ...and the host issued each run inside jaxlib's Execute call of it, on the same clock
    # (XProf writes arguments to six significant digits: that much slack).
    executes = [e for e in host if e["name"] == "PjRtCApiLoadedExecutable::Execute"]
    for run in runs:
        queued = float(run["args"]["queued_us"])
        issued, slack = run["ts"] - queued, max(1e-3, queued * 1e-5)
        assert any(e["ts"] - slack <= issued <= e["ts"] + e["dur"] + slack for e in executes), \
            (issued, [(e["ts"], e["dur"]) for e in executes])


# What the trace viewer page (in XProf's iframe) shows: its track headings, and its model's
# slices of the IPU's process, by thread.
_VIEWER = "document.querySelector('iframe').contentWindow"
HEADINGS = """(() => {
  const frame = document.querySelector('iframe');
  if (!frame || !frame.contentDocument) return [];
  const found = [];
  const visit = (root) => {
    const all = root.querySelectorAll('*');
    for (let i = 0; i < all.length; i++) {
      const e = all[i];
      if (e.shadowRoot) visit(e.shadowRoot);
      const text = (e.textContent || '').trim();
      if (e.tagName === 'SPAN' && e.children.length === 0 && text) found.push(text);
    }
  };
  visit(frame.contentDocument);
  return found;
})()"""
SLICES = f"""(() => {{
  const all = {_VIEWER}.document.querySelectorAll('*');
  for (let i = 0; i < all.length; i++) {{
    if (!all[i].model) continue;
    const out = {{}};
    for (const process of all[i].model.getAllProcesses()) {{
      if (!process.name.endsWith('{PLANE}')) continue;
      for (const thread of Object.values(process.threads))
        out[thread.name] = thread.sliceGroup.slices.map(s => [s.title, s.duration]);
    }}
    return out;
  }}
  return null;
}})()"""


def test_xprof_web_ui_renders_the_ipu_timeline(traced: Traced, tmp_path: Path) -> None:
    run, host = traced.xplane.parent.name, traced.xplane.name.removesuffix(".xplane.pb")
    with Server(traced.logdir, run) as server, Browser(tmp_path / "chromium") as browser:
        browser.navigate(server.url + "/")
        # The app opens on its overview page; once that has loaded, it stays where it is sent.
        assert browser.wait_for("location.pathname.endsWith('overview_page') && "
                                "document.body.innerText.includes('Performance Summary')", 60), \
            "XProf's app did not start"
        # Open the Trace Viewer tool as its menu does: the app's router follows the address.
        tool = f"/data/plugin/profile/trace_viewer@?run={run}&tag=trace_viewer@&host={host}"
        browser.evaluate(f"history.pushState(null, '', '{tool}'); "
                         "dispatchEvent(new PopStateEvent('popstate', {state: null})); true")
        headings = browser.wait_for(f"{HEADINGS}.includes('XLA Modules') && {HEADINGS}", 60)
        browser.screenshot(tmp_path / "trace_viewer.png")
        assert headings, "the trace viewer showed no IPU track"
        assert f"{host} {PLANE}" in " ".join(headings)
        assert {"XLA Modules", "XLA Ops: jit_train_step", "Host transfers",
                "Streaming Memory"} <= set(headings)
        slices = browser.evaluate(SLICES)
    report = traced.report
    us = 1e6 / report.target.clock_hz
    assert [title for title, _ in slices["XLA Modules"]] == ["jit_train_step"] * STEPS
    costed = [op for op in report.ops if op.cycles > 0]
    ops = slices["XLA Ops: jit_train_step"]
    assert [title for title, _ in ops[:1 + len(costed)]] == \
        ["Engine::run (host call)"] + [_op_name(op) for op in costed]
    # the viewer's slices last the model's cycles (its times are in milliseconds)
    for (_, duration), op in zip(ops[1:1 + len(costed)], costed, strict=True):
        assert duration * 1e3 == pytest.approx(op.cycles * us, abs=1e-5)
    assert [title for title, _ in slices["Host transfers"]] == ["host to device",
                                                                "device to host"]


def _xspace(logdir: Path) -> Message:
    (xplane,) = logdir.glob("plugins/profile/*/*.xplane.pb")
    return Message(xplane.read_bytes())


def test_a_full_trace_keeps_what_fits_and_says_what_it_left_out(monkeypatch: Any, caplog: Any,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setattr(tracing, "MAX_EVENTS", 2)
    step = jax.jit(lambda v: v + 1)
    x = jax.block_until_ready(step(jax.device_put(np.zeros(4, np.float32), IPU)))
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    with jax.profiler.trace(str(tmp_path), profiler_options=options):
        for _ in range(5):
            x = step(x)
        x.block_until_ready()
    space = _xspace(tmp_path)
    (plane,) = [p for p in space.messages(1) if p.text(2) == PLANE]
    (modules,) = [line for line in plane.messages(3) if line.text(2) == "XLA Modules"]
    assert len(modules.messages(4)) == 2
    # jaxlib keeps only the planes of what a plugin collects: the plane says it, and the log
    said = "IPU trace: 3 event(s) left out"
    names = {m.message(2).integer(1): m.message(2).text(2) for m in plane.messages(5)}
    warnings = [s.text(5) for s in plane.messages(6) if names[s.integer(1)] == "warning"]
    assert len(warnings) == 1 and warnings[0].startswith(said)
    assert said in caplog.text
    # Recording stopped with the trace: later runs go nowhere.
    assert tracing.running() is None
    step(x).block_until_ready()


class _Api(ctypes.Structure):  # PLUGIN_Profiler_Api (profiler_c_api.h)
    _fields_ = [("struct_size", ctypes.c_size_t), ("priv", ctypes.c_void_p),
                *((name, ctypes.c_void_p) for name in (
                    "error_destroy", "error_message", "error_get_code", "create", "destroy",
                    "start", "stop", "collect_data"))]


def _args(*fields: tuple[str, Any]) -> type[ctypes.Structure]:
    return type("Args", (ctypes.Structure,), {"_fields_": [("struct_size", ctypes.c_size_t),
                                                           *fields]})


def _profiler_api() -> tuple[int, _Api]:
    """(PJRT_Profiler_Extension.struct_size, its PLUGIN_Profiler_Api), found as jaxlib finds
    them: by type in the PJRT_Api's extension list, which also holds the shardings one (19)."""
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object,
                                                                  ctypes.c_char_p]
    api = get_pointer(_table.capsule(), b"pjrt_c_api")
    extension, found = ctypes.c_void_p.from_address(api + 8).value, {}
    while extension:  # PJRT_Extension_Base: struct_size, type, next
        found[ctypes.c_int.from_address(extension + 8).value] = extension
        extension = ctypes.c_void_p.from_address(extension + 16).value
    assert sorted(found) == [1, 19]
    profiler = found[1]
    return (ctypes.c_size_t.from_address(profiler).value,
            _Api.from_address(ctypes.c_void_p.from_address(profiler + 24).value))


def test_the_profiler_extension_serves_a_client_of_the_c_api() -> None:
    """The extension as jaxlib 0.10.2 calls it (struct sizes it checks, args whose struct_size
    it leaves unset), and the header's two-call collect_data, through its function pointers."""
    size, api = _profiler_api()
    assert size == 32  # through profiler_api (PJRT_DEFINE_STRUCT_TRAITS)
    assert api.struct_size == 80  # jaxlib ignores a profiler of any other size
    proto = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
    call = {name: proto(getattr(api, name)) for name in (
        "create", "destroy", "start", "stop", "collect_data", "error_get_code")}
    create = _args(("options", ctypes.c_char_p), ("options_size", ctypes.c_size_t),
                   ("profiler", ctypes.c_void_p))(struct_size=0xDEADBEEF)  # as jaxlib: unset
    assert call["create"](ctypes.addressof(create)) is None
    only = _args(("profiler", ctypes.c_void_p))(struct_size=0xDEADBEEF, profiler=create.profiler)
    step = jax.jit(lambda v: v * 3)
    x = jax.block_until_ready(step(jax.device_put(np.ones(4, np.float32), IPU)))
    assert call["start"](ctypes.addressof(only)) is None
    step(x).block_until_ready()
    assert call["stop"](ctypes.addressof(only)) is None
    collect = _args(("profiler", ctypes.c_void_p), ("buffer", ctypes.c_void_p),
                    ("buffer_size_in_bytes", ctypes.c_size_t))(profiler=create.profiler)
    assert call["collect_data"](ctypes.addressof(collect)) is None
    first = ctypes.string_at(collect.buffer, collect.buffer_size_in_bytes)
    mine = ctypes.create_string_buffer(len(first))
    collect.buffer = ctypes.addressof(mine)
    assert call["collect_data"](ctypes.addressof(collect)) is None
    assert mine.raw == first and collect.buffer_size_in_bytes == len(first)
    (plane,) = [p for p in Message(first).messages(1) if p.text(2) == PLANE]
    assert [line.text(2) for line in plane.messages(3)] == ["XLA Modules", "XLA Ops: jit__lambda"]
    assert call["destroy"](ctypes.addressof(only)) is None
    # A session that failed to be made gets a clear error from start, with its code.
    none = _args(("profiler", ctypes.c_void_p))()
    error = call["start"](ctypes.addressof(none))
    code = _args(("priv", ctypes.c_void_p), ("error", ctypes.c_void_p), ("code", ctypes.c_int))(
        error=error)
    assert call["error_get_code"](ctypes.addressof(code)) is None and code.code == 9
    message = _args(("priv", ctypes.c_void_p), ("error", ctypes.c_void_p),
                    ("message", ctypes.c_void_p), ("message_size", ctypes.c_size_t))(error=error)
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(api.error_message)(ctypes.addressof(message))
    assert ctypes.string_at(message.message, message.message_size).startswith(
        b"jax_ipu: no profiler session to start")
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(api.error_destroy)(ctypes.addressof(
        _args(("priv", ctypes.c_void_p), ("error", ctypes.c_void_p))(error=error)))
