"""The 2-D wave equation on a grid whose rows are split over 8 IPUs, after the Cloud TPU preview's
wave equation demo: every step, each IPU sends its edge rows to its neighbours with ppermute
(halos over the IPU-Links) and advances its block with a leapfrog stencil.

The devices run `--steps-per-frame` steps per call (lax.fori_loop inside pmap, so halos never
leave the IPUs); the host reads a frame back after each call, checks it against the same scheme
run on the host in numpy, and with --plot writes the frames as one strip (PNG)."""

from __future__ import annotations

import sys

import _multi_device

# Before jax is imported: the device count is fixed when a platform starts.
_multi_device.request_devices(sys.argv[1:], default=8)

import argparse  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import _common  # noqa: E402
import _demos  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

AXIS = "x"


def initial_field(rows: int, cols: int) -> np.ndarray:
    """Two Gaussian pulses of opposite sign, off centre (so the picture is not symmetric)."""
    y, x = np.meshgrid(np.linspace(0, 1, rows), np.linspace(0, 1, cols), indexing="ij")
    pulse = np.exp(-((y - 0.3) ** 2 + (x - 0.35) ** 2) / 0.004)
    pulse -= 0.6 * np.exp(-((y - 0.7) ** 2 + (x - 0.7) ** 2) / 0.002)
    return pulse.astype(np.float32)


def laplacian(u: jax.Array | np.ndarray, above: jax.Array | np.ndarray,
              below: jax.Array | np.ndarray, xp: Any = jnp) -> jax.Array | np.ndarray:
    """The 5-point Laplacian of a block of rows, given the rows just above and below it; zero
    beyond the left and right edges (a fixed boundary)."""
    padded = xp.concatenate([above, u, below])
    zero = xp.zeros((u.shape[0], 1), u.dtype)
    left = xp.concatenate([zero, u[:, :-1]], axis=1)
    right = xp.concatenate([u[:, 1:], zero], axis=1)
    return (padded[:-2] + padded[2:]) + (left + right) - 4 * u


def device_frame(n: int, steps: int,
                 courant2: float) -> Callable[..., tuple[jax.Array, jax.Array]]:
    """One call's work on one device: `steps` leapfrog steps of its block, halos by ppermute."""
    down = [(k, k + 1) for k in range(n - 1)]  # my last row is the next device's upper halo
    up = [(k + 1, k) for k in range(n - 1)]  # my first row is the previous device's lower halo

    def step(_: int, state: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        previous, u = state
        # Devices at the ends receive nothing (zeros): the grid's fixed top and bottom edges.
        above = lax.ppermute(u[-1:], AXIS, down)
        below = lax.ppermute(u[:1], AXIS, up)
        return u, 2 * u - previous + courant2 * laplacian(u, above, below)

    def frame(previous: jax.Array, u: jax.Array) -> tuple[jax.Array, jax.Array]:
        return lax.fori_loop(0, steps, step, (previous, u))

    return frame


def host_frames(u0: np.ndarray, frames: int, steps: int, courant2: float) -> list[np.ndarray]:
    """The same scheme on the host, on the whole grid in float32 (the devices' reference)."""
    zero_row = np.zeros((1, u0.shape[1]), np.float32)
    c2 = np.float32(courant2)
    previous, u, out = u0, u0, []
    for _ in range(frames):
        for _ in range(steps):
            previous, u = u, 2 * u - previous + c2 * laplacian(u, zero_row, zero_row, np)
        out.append(u)
    return out


def save_strip(plot_dir: str | None, frames: list[np.ndarray], times: list[float]) -> None:
    """The frames side by side in one PNG, on one colour scale."""
    if not plot_dir:
        return
    scale = max(float(np.abs(f).max()) for f in frames) or 1.0
    fig, axes = _common.pyplot().subplots(1, len(frames), figsize=(2.2 * len(frames), 2.6),
                                          squeeze=False)
    for ax, field, t in zip(axes[0], frames, times, strict=True):
        ax.imshow(field, cmap="seismic", vmin=-scale, vmax=scale)
        ax.set(title=f"t = {t:.2f}", xticks=[], yticks=[])
    _common.save_figure(fig, plot_dir, "wave_equation_frames.png")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    _common.add_common_args(parser)
    _multi_device.add_devices_arg(parser, default=8)
    parser.add_argument("--rows", type=int, default=256, help="grid rows, split over devices")
    parser.add_argument("--cols", type=int, default=256, help="grid columns")
    parser.add_argument("--frames", type=int, default=8, help="frames read back and drawn")
    parser.add_argument("--steps-per-frame", type=int, default=50,
                        help="leapfrog steps the devices run between two frames")
    parser.add_argument("--courant", type=float, default=0.5,
                        help="c*dt/dx; the scheme is stable below 1/sqrt(2)")
    args = parser.parse_args(argv)
    if args.rows % args.devices:
        parser.error(f"--rows {args.rows} is not a multiple of --devices {args.devices}")
    if min(args.frames, args.steps_per_frame, args.cols, args.rows // args.devices) < 1:
        parser.error("--frames, --steps-per-frame, --cols and rows per device must be >= 1")
    if not 0 < args.courant < 2 ** -0.5:
        parser.error(f"--courant {args.courant}: the leapfrog scheme is unstable unless "
                     "0 < c*dt/dx < 1/sqrt(2)")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    devices = _demos.take_devices(args.platform, args.devices)
    n = len(devices)
    print(f"{n} devices: {devices}")
    print(f"grid {args.rows} x {args.cols}: {args.rows // n} rows per device, halos of one "
          f"row ({args.cols * 4} B) to each neighbour per step")
    u0 = initial_field(args.rows, args.cols)
    courant2 = args.courant ** 2
    program = jax.pmap(device_frame(n, args.steps_per_frame, courant2), axis_name=AXIS,
                       devices=devices, donate_argnums=(0, 1))
    blocks = u0.reshape(n, args.rows // n, args.cols)
    costs = _demos.step_costs(program.lower(blocks, blocks).compile(), devices[0],
                              args.steps_per_frame, "wave step")

    previous, u = program(blocks, blocks)  # the first call compiles; its frame is kept
    frames = [np.asarray(u).reshape(args.rows, args.cols)]
    start = time.perf_counter()
    for _ in range(args.frames - 1):
        previous, u = program(previous, u)
        frames.append(np.asarray(u).reshape(args.rows, args.cols))
    wall = time.perf_counter() - start
    times = [(i + 1) * args.steps_per_frame * args.courant / args.cols
             for i in range(args.frames)]
    for t, field in zip(times, frames, strict=True):
        print(f"t = {t:.3f}: amplitude {np.abs(field).max():.4f}, sum {field.sum():+.4f}")

    reference = host_frames(u0, args.frames, args.steps_per_frame, courant2)
    error = max(float(np.abs(f - r).max()) for f, r in zip(frames, reference, strict=True))
    print(f"largest difference from the host's numpy run: {error:.3g}")
    if error > 1e-4:
        raise SystemExit("the devices' wave differs from the host reference")
    save_strip(args.plot, frames, times)
    _common.summary(
        "wave_equation", platform=args.platform, devices=n,
        steps=args.frames * args.steps_per_frame, host_error=error,
        amplitude=float(np.abs(frames[-1]).max()), frames=_demos.digest(*frames),
        **costs, wall_s=wall)


if __name__ == "__main__":
    main()
