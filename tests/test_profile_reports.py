"""Report folders from POPLAR_ENGINE_OPTIONS: when they appear, their schema, and that their
numbers are the model's (jax_ipu.report) ones. The client reads the options once per process."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from jax_ipu import profile
from jax_ipu.errors import IpuConfigError
from jax_ipu.profile import schema
from jax_ipu.profile.summary import histogram
from tests._subprocess import run_python

PROGRAM = """
import json, os
import numpy as np
import jax, jax.numpy as jnp
import jax_ipu
os.chdir({tmp!r})

def affine(x, w):
    return jnp.tanh(x @ w).sum(axis=0)

dev = jax.devices("ipu")[0]
x = jax.device_put(np.ones((32, 64), np.float32), dev)
w = jax.device_put(np.full((64, 16), 0.01, np.float32), dev)
f = jax.jit(affine)
for _ in range(3):
    y = np.asarray(f(x, w))
compiled = f.lower(x, w).compile()
with open("model.json", "w") as out:
    json.dump(jax_ipu.report(compiled).to_dict(), out)
"""


def run(tmp_path: Path, engine: str = "", pvti: str = "") -> dict:
    """Run PROGRAM in a child with these options; returns the model's report of `affine`."""
    run_python(PROGRAM.format(tmp=str(tmp_path)),
               env={"POPLAR_ENGINE_OPTIONS": engine, "PVTI_OPTIONS": pvti})
    return json.loads((tmp_path / "model.json").read_text())


def folders(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_dir()) if directory.exists() else []


