"""The Lorenz system solved with fourth-order Runge-Kutta on 8 IPUs with pmap, after the Cloud
TPU preview's Lorenz ODE solver demo: each IPU integrates its own value of rho (from a steady
state to chaos), for a few trajectories that start a hair apart.

The whole integration is one program per device (lax.scan over the steps, the trajectory kept on
the IPU); at the end one pmin and one pmax over the IPU-Links give every device the bounding box
of all trajectories (the common axes of the plot). The trajectories' spread at the end shows
which values of rho are chaotic."""

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

AXIS = "rho"
SIGMA, BETA = 10.0, 8.0 / 3.0
# Trajectories that start 1e-3 apart and end further apart than this have diverged: chaos.
CHAOTIC = 0.5


def lorenz(state: jax.Array | np.ndarray, rho: jax.Array | np.ndarray,
           xp: Any = jnp) -> jax.Array | np.ndarray:
    """dx/dt of the Lorenz system, for states (..., 3)."""
    x, y, z = state[..., 0], state[..., 1], state[..., 2]
    return xp.stack([SIGMA * (y - x), x * (rho - z) - y, x * y - BETA * z], axis=-1)


def rk4_step(state: jax.Array | np.ndarray, rho: jax.Array | np.ndarray, dt: float,
             xp: Any = jnp) -> jax.Array | np.ndarray:
    k1 = lorenz(state, rho, xp)
    k2 = lorenz(state + dt / 2 * k1, rho, xp)
    k3 = lorenz(state + dt / 2 * k2, rho, xp)
    k4 = lorenz(state + dt * k3, rho, xp)
    return state + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


def solve(steps: int, dt: float) -> Callable[..., tuple[jax.Array, jax.Array, jax.Array]]:
    """One device's program: its trajectories over `steps` steps, and the box around every
    device's trajectories."""

    def run(start: jax.Array, rho: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        def body(state: jax.Array, _: None) -> tuple[jax.Array, jax.Array]:
            state = rk4_step(state, rho, dt)
            return state, state

        _, path = lax.scan(body, start, None, length=steps)  # (steps, trajectories, 3)
        low = lax.pmin(path.min(axis=(0, 1)), AXIS)
        high = lax.pmax(path.max(axis=(0, 1)), AXIS)
        return path, low, high

    return run


def host_path(start: np.ndarray, rho: float, dt: float, steps: int) -> np.ndarray:
    """The same integrator on the host in float32, for the devices' first steps."""
    state, out = start, []
    for _ in range(steps):
        state = rk4_step(state, np.float32(rho), np.float32(dt), np).astype(np.float32)
        out.append(state)
    return np.stack(out)


def plot(plot_dir: str | None, paths: np.ndarray, rhos: np.ndarray, low: np.ndarray,
         high: np.ndarray) -> None:
    """Each device's trajectories in the x-z plane, on the common axes the devices agreed on."""
    if not plot_dir:
        return
    n = len(rhos)
    cols = min(n, 4)
    rows = -(-n // cols)
    fig, axes = _common.pyplot().subplots(rows, cols, figsize=(3 * cols, 2.6 * rows),
                                          squeeze=False)
    for ax, path, rho in zip(axes.flat, paths, rhos, strict=False):
        for k in range(path.shape[1]):
            ax.plot(path[:, k, 0], path[:, k, 2], linewidth=0.4)
        ax.set(title=f"rho = {rho:.1f}", xlim=(low[0], high[0]), ylim=(low[2], high[2]),
               xticks=[], yticks=[])
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    _common.save_figure(fig, plot_dir, "lorenz_ode.png")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    _common.add_common_args(parser)
    _multi_device.add_devices_arg(parser, default=8)
    parser.add_argument("--steps", type=int, default=5000, help="Runge-Kutta steps")
    parser.add_argument("--dt", type=float, default=0.005, help="time step")
    parser.add_argument("--trajectories", type=int, default=4,
                        help="trajectories per device, starting 1e-3 apart")
    parser.add_argument("--rho-min", type=float, default=10.0)
    parser.add_argument("--rho-max", type=float, default=35.0)
    args = parser.parse_args(argv)
    if min(args.steps, args.trajectories) < 1 or args.dt <= 0:
        parser.error("--steps and --trajectories must be >= 1, --dt > 0")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    devices = _demos.take_devices(args.platform, args.devices)
    n = len(devices)
    print(f"{n} devices: {devices}")
    rhos = np.linspace(args.rho_min, args.rho_max, n).astype(np.float32)
    offsets = 1e-3 * np.arange(args.trajectories, dtype=np.float32)[:, None]
    start = np.broadcast_to(1.0 + offsets, (n, args.trajectories, 3)).astype(np.float32)
    program = jax.pmap(solve(args.steps, args.dt), axis_name=AXIS, devices=devices)
    costs = _demos.step_costs(program.lower(start, rhos).compile(), devices[0], args.steps,
                              "Runge-Kutta step")

    began = time.perf_counter()
    paths, low, high = (np.asarray(a) for a in program(start, rhos))
    wall = time.perf_counter() - began
    low, high = low[0], high[0]  # every device holds the same box
    spreads = np.abs(paths[:, -1] - paths[:, -1, :1]).max(axis=(1, 2))
    for rho, path, spread in zip(rhos, paths, spreads, strict=True):
        end = ", ".join(f"{v:.3f}" for v in path[-1, 0])
        print(f"rho = {rho:5.2f}: trajectory 0 ends at ({end}), the trajectories end "
              f"{spread:.3g} apart ({'chaotic' if spread > CHAOTIC else 'regular'})")
    box = ", ".join(f"{a:.2f}..{b:.2f}" for a, b in zip(low, high, strict=True))
    print(f"box around all trajectories (pmin/pmax over the devices): x, y, z in {box}")

    check = min(args.steps, 100)
    reference = host_path(start[-1], float(rhos[-1]), args.dt, check)
    error = float(np.abs(paths[-1, :check] - reference).max())
    print(f"first {check} steps of rho = {rhos[-1]:.1f} against the host's numpy run: largest "
          f"difference {error:.3g}")
    if error > 1e-3:
        raise SystemExit("the devices' integration differs from the host reference")
    plot(args.plot, paths, rhos, low, high)
    _common.summary(
        "lorenz_ode", platform=args.platform, devices=n, steps=args.steps,
        chaotic=int((spreads > CHAOTIC).sum()), host_error=error, z_max=float(high[2]),
        paths=_demos.digest(paths), **costs, wall_s=wall)


if __name__ == "__main__":
    main()
