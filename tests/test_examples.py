"""Runs each example script in a subprocess, in its small CI configuration, on the ipu platform and
on cpu: both must reach the same accuracy or loss threshold, with the same numbers and figures."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "ipu" / "examples"
PLATFORMS = ("ipu", "cpu")

# name -> (CI arguments, {summary figure: (comparison, threshold)}, PNGs written by --plot).
# The thresholds are what these configurations reach on cpu, with a margin.
CASES: dict[str, tuple[list[str], dict[str, tuple[str, float]], list[str]]] = {
    "quickstart": (
        ["--size", "128", "--calls", "5"],
        {"max_error": ("<", 1e-5)},
        [],
    ),
    "linear_regression": (
        ["--steps", "200"],
        {"final_loss": ("<", 0.3), "weight_error": ("<", 0.1), "bias_error": ("<", 0.05)},
        ["linear_regression_loss.png", "linear_regression_fit.png"],
    ),
    "mnist_classifier": (
        # An empty cache and no download: the run must fall back to the digits, and say so.
        ["--epochs", "2", "--dataset", "auto", "--no-download"],
        {"test_accuracy": (">", 0.9), "final_loss": ("<", 0.6)},
        ["mnist_classifier_loss.png", "mnist_classifier_accuracy.png"],
    ),
    "mnist_classifier_on_device_loop": (
        ["--epochs", "2", "--dataset", "digits"],
        {"test_accuracy": (">", 0.9), "final_loss": ("<", 0.6)},
        ["on_device_loop_loss.png", "on_device_loop_accuracy.png"],
    ),
    "mnist_classifier_with_infeed": (
        ["--epochs", "2", "--dataset", "digits", "--compare"],
        {"test_accuracy": (">", 0.9), "final_loss": ("<", 0.6)},
        ["with_infeed_loss.png", "with_infeed_accuracy.png"],
    ),
    "gnn_training": (
        ["--steps", "100"],
        {"test_accuracy": (">", 0.85), "train_accuracy": (">", 0.99)},
        ["gnn_training.png"],
    ),
    "optimizer_state_offload": (
        ["--steps", "20"],
        {"final_loss": ("<", 3.2)},
        ["optimizer_state_offload_loss.png"],
    ),
    "tile_quickstart": (["--size", "256"], {"max_error": ("<", 1e-4)}, []),
    # The strongest bin of each frame within half a bin (62.5 Hz) of the chirp, on average.
    "spectrogram": (
        ["--samples", "4096", "--nperseg", "128"],
        {"mean_error_hz": ("<", 62.5), "frames": (">", 64)},
        ["spectrogram.png"],
    ),
    "tile_heat_equation": (
        ["--tiles", "32", "--rows", "4", "--cols", "32", "--steps", "20"],
        {"bit_equal": (">", 0.5), "checksum": (">", 0.0)},
        [],
    ),
}

_runs: dict[tuple[str, str], tuple[subprocess.CompletedProcess, dict[str, str], Path]] = {}


def run_example(
    name: str, platform: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[subprocess.CompletedProcess, dict[str, str], Path]:
    """Run an example once per platform per session; return the process, its summary, plot dir.

    Fails the calling test, with the example's stderr, when the example did not exit with 0."""
    if (name, platform) not in _runs:
        work = tmp_path_factory.mktemp(f"{name}-{platform}")
        args, _, _ = CASES[name]
        env = dict(os.environ, JAX_IPU_MNIST_DIR=str(work / "mnist-cache"))
        if platform == "cpu":
            # The baseline is plain JAX: it must not depend on the plugin loading.
            env["JAX_PLATFORMS"] = "cpu"
        proc = subprocess.run(
            [sys.executable, str(EXAMPLES / f"{name}.py"), "--platform", platform]
            + args
            + ["--plot", str(work / "plots")],
            capture_output=True,
            text=True,
            cwd=work,
            env=env,
            timeout=600,
        )
        _runs[name, platform] = (proc, {}, work / "plots")
        if proc.returncode == 0:
            _runs[name, platform] = (proc, parse_summary(proc.stdout, name), work / "plots")
    proc = _runs[name, platform][0]
    assert proc.returncode == 0, f"{name} on {platform} failed:\n{proc.stderr[-4000:]}"
    return _runs[name, platform]