def test_nothing_written_without_options(tmp_path: Path) -> None:
    run(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.json"]


def test_from_environment_is_none_without_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POPLAR_ENGINE_OPTIONS", raising=False)
    monkeypatch.delenv("PVTI_OPTIONS", raising=False)
    assert profile.from_environment() is None
    # Options that ask for no report leave the runtime without a profiler too.
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", '{"debug.allowOutOfMemory": "true"}')
    monkeypatch.setenv("PVTI_OPTIONS", '{"enable": "false"}')
    assert profile.from_environment() is None


def test_all_reports_match_the_model(tmp_path: Path) -> None:
    model = run(tmp_path, '{"autoReport.all": "true", "autoReport.directory": "out"}')
    (folder,) = folders(tmp_path / "out")
    assert folder.name.startswith("jit_affine_") and len(folder.name) == len("jit_affine_") + 8
    assert sorted(p.name for p in folder.iterdir()) == [
        "execution.json", "graph.json", "report.html", "summary.txt"]

    graph = json.loads((folder / "graph.json").read_text())
    execution = json.loads((folder / "execution.json").read_text())
    assert schema.check(graph, schema.GRAPH) == []
    assert schema.check(execution, schema.EXECUTION) == []
    assert graph["fingerprint"].startswith(folder.name[-8:])

    # The graph profile is the model's report, minus flop estimates (not asked for).
    assert "flops" not in graph and all("flops" not in op for op in graph["ops"])
    assert graph["memory"] == model["memory"]
    assert graph["cycles"] == model["cycles"]
    assert graph["target"] == model["target"]
    assert [op["cycles"] for op in graph["ops"]] == [op["cycles"] for op in model["ops"]]
    computing = [op for op in model["ops"] if op["compute_cycles"] > 0]
    assert graph["graph"]["compute_sets"] == len(computing)
    assert graph["graph"]["vertices"] == sum(op["tiles"] for op in computing)

    total = model["cycles"]["total"]
    assert execution["total"]["runs"] == 3 and len(execution["runs"]) == 3
    assert execution["per_run"]["cycles"] == total
    assert execution["total"]["cycles"] == 3 * total
    assert execution["per_run"]["microseconds"] == pytest.approx(
        total / model["target"]["clock_hz"] * 1e6)
    for phase in ("compute", "exchange", "sync", "host_exchange"):
        assert execution["per_run"][phase] == model["cycles"][phase]
        assert sum(s[phase] for s in execution["bsp_trace"]) == pytest.approx(
            model["cycles"][phase])
    last = execution["bsp_trace"][-1]
    assert last["start"] + sum(last[p] for p in schema.PHASES) == pytest.approx(total)
    assert [r["device_clock_cycles"] for r in execution["runs"]] == sorted(
        r["device_clock_cycles"] for r in execution["runs"])
    cycles = [op["cycles"] for op in execution["ops"]]
    assert cycles == sorted(cycles, reverse=True) and sum(cycles) == pytest.approx(total)

    summary = (folder / "summary.txt").read_text()
    assert re.search(rf"Cycles per run: +{total:,.0f} \(approx", summary)
    assert f"{model['memory']['peak_bytes']:,}" in summary
    # the matmul's plan and its runner-up, in the summary and the HTML op table
    (dot,) = [op for op in model["ops"] if op["kind"] == "dot_general"]
    assert dot["plan"].startswith("AMP, ") and "lost:" in dot["runner_up"]
    assert f"plan: {dot['plan']}" in summary and f"runner-up: {dot['runner_up']}" in summary
    assert "runner-up (why it lost)" in (folder / "report.html").read_text()


def test_graph_profile_only_with_flops(tmp_path: Path) -> None:
    model = run(tmp_path, json.dumps({
        "autoReport.outputGraphProfile": "true", "profiler.includeFlopEstimates": "true",
        "autoReport.directory": str(tmp_path / "g")}))
    (folder,) = folders(tmp_path / "g")
    assert sorted(p.name for p in folder.iterdir()) == ["graph.json", "report.html", "summary.txt"]
    graph = json.loads((folder / "graph.json").read_text())
    assert graph["flops"] == model["flops"] > 0
    assert [op["flops"] for op in graph["ops"]] == [op["flops"] for op in model["ops"]]
    assert "Execution profile" not in (folder / "summary.txt").read_text()


def test_out_of_memory_program_is_reported(tmp_path: Path) -> None:
    code = """
    import numpy as np, jax
    big = np.ones((512, 512), np.float32)  # 1 MiB: more than one 624 KiB tile holds
    jax.jit(lambda a: a * 2 + 1).lower(big).compile()
    """
    run_python(code, env={
        "JAX_IPU_MODEL_NUM_TILES": "1", "JAX_PLATFORMS": "ipu", "PVTI_OPTIONS": "",
        "POPLAR_ENGINE_OPTIONS": json.dumps({
            "autoReport.all": "true", "debug.allowOutOfMemory": "true",
            "autoReport.directory": str(tmp_path)})})
    (folder,) = folders(tmp_path)
    graph = json.loads((folder / "graph.json").read_text())
    assert graph["memory"]["fits"] is False
    assert graph["memory"]["tiles_out_of_memory"] == [0]
    assert graph["memory"]["max_tile_bytes"] > graph["target"]["bytes_per_tile"] == 638_976
    assert not (folder / "execution.json").exists()
    assert "no: 1 tiles over" in (folder / "report.html").read_text()


@pytest.mark.parametrize("var, raw, named", [
    ("POPLAR_ENGINE_OPTIONS", '{"autoReport.al": "true"}', "'autoReport.al'"),
    ("POPLAR_ENGINE_OPTIONS", '{"autoReport.all": true', "not valid JSON"),
    ("POPLAR_ENGINE_OPTIONS", '{"autoReport.all": "yes please"}', "'autoReport.all'"),
    ("PVTI_OPTIONS", '{"enabled": "true"}', "'enabled'"),
    ("PVTI_OPTIONS", '["enable"]', "must be a JSON object"),
    ("PVTI_OPTIONS", '{"enable": "maybe"}', "'enable'"),
    # A path must be a string: null once made a directory named "None".
    ("POPLAR_ENGINE_OPTIONS", '{"autoReport.all": "true", "autoReport.directory": null}',
     "'autoReport.directory' in POPLAR_ENGINE_OPTIONS must be a directory name as a non-empty "
     'JSON string, got null. Example: {"autoReport.all": "true", "autoReport.directory": '
     '"./reports"}'),
    ("POPLAR_ENGINE_OPTIONS", '{"autoReport.directory": 7}', "got 7. Example"),
    ("PVTI_OPTIONS", '{"enable": "true", "directory": ""}', "'directory' in PVTI_OPTIONS"),
    ("PVTI_OPTIONS", '{"enable": "true", "directory": ["a"]}', 'got ["a"]'),
])
def test_bad_options_are_refused(monkeypatch: pytest.MonkeyPatch, var: str, raw: str,
                                 named: str) -> None:
    monkeypatch.delenv("POPLAR_ENGINE_OPTIONS", raising=False)
    monkeypatch.delenv("PVTI_OPTIONS", raising=False)
    monkeypatch.setenv(var, raw)
    with pytest.raises(IpuConfigError, match=var) as info:
        profile.from_environment()
    assert named in str(info.value)


def test_a_null_directory_writes_no_report_folder(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS",
                       '{"autoReport.all": "true", "autoReport.directory": null}')
    with pytest.raises(IpuConfigError, match="autoReport.directory"):
        profile.from_environment()
    assert list(tmp_path.iterdir()) == []


def test_options_without_effect_are_warned(monkeypatch: pytest.MonkeyPatch,
                                           caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", '{"autoReport.directory": "x", '
                       '"profiler.includeFlopEstimates": "true"}')
    monkeypatch.setenv("PVTI_OPTIONS", '{"directory": "y"}')
    with caplog.at_level(logging.WARNING, logger="jax_ipu.profile"):
        assert profile.from_environment() is None
    text = caplog.text
    assert "autoReport.directory" in text and "profiler.includeFlopEstimates" in text
    assert "directory in PVTI_OPTIONS" in text


def test_schema_check_names_what_is_wrong() -> None:
    doc = {"per_run": {"cycles": "many"}, "runs": [{"index": True}]}
    problems = schema.check(doc, schema.EXECUTION)
    assert "kind: missing" in problems
    assert "per_run.cycles: expected int or float, got str" in problems
    assert "runs[0].index: expected int, got a boolean" in problems


def test_histogram_ranges_cover_every_tile() -> None:
    bins = histogram([100, 100, 150, 199, 200], bins=4)
    assert bins == [(100, 126, 2), (126, 152, 1), (152, 178, 0), (178, 204, 2)]
    assert histogram([7] * 5, bins=2) == [(7, 8, 5), (8, 9, 0)]
