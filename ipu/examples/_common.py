"""What the example scripts share: command-line options, device choice, data announcements, plots,
the IPU Model's view of a compiled program, and the one-line summary the tests read.

The examples need only jax-ipu itself; matplotlib (for --plot) and tqdm (progress bars) are
imported when used, so a user who installed just the package can run them."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from datasets import ImageDataset

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from jax_ipu.model.report import ProgramReport

KIB = 1024
MIB = 1024 * 1024
EXTRAS = "pip install '.[examples]' in the jax-ipu checkout"
OPTIONAL = f"optional: matplotlib (for --plot), tqdm (progress bars); {EXTRAS} installs them"
SKLEARN = "scikit-learn, for the digits when MNIST is not cached and cannot be downloaded"


def add_common_args(parser: argparse.ArgumentParser, needs: Sequence[str] = ()) -> None:
    """Options every example takes (platform, plot directory, seed), and a --help epilog saying
    what the example needs beyond jax-ipu (`needs`) and what is optional."""
    parser.add_argument(
        "--platform",
        choices=("ipu", "cpu"),
        default="ipu",
        help="JAX platform to run on; 'cpu' runs the same configuration for comparison",
    )
    parser.add_argument(
        "--plot", metavar="DIR", type=_plot_dir, help="save PNG figures into DIR (needs matplotlib)"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument(
        "--remote", metavar="grpc://HOST:PORT", type=use_remote,
        help="run 'ipu' on the IPU Model devices of a jax-ipu server (python -m jax_ipu serve), "
        "as JAX_IPU_REMOTE does; see ipu/docs/remote.md",
    )
    required = ["jax-ipu (with jax, jaxlib, numpy)", *needs]
    parser.epilog = f"needs: {'; '.join(required)}. {OPTIONAL}."


def use_remote(address: str) -> str:
    """Point platform 'ipu' at the server at `address` (before jax starts its backends): what
    --remote does, and what JAX_IPU_REMOTE does for any script."""
    import jax_ipu  # noqa: F401 - registers the jax_ipu_* flags
    from jax_ipu.errors import IpuConfigError

    try:
        jax.config.update("jax_ipu_remote", address)
    except IpuConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return address


def is_remote(device: jax.Device) -> bool:
    """Whether `device` is a remote server's (JAX_IPU_REMOTE, --remote)."""
    return str(getattr(device.client, "runtime_type", "")).startswith("proxy/")


def _plot_dir(value: str) -> str:
    """--plot's argument, refused at once (before any training) when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise argparse.ArgumentTypeError(
            f"--plot needs matplotlib, which is not installed: pip install matplotlib (or "
            f"{EXTRAS}), or run without --plot"
        ) from None
    return value


def pyplot() -> Any:
    """matplotlib.pyplot on the headless Agg backend (imported only when a figure is drawn)."""
    import matplotlib

    # Examples run headless (CI, ssh); Agg must be chosen before pyplot is imported.
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def progress(items: Iterable[Any], **kwargs: Any) -> Iterable[Any]:
    """A tqdm progress bar over `items` when tqdm is installed; `items` unchanged otherwise."""
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, **kwargs)


def note(text: str) -> None:
    """Print a line without breaking a progress bar."""
    try:
        from tqdm import tqdm
    except ImportError:
        print(text)
        return
    tqdm.write(text)


def add_image_data_args(parser: argparse.ArgumentParser) -> None:
    """Options of the examples that train on MNIST."""
    parser.add_argument(
        "--dataset",
        choices=("auto", "mnist", "digits"),
        default="auto",
        help="'auto': MNIST if it is cached or can be downloaded, else scikit-learn's digits "
        "(announced); 'mnist': MNIST or fail; 'digits': scikit-learn's digits",
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help="MNIST cache directory (default: $JAX_IPU_MNIST_DIR or ~/.cache/jax_ipu/mnist)",
    )
    parser.add_argument(
        "--no-download", action="store_true", help="use only MNIST files already in the cache"
    )


def device_for(platform: str) -> jax.Device:
    """The first device of `platform`, with a hint when the IPU plugin is not installed."""
    try:
        return jax.devices(platform)[0]
    except RuntimeError as err:
        hint = ""
        if platform == "ipu":
            hint = " Install this project (pip install -e .) so JAX discovers the jax_ipu plugin."
        raise SystemExit(f"platform {platform!r} is not available ({err}).{hint}") from err


def announce_dataset(data: ImageDataset) -> None:
    """Print which data set is in use; a fallback from MNIST is printed as a warning line."""
    if data.fallback_reason:
        print(f"WARNING: {data.fallback_reason}; using {data.name} instead. This is NOT MNIST.")
    print(
        f"data: {data.name}: {len(data.train_labels)} training and "
        f"{len(data.test_labels)} test images of {data.train_images.shape[1]} pixels"
    )


def data_tag(data: ImageDataset) -> str:
    """Short name of the data set for the summary line."""
    return "mnist" if data.is_mnist else "digits"


def plot_curves(
    plot_dir: str | None,
    filename: str,
    title: str,
    xlabel: str,
    curves: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    ylabel: str = "",
    logy: bool = False,
    styles: Mapping[str, str] | None = None,
) -> None:
    """Save one figure of named (x, y) curves into `plot_dir`, if a directory was asked for.

    `styles` maps a curve's name to a matplotlib format string (e.g. "." for a scatter)."""
    if not plot_dir:
        return
    fig, ax = pyplot().subplots(figsize=(6, 4))
    for label, (xs, ys) in curves.items():
        ax.plot(xs, ys, (styles or {}).get(label, "-"), label=label)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    if logy:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend()
    _save(fig, plot_dir, filename)


