"""The op coverage page is generated from the model's rule tables and kept current.

A rule added, removed or changed in jax_ipu/model/ must show in ipu/docs/op_coverage.md."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "op_coverage.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("op_coverage", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_page_is_current():
    done = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.stdout.strip() == "current", (
        "ipu/docs/op_coverage.md is stale: run .venv/bin/python tools/op_coverage.py")


def test_rows_follow_the_rule_tables(tool):
    rows = {r[0].strip("`"): r[1:] for r in tool.rows()}
    assert rows["stablehlo.dot_general"][:2] == ("dot", "planned")
    assert rows["stablehlo.gather"][1] == "planned"
    assert rows["stablehlo.add"] == ("elementwise", "rule", "`model.costs.elementwise`", "yes")
    assert rows["stablehlo.reshape"][1] == "free"
    assert rows["stablehlo.while"][1] == "control"
    assert rows["stablehlo.composite"][1] == "inlined"
    assert rows["stablehlo.async_start"][:2] == ("unmodelled", "generic")
    assert rows["jax_ipu.linalg_cholesky"][0] == "library"
    assert rows["jax_ipu.tile_map"][0] == "tile_vertex"


def test_a_new_rule_changes_the_page(tool, monkeypatch):
    before = tool.table()
    monkeypatch.setitem(tool.cycles.OP_CLASSES, "async_start", "elementwise")
    after = tool.table()
    assert "| `stablehlo.async_start` | elementwise | rule |" in after
    assert after != before


def test_planned_means_reaching_the_planner(tool):
    assert tool.plans_as_poplibs(tool.costs.dot)
    assert not tool.plans_as_poplibs(tool.costs.elementwise)