def parse_summary(stdout: str, name: str) -> dict[str, str]:
    """The key=value pairs of the example's final `summary: NAME ...` line."""
    lines = stdout.strip().splitlines()
    assert lines, "the example printed nothing"
    match = re.fullmatch(rf"summary: {name} (.*)", lines[-1])
    assert match, f"last line is not the summary: {lines[-1]!r}"
    return dict(pair.split("=", 1) for pair in match.group(1).split())


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("name", list(CASES))
def test_example_reaches_threshold(
    name: str, platform: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _, summary, plots = run_example(name, platform, tmp_path_factory)
    assert summary["platform"] == platform
    _, thresholds, pngs = CASES[name]
    for key, (op, limit) in thresholds.items():
        value = float(summary[key])
        assert value < limit if op == "<" else value > limit, f"{key}={value}, wanted {op} {limit}"
    for png in pngs:
        assert (plots / png).stat().st_size > 1000, png


@pytest.mark.parametrize(
    "name",
    ["mnist_classifier", "mnist_classifier_on_device_loop", "mnist_classifier_with_infeed"],
)
@pytest.mark.parametrize("platform", PLATFORMS)
def test_dataset_is_announced(
    name: str, platform: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    proc, summary, _ = run_example(name, platform, tmp_path_factory)
    assert summary["data"] == "digits"
    assert "data: scikit-learn digits" in proc.stdout
    fell_back = "--no-download" in CASES[name][0]
    assert ("This is NOT MNIST" in proc.stdout) == fell_back
    assert ("falling back to scikit-learn digits" in proc.stderr) == fell_back


@pytest.mark.parametrize("name", list(CASES))
def test_ipu_matches_cpu(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    # Numerics come from XLA:CPU on both platforms, so training follows the same trajectory.
    ipu = run_example(name, "ipu", tmp_path_factory)[1]
    cpu = run_example(name, "cpu", tmp_path_factory)[1]
    for key in CASES[name][1]:
        assert float(ipu[key]) == pytest.approx(float(cpu[key]), rel=1e-3, abs=1e-6), key


@pytest.mark.parametrize("platform", PLATFORMS)
def test_infeed_example_trains_as_mnist_classifier(
    platform: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Same data, initialisation and batch order; one program per epoch instead of one per step.
    infeed = run_example("mnist_classifier_with_infeed", platform, tmp_path_factory)[1]
    per_step = run_example("mnist_classifier", platform, tmp_path_factory)[1]
    assert infeed["data"] == per_step["data"] and infeed["steps"] == per_step["steps"]
    for key in ("test_accuracy", "final_loss"):
        assert float(infeed[key]) == pytest.approx(float(per_step[key]), rel=1e-3), key


def test_infeed_example_compares_the_guide_steps(tmp_path_factory: pytest.TempPathFactory) -> None:
    proc, summary, _ = run_example("mnist_classifier_with_infeed", "ipu", tmp_path_factory)
    for way in ("jit", "donated", "infeed"):
        assert float(summary[f"{way}_model_ms"]) > 0, way
    # Donation is what lets the step update parameters and momentum in place.
    assert float(summary["jit_in_place_mib"]) == 0
    assert float(summary["donated_in_place_mib"]) == pytest.approx(5.11, abs=0.01)
    assert float(summary["infeed_in_place_mib"]) == pytest.approx(5.11, abs=0.01)
    rows = re.findall(r"^(jit, one call per step|\+ donate_argnums|\+ on-device loop with "
                      r"infeed) +(\d+) +[\d.]+ ms +[\d.]+ ms +[\d.]+ MiB", proc.stdout, re.M)
    assert [calls for _, calls in rows] == ["11", "11", "1"], proc.stdout
    cpu = run_example("mnist_classifier_with_infeed", "cpu", tmp_path_factory)[0].stdout
    assert "only on the ipu platform" in cpu


def test_offload_example_fits_only_with_the_state_in_streaming_memory(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    proc, summary, _ = run_example("optimizer_state_offload", "ipu", tmp_path_factory)
    assert (summary["onchip_fits"], summary["offload_fits"]) == ("0", "1")
    assert summary["state_kind"] == "pinned_host"
    # 3,168,512 parameters: two float32 moments each, 24.17 MiB, all in Streaming Memory
    assert float(summary["streaming_mib"]) == pytest.approx(8 * 3_168_512 / 2**20, rel=1e-3)
    assert float(summary["offload_tile_kib"]) < 624 < float(summary["onchip_tile_kib"])
    # Offloading costs the moves over the gateway: each step reads and writes the whole state.
    assert float(summary["offload_step_ms"]) > float(summary["onchip_step_ms"])
    assert "verdict: DOES NOT FIT" in proc.stdout and "verdict: FITS" in proc.stdout
    cpu = run_example("optimizer_state_offload", "cpu", tmp_path_factory)[1]
    assert cpu["state_kind"] == "pinned_host"


@pytest.mark.parametrize("name", list(CASES))
def test_model_view(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    proc, _, plots = run_example(name, "ipu", tmp_path_factory)
    ipu = proc.stdout
    cpu = run_example(name, "cpu", tmp_path_factory)[0].stdout
    assert re.search(r"^model view of .*: only on the ipu platform$", cpu, re.M)
    assert "only on the ipu platform" not in ipu
    assert re.search(r"^  memory: peak .* MiB; fullest tile \d+ holds", ipu, re.M)
    assert re.search(r"^  time at the chip's clock: [\d,.]+ us per call", ipu, re.M)
    assert list(plots.glob("model_memory_per_tile_*.png")), "no memory-per-tile figure"


# Packages a user who installed only jax-ipu lacks (the `examples` extra brings them).
OPTIONAL_PACKAGES = ("matplotlib", "tqdm")
ALL_EXAMPLES = sorted(p.stem for p in EXAMPLES.glob("*.py") if p.stem[0] != "_" and
                      p.stem != "datasets")


def run_script(name: str, args: list[str], blocked: tuple[str, ...] = (), cwd: Path | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess:
    """Run an example as `python NAME.py ARGS`, with the `blocked` packages unimportable (as if
    not installed: their sys.modules entries are None)."""
    script = str(EXAMPLES / f"{name}.py")
    code = (
        "import runpy, sys\n"
        f"for blocked in {blocked!r}:\n    sys.modules[blocked] = None\n"
        f"sys.path.insert(0, {str(EXAMPLES)!r})\n"
        f"sys.argv = {[script, *args]!r}\n"
        f"runpy.run_path({script!r}, run_name='__main__')\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


def help_text(name: str, blocked: tuple[str, ...] = ()) -> str:
    """An example's --help output (which must exit 0)."""
    proc = run_script(name, ["--help"], blocked)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("name", list(CASES))
def test_help(name: str) -> None:
    text = help_text(name)
    assert "--platform" in text and "--plot" in text


@pytest.mark.parametrize("name", ALL_EXAMPLES)
def test_help_lists_what_the_example_needs_without_the_optional_packages(name: str) -> None:
    text = " ".join(help_text(name, OPTIONAL_PACKAGES).split())
    assert "needs: jax-ipu" in text
    assert "optional: matplotlib (for --plot), tqdm" in text
    uses_digits = "mnist" in name
    assert ("scikit-learn" in text) == uses_digits
    assert ("networkx" in text) == (name == "gnn_training")


def test_quickstart_runs_with_the_package_alone(tmp_path: Path) -> None:
    proc = run_script("quickstart", ["--size", "64", "--calls", "2"], OPTIONAL_PACKAGES,
                      cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = parse_summary(proc.stdout, "quickstart")
    assert summary["platform"] == "ipu" and float(summary["max_error"]) < 1e-5


def test_plot_without_matplotlib_is_refused_before_any_work(tmp_path: Path) -> None:
    proc = run_script("quickstart", ["--plot", str(tmp_path)], ("matplotlib",))
    assert proc.returncode == 2
    assert "--plot needs matplotlib, which is not installed: pip install matplotlib" in proc.stderr
    assert proc.stdout == ""


def test_tile_examples_model_figures(tmp_path_factory: pytest.TempPathFactory) -> None:
    # The heat example's model figures come from the same programs on both platforms; the
    # quickstart's cycle counts equal the report's cycles between them on ipu (0 on cpu).
    ipu = run_example("tile_heat_equation", "ipu", tmp_path_factory)[1]
    cpu = run_example("tile_heat_equation", "cpu", tmp_path_factory)[1]
    for key in ("tile_cycles", "vertex_cycles", "plain_cycles", "tile_max_tile_bytes",
                "vertex_max_tile_bytes", "plain_max_tile_bytes", "checksum"):
        assert ipu[key] == cpu[key], key
    # One C++ vertex a step costs fewer cycles than nine lax vertices a step.
    assert int(ipu["vertex_cycles"]) < int(ipu["tile_cycles"])
    quick = run_example("tile_quickstart", "ipu", tmp_path_factory)[1]
    assert int(quick["counted_cycles"]) == int(quick["report_cycles"]) > 0
    assert run_example("tile_quickstart", "cpu", tmp_path_factory)[1]["counted_cycles"] == "0"
