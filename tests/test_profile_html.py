"""The HTML report: user strings escaped, no network, and it renders in headless Chromium with
no console errors and visible plots (tools/install_test_deps.sh installs chromium)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
from matplotlib import image

from tests._subprocess import run_python
from tests.test_profile_reports import folders, run

CHROMIUM = shutil.which("chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
# The plots' colours (jax_ipu.profile.plots.COLOURS): memory bars and the compute phase.
MEMORY_RGB, COMPUTE_RGB = (0x59, 0xA1, 0x4F), (0x4E, 0x79, 0xA7)


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile_dir = tmp_path / "chromium-profile"
    return subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}", *args],
                          capture_output=True, text=True, timeout=120, check=True)


def pixels_of(png: np.ndarray, rgb: tuple[int, int, int]) -> int:
    return int(np.all(np.abs(png[..., :3] * 255 - rgb) < 3, axis=-1).sum())


def test_user_strings_are_escaped(tmp_path: Path) -> None:
    """A function and a source file named with <script> appear as text, never as markup."""
    evil_file = tmp_path / "<script>alert('file')</script>.py"
    code = f"""
    import numpy as np, jax
    source = "import jax.numpy as jnp\\ndef f(x):\\n    return jnp.sin(x) * 2\\n"
    scope = {{}}
    exec(compile(source, {str(evil_file)!r}, "exec"), scope)
    f = scope["f"]
    f.__code__ = f.__code__.replace(co_name="<script>alert(1)</script>",
                                    co_qualname="<script>alert(1)</script>")
    f.__name__ = f.__qualname__ = "<script>alert(1)</script>"
    jax.jit(f).lower(np.ones(8, np.float32)).compile()
    """
    run_python(code, env={"JAX_PLATFORMS": "ipu", "PVTI_OPTIONS": "", "POPLAR_ENGINE_OPTIONS":
                          f'{{"autoReport.all": "true", "autoReport.directory": "{tmp_path}"}}'})
    (folder,) = folders(tmp_path)
    assert folder.name.startswith("jit__script_alert_1___script_")
    page = (folder / "report.html").read_text()
    assert "<script>alert" not in page
    assert page.count("<script>") == 1  # the page's own sorting script
    assert "(&lt;script&gt;alert(1)&lt;/script&gt;)" in page
    assert "&lt;script&gt;alert(&#x27;file&#x27;)&lt;/script&gt;.py:3" in page
    # Nothing may be fetched: no external URL, and a policy that forbids it.
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page and "default-src 'none'" in page


def test_report_renders_in_chromium(tmp_path: Path) -> None:
    # `make test` installs chromium (tools/install_test_deps.sh): a missing browser is a failure.
    assert CHROMIUM is not None, "chromium missing: run tools/install_test_deps.sh"
    run(tmp_path, '{"autoReport.all": "true", "autoReport.directory": "out"}')
    (folder,) = folders(tmp_path / "out")
    url = (folder / "report.html").as_uri()

    dom = chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", url)
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []
    assert dom.stdout.count("<svg") == 5 and dom.stdout.count('<table class="sortable">') == 4

    shot = tmp_path / "report.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,2000", url)
    png = image.imread(shot)
    assert png.shape[:2] == (2000, 1400)
    not_white = np.any(png[..., :3] < 0.95, axis=-1).mean()
    assert not_white > 0.05
    # The memory-per-tile bars and the compute segments of the cycles chart are drawn.
    assert pixels_of(png, MEMORY_RGB) > 10_000
    assert pixels_of(png, COMPUTE_RGB) > 100
