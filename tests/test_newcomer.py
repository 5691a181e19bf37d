"""A newcomer's first hour: the README's next command after `make demo` works, examples do what
their options say and end quietly, the package builds without warnings, the HTML report's prose
columns stay readable (issue 29, "A newcomer's first hour")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from matplotlib import image

from jax_ipu.profile.html import STYLE, table
from tests.test_examples_multi_ipu import run_example

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_readme_runs_what_follows_make_demo_with_the_venvs_python():
    """Before: `python ipu/examples/quickstart.py` after `make demo` found no jax."""
    setup = README[README.index("## Set up"):README.index("## Quickstart")]
    commands = re.search(r"```bash\n(.*?)```", setup, re.S).group(1).splitlines()
    assert [c.split()[:2] for c in commands] == [["make", "demo"], ["make", "test"]]
    assert "source .venv/bin/activate" in setup and "`.venv/bin/python`" in setup
    quick = re.search(r"`\.venv/bin/python -m pytest -q ((?:tests/\S+ ?)+)`", setup)
    assert quick and all((ROOT / name).is_file() for name in quick.group(1).split())
    assert "`.venv/bin/python ipu/examples/NAME.py` after `make demo`" in README
    assert "Each runs with `python ipu" not in README


def test_the_license_is_an_spdx_string():
    """Before: the `{text = ...}` table, which `python -m build` warned was deprecated."""
    text = (ROOT / "pyproject.toml").read_text()  # tomllib is not in Python 3.10
    assert re.findall(r"^license\s*=.*$", text, re.M) == [
        'license = "Apache-2.0"  # SPDX (PEP 639): the table form is deprecated by setuptools']


def test_sharding_quickstart_writes_its_plot(tmp_path_factory: pytest.TempPathFactory):
    """Before: --plot DIR was accepted and nothing was written."""
    proc, _, plots = run_example("sharding_quickstart", "ipu", tmp_path_factory)
    png = plots / "sharding_quickstart_layouts.png"
    assert f"saved {png}" in proc.stdout
    assert image.imread(png).shape[1] > 1000  # five panels side by side


def test_multi_process_quickstart_ends_without_grpc_errors(
        tmp_path_factory: pytest.TempPathFactory):
    """Before: four gRPC warning blocks (WatchTasks: UNAVAILABLE) after a good run."""
    proc, summary, _ = run_example("multi_process_quickstart", "ipu", tmp_path_factory)
    assert summary["processes"] == "2"
    assert "GRPC" not in proc.stderr and "WatchTasks" not in proc.stderr, proc.stderr[-3000:]


def test_the_reports_prose_columns_keep_a_readable_width():
    """Before: the plan and runner-up columns squeezed to one word a line in a wide table."""
    html = table(["op", "cycles", "plan"], [["dot", 1200, "a long sentence " * 8]],
                 wide=frozenset({2}))
    assert '<div class="scroll"><table class="sortable">' in html
    assert '<td class="w">a long sentence' in html and '<td class="n"' in html
    assert "td.w{min-width:32ch}" in STYLE and ".scroll{overflow-x:auto}" in STYLE
