"""Shardings over a 2x2 mesh of IPU Models: device_put with a NamedSharding, jit with in and out
shardings, with_sharding_constraint, and shard_map with a psum over one mesh axis."""

from __future__ import annotations

import sys

import _multi_device

# A 2x2 mesh: four devices, asked for before jax is imported (the count is fixed at start-up).
_multi_device.request_devices(sys.argv[1:], default=4)

import argparse  # noqa: E402

import _common  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402


def show_layout(name: str, array: jax.Array) -> None:
    """Which block of `array` lives on which device (several devices for a replicated block)."""
    print(f"{name}: shape {array.shape}, spec {array.sharding.spec}")
    try:
        jax.debug.visualize_array_sharding(array)
        return
    except ValueError as err:
        # jax draws the picture with the optional `rich` package; a table says the same.
        if "rich" not in str(err):
            raise
    blocks: dict[tuple[tuple[int, int], ...], list[int]] = {}
    for shard in array.addressable_shards:
        key = tuple(s.indices(dim)[:2] for s, dim in zip(shard.index, array.shape, strict=True))
        blocks.setdefault(key, []).append(shard.device.id)
    for key, ids in sorted(blocks.items()):
        where = " x ".join(f"[{a}:{b}]" for a, b in key)
        print(f"  block {where} on devices {sorted(ids)}")


def owners(array: jax.Array) -> np.ndarray:
    """Per element of a 2-D array, the lowest id of the devices holding it."""
    grid = np.full(array.shape, np.iinfo(np.int32).max, np.int32)
    for shard in array.addressable_shards:
        grid[shard.index] = np.minimum(grid[shard.index], shard.device.id)
    return grid


def plot_layouts(plot_dir: str, arrays: dict[str, jax.Array]) -> None:
    """One panel per array: each element coloured by the device holding it (the lowest id where
    a block is replicated), so a layout reads at a glance."""
    plt = _common.pyplot()
    fig, axes = plt.subplots(1, len(arrays), figsize=(3.2 * len(arrays), 3.4))
    for ax, (name, array) in zip(axes, arrays.items(), strict=True):
        grid = owners(array)
        ax.imshow(grid, cmap="tab10", vmin=0, vmax=9)
        for (r, c), device in np.ndenumerate(grid):
            ax.text(c, r, str(device), ha="center", va="center", fontsize=7)
        ax.set_title(f"{name}\n{array.sharding.spec}", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle("which device holds each element (2x2 mesh)")
    _common.save_figure(fig, plot_dir, "sharding_quickstart_layouts.png")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    _common.add_common_args(parser)
    _multi_device.add_devices_arg(parser, default=4)
    parser.add_argument("--size", type=int, default=8, help="side of the square matrices")
    args = parser.parse_args(argv)
    if args.devices != 4:
        parser.error("the mesh is 2x2: --devices must be 4")
    if args.size % 2:
        parser.error("--size must be even, to split over 2 devices per axis")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    _common.device_for(args.platform)
    devices = jax.devices(args.platform)[:4]
    # "data" splits rows (the batch), "model" splits columns (the features): the usual 2-D layout.
    mesh = Mesh(np.array(devices).reshape(2, 2), ("data", "model"))
    print(f"mesh {dict(mesh.shape)}:\n{mesh.device_ids}")
    rng = np.random.default_rng(args.seed)
    n = args.size
    x_host = rng.normal(size=(n, n)).astype(np.float32)
    w_host = rng.normal(size=(n, n)).astype(np.float32)
    want = np.tanh(x_host @ w_host)

    print("\n== device_put with a NamedSharding ==")
    x = jax.device_put(x_host, NamedSharding(mesh, P("data", "model")))
    w = jax.device_put(w_host, NamedSharding(mesh, P(None, "model")))
    show_layout("x, split both ways", x)
    show_layout("w, columns split, rows replicated", w)

    print("\n== jit with in and out shardings ==")
    # The partitioner inserts the collectives that the chosen layouts imply.
    layer = jax.jit(
        lambda a, b: jnp.tanh(a @ b),
        in_shardings=(NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P(None, "model"))),
        out_shardings=NamedSharding(mesh, P("data", "model")),
    )
    # A committed array must already have the sharding jit asks for (JAX refuses to move it
    # silently); a host array is placed by in_shardings.
    y = layer(x_host, w)
    show_layout("y = tanh(x @ w)", y)
    err_jit = float(np.max(np.abs(np.asarray(y) - want)))
    print(f"largest difference from NumPy: {err_jit:.2e}")

    print("\n== with_sharding_constraint ==")

    @jax.jit
    def constrained(a: jax.Array, b: jax.Array) -> jax.Array:
        h = a @ b
        # Ask for h replicated over "model": the next op needs whole rows on every device.
        h = lax.with_sharding_constraint(h, NamedSharding(mesh, P("data", None)))
        return jnp.tanh(h) / jnp.sum(jnp.abs(h), axis=1, keepdims=True)

    z = constrained(x, w)
    show_layout("z, rows normalised", z)
    h_host = x_host @ w_host
    want_z = np.tanh(h_host) / np.abs(h_host).sum(axis=1, keepdims=True)
    err_constraint = float(np.max(np.abs(np.asarray(z) - want_z)))
    print(f"largest difference from NumPy: {err_constraint:.2e}")

    print("\n== shard_map over the 2-D mesh ==")

    # Each device multiplies its block of x by its block of w's rows; the partial products of
    # one block row are summed over "model". Nested pmap's job, now one map over two axes.
    def block_matmul(xb: jax.Array, wb: jax.Array) -> jax.Array:
        return jnp.tanh(lax.psum(xb @ wb, "model"))

    mapped = jax.jit(
        jax.shard_map(
            block_matmul,
            mesh=mesh,
            in_specs=(P("data", "model"), P("model", None)),
            out_specs=P("data", None),
        )
    )
    w_rows = jax.device_put(w_host, NamedSharding(mesh, P("model", None)))
    s = mapped(x, w_rows)
    show_layout("w, rows split over model", w_rows)
    show_layout("shard_map result", s)
    err_shard_map = float(np.max(np.abs(np.asarray(s) - want)))
    print(f"largest difference from NumPy: {err_shard_map:.2e}")
    _common.model_view(mapped.lower(x, w_rows).compile(), devices[0], "shard_map block matmul")
    if args.plot:
        plot_layouts(args.plot, {"x": x, "w": w, "y = tanh(x @ w)": y, "z": z,
                                 "w rows over model": w_rows})

    _common.summary(
        "sharding_quickstart",
        platform=args.platform,
        devices=len(devices),
        err_jit=err_jit,
        err_constraint=err_constraint,
        err_shard_map=err_shard_map,
        checksum=float(np.asarray(y).sum() + np.asarray(z).sum() + np.asarray(s).sum()),
    )


if __name__ == "__main__":
    main()
