"""The TPU preview's demos (pmap_cookbook, lorenz_ode, wave_equation), each run small on 8 devices:
on a local IPU Model, on cpu, and with --remote against one real server on 127.0.0.1. The three
print the same numbers; the IPU runs print the model's per-step time and IPU-Link costs, the
same locally and remotely."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._remote import Server, server  # noqa: F401 - the module's shared server fixture
from tests.test_examples import parse_summary

EXAMPLES = Path(__file__).resolve().parents[1] / "ipu" / "examples"
DEVICES = 8
COLS = 64  # the wave's grid columns: a halo row is COLS float32

# name -> small CI arguments, and the PNG its --plot writes.
CASES: dict[str, tuple[list[str], str]] = {
    "pmap_cookbook": (["--size", "64", "--steps", "20"], "pmap_cookbook_loss.png"),
    "lorenz_ode": (["--steps", "5000"], "lorenz_ode.png"),
    "wave_equation": (["--rows", "64", "--cols", str(COLS), "--frames", "4",
                       "--steps-per-frame", "20"], "wave_equation_frames.png"),
}
# Summary figures that are not results: the platform, and wall-clock time.
NOT_RESULTS = {"platform", "wall_s"}
MODEL_FIGURES = {"step_us", "link_us", "link_bytes", "ring_link_us", "psum_link_us"}

_runs: dict[tuple[str, str], tuple[subprocess.CompletedProcess, dict[str, str], Path]] = {}


def run_demo(name: str, mode: str, tmp_path_factory: pytest.TempPathFactory,
             address: str | None = None, extra: list[str] | None = None
             ) -> tuple[subprocess.CompletedProcess, dict[str, str], Path]:
    """Run a demo once per mode ("ipu", "cpu", "remote"); its process, summary, plot dir."""
    key = (name, mode + " ".join(extra or []))
    if key not in _runs:
        work = Path(tmp_path_factory.mktemp(f"{name}-{mode}"))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_IPU_", "POPLAR_"))}
        env.pop("XLA_FLAGS", None)
        env["TF_CPP_MIN_LOG_LEVEL"] = "3"
        args = [sys.executable, str(EXAMPLES / f"{name}.py"), "--devices", str(DEVICES),
                *CASES[name][0], "--plot", str(work / "plots"), *(extra or [])]
        if mode == "cpu":
            env["JAX_PLATFORMS"] = "cpu"  # the baseline is plain JAX, without the plugin
            args += ["--platform", "cpu"]
        elif mode == "remote":
            args += ["--remote", address]
        proc = subprocess.run(args, capture_output=True, text=True, cwd=work, env=env,
                              timeout=300)
        summary = parse_summary(proc.stdout, name) if proc.returncode == 0 else {}
        _runs[key] = (proc, summary, work / "plots")
    proc, summary, plots = _runs[key]
    assert proc.returncode == 0, f"{name} ({mode}) failed:\n{proc.stderr[-4000:]}"
    return proc, summary, plots


def results(summary: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in summary.items() if k not in NOT_RESULTS | MODEL_FIGURES}


@pytest.mark.parametrize("name", list(CASES))
def test_demo_on_the_ipu_model_gives_cpu_numbers(
        name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    _, ipu, plots = run_demo(name, "ipu", tmp_path_factory)
    _, cpu, _ = run_demo(name, "cpu", tmp_path_factory)
    assert ipu["platform"] == "ipu" and cpu["platform"] == "cpu"
    assert ipu["devices"] == cpu["devices"] == str(DEVICES)
    assert results(ipu) == results(cpu)
    # The model's figures are printed on ipu only.
    assert float(ipu["step_us"]) > float(ipu["link_us"]) > 0
    assert not MODEL_FIGURES & set(cpu)
    png = plots / CASES[name][1]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG"


def test_demo_checks_pass(tmp_path_factory: pytest.TempPathFactory) -> None:
    """What each demo checks itself, and what it computes, in numbers."""
    cookbook = run_demo("pmap_cookbook", "ipu", tmp_path_factory)[1]
    assert cookbook["ring_equals_psum"] == "True"
    assert float(cookbook["final_loss"]) < 0.05  # from 12.5: the data-parallel step trains
    lorenz = run_demo("lorenz_ode", "ipu", tmp_path_factory)[1]
    assert float(lorenz["host_error"]) < 1e-4
    assert lorenz["chaotic"] == "3"  # rho = 27.9, 31.4 and 35 of 10..35: past chaos at 24.74
    wave = run_demo("wave_equation", "ipu", tmp_path_factory)[1]
    assert float(wave["host_error"]) < 1e-6 and wave["steps"] == "80"


def test_wave_halos_cross_the_ipu_links(tmp_path_factory: pytest.TempPathFactory) -> None:
    # Each step, each IPU sends its last row down and its first row up: 2 rows of float32.
    proc, wave, plots = run_demo("wave_equation", "ipu", tmp_path_factory)
    assert float(wave["link_bytes"]) == 2 * COLS * 4
    assert "IPU-Links: wave step: each IPU sends 10,240 B per call (512 B per step)" in proc.stdout
    from matplotlib import image

    strip = image.imread(plots / "wave_equation_frames.png")
    assert strip.shape[1] > 3 * strip.shape[0]  # 4 frames side by side


@pytest.mark.parametrize("name", list(CASES))
def test_demo_remote_equals_local(name: str, server: Server,  # noqa: F811
                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    """The same numbers, and the same model figures, from the server's IPU Models."""
    proc, remote, _ = run_demo(name, "remote", tmp_path_factory, server.address)
    _, local, _ = run_demo(name, "ipu", tmp_path_factory)
    assert f"{DEVICES} IPU Models of the jax-ipu server at {server.address}" in proc.stdout
    assert {k: v for k, v in remote.items() if k != "wall_s"} == \
        {k: v for k, v in local.items() if k != "wall_s"}


def test_a_demo_asking_for_more_devices_than_the_server_has(
        server: Server, tmp_path_factory: pytest.TempPathFactory) -> None:  # noqa: F811
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "lorenz_ode.py"), "--devices", "16", "--steps", "10",
         "--remote", server.address], capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("JAX_IPU_")})
    assert proc.returncode == 1
    assert ("16 devices asked for, the server has 8: pass --devices 8, or start the server "
            "with --devices 16") in proc.stderr