def plot_training(plot_dir: str | None, prefix: str, title: str, step_losses: Sequence[float],
                  epoch_acc: Sequence[float]) -> None:
    """The two figures every classifier example saves: loss per step, test accuracy per epoch."""
    plot_curves(plot_dir, f"{prefix}_loss.png", title, "step",
                {"training loss": (range(len(step_losses)), step_losses)},
                ylabel="cross-entropy", logy=True)
    plot_curves(plot_dir, f"{prefix}_accuracy.png", title, "epoch",
                {"test accuracy": (range(1, len(epoch_acc) + 1), epoch_acc)})


def model_view(
    compiled: jax.stages.Compiled,
    device: jax.Device,
    label: str,
    plot_dir: str | None = None,
) -> dict[str, float] | None:
    """Print (and plot) the IPU Model's view of a compiled program; None off the ipu platform.

    Returns the figures shown (seconds is the modelled time per call), so examples can compare
    programs."""
    if device.platform != "ipu":
        print(f"model view of {label}: only on the ipu platform")
        return None
    # Imported here: on --platform cpu the examples run on plain JAX, without the plugin.
    import jax_ipu

    report: ProgramReport = jax_ipu.report(compiled)
    target, mem, cyc = report.target, report.memory, report.cycles
    print(
        f"model view of {label}: {target.version}, {target.num_tiles} tiles of "
        f"{target.bytes_per_tile / KIB:.0f} KiB at {target.clock_hz / 1e9:.2f} GHz"
    )
    fits = (
        "fits" if not mem.out_of_memory else f"{len(mem.tiles_out_of_memory)} tiles OUT OF MEMORY"
    )
    print(
        f"  memory: peak {mem.peak_bytes / MIB:.2f} MiB of {target.total_bytes / MIB:.0f} MiB; "
        f"fullest tile {mem.max_tile} holds {mem.max_tile_bytes / KIB:.1f} KiB "
        f"({100 * mem.max_tile_bytes / target.bytes_per_tile:.1f}%); {fits}"
    )
    print(
        f"          arguments {mem.argument_bytes / MIB:.2f} MiB, outputs "
        f"{mem.output_bytes / MIB:.2f} MiB (donated, in place: {mem.alias_bytes / MIB:.2f} MiB), "
        f"temporaries {mem.temporary_bytes / MIB:.2f} MiB, code {mem.code_bytes_per_tile} B/tile"
    )
    print(
        f"  cycles: {cyc.total:,.0f} = compute {cyc.compute:,.0f} + exchange {cyc.exchange:,.0f}"
        f" + sync {cyc.sync:,.0f} + host exchange {cyc.host_exchange:,.0f}"
    )
    rate = report.flops / report.seconds / 1e12 if report.seconds else 0.0
    print(
        f"  time at the chip's clock: {report.seconds * 1e6:,.2f} us per call "
        f"({report.flops / 1e6:,.2f} MFLOP, {rate:.3f} TFLOP/s)"
    )
    for warning in report.warnings:
        print(f"  model warning: {warning}")
    if plot_dir:
        per_tile = np.asarray(mem.per_tile_bytes) / KIB
        fig, ax = pyplot().subplots(figsize=(7, 3.5))
        ax.bar(np.arange(len(per_tile)), per_tile, width=1.0, linewidth=0)
        ax.axhline(target.bytes_per_tile / KIB, color="red", linestyle="--", label="tile memory")
        ax.set(
            title=f"Memory per tile: {label} ({target.version}, peak of each tile)",
            xlabel="tile",
            ylabel="KiB",
        )
        ax.legend()
        _save(fig, plot_dir, f"model_memory_per_tile_{_slug(label)}.png")
    return {
        "seconds": float(report.seconds),
        "cycles": float(cyc.total),
        "peak_bytes": float(mem.peak_bytes),
        "max_tile_bytes": float(mem.max_tile_bytes),
        "flops": float(report.flops),
    }


def model_clock(device: jax.Device) -> float | None:
    """Seconds on the device's model clock (modelled time of everything run so far); None off
    the ipu platform. Differences between two readings time a piece of work on the IPU."""
    if device.platform != "ipu" or is_remote(device):  # the clock is the server's
        return None
    import jax_ipu

    return jax_ipu.clock(device).seconds


def summary(example: str, **figures: object) -> None:
    """The final line of every example: `summary: NAME key=value ...`, read by the tests."""
    parts = " ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()
    )
    print(f"summary: {example} {parts}")


def _slug(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


def save_image(plot_dir: str | None, filename: str, image: np.ndarray) -> None:
    """Save a 2-D array as a black-and-white PNG into `plot_dir`, if a directory was asked for."""
    if not plot_dir:
        return
    os.makedirs(plot_dir, exist_ok=True)
    path = Path(plot_dir) / filename
    pyplot().imsave(path, image, cmap="binary")
    print(f"saved {path}")


def save_figure(fig: Figure, plot_dir: str, filename: str) -> None:
    """Save a figure an example drew itself into `plot_dir`."""
    _save(fig, plot_dir, filename)


def _save(fig: Figure, plot_dir: str, filename: str) -> None:
    os.makedirs(plot_dir, exist_ok=True)
    path = Path(plot_dir) / filename
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot().close(fig)
    print(f"saved {path}")
