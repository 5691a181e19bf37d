"""Executes the README's quickstart snippet (the first ```python block under a heading containing
"Quickstart") in a fresh interpreter, so the README cannot drift from what works."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def quickstart_snippet(markdown: str) -> str:
    """The first ```python block after the first heading that contains "Quickstart"."""
    heading = re.search(r"^#+ .*quickstart.*$", markdown, re.I | re.M)
    assert heading, "README.md has no heading containing 'Quickstart'"
    block = re.search(r"^```python\n(.*?)^```", markdown[heading.end() :], re.M | re.S)
    assert block, "no ```python block under the Quickstart heading"
    return block.group(1)


def test_quickstart_snippet_helper() -> None:
    markdown = (
        "# Title\n```python\nprint('not this')\n```\n## Quickstart on the IPU Model\n"
        "Text.\n```bash\npip install .\n```\n```python\nx = 1\nprint(x)\n```\n"
    )
    assert quickstart_snippet(markdown) == "x = 1\nprint(x)\n"


def test_readme_quickstart_runs(tmp_path: Path) -> None:
    snippet = quickstart_snippet(README.read_text())
    proc = subprocess.run(
        [sys.executable, "-c", snippet], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    # The snippet is the seed's minimal example: its output names the IPU device.
    assert "IpuDevice" in proc.stdout, proc.stdout
