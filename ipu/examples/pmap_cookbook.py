"""A walk through pmap on 8 IPUs, after the Cloud TPU preview's pmap cookbook: mapping a function
over the devices, random matrices made and multiplied where they live, collectives (psum, pmean,
pmax, all_gather), pmap composed with vmap and grad, a data-parallel training step, and ppermute:
a ring shift, then an all-reduce built by hand from ppermutes, next to psum.

The IPU Model says what the training step costs per step and on the IPU-Links, and what the
hand-made ring costs against psum's."""

from __future__ import annotations

import sys

import _multi_device

# Before jax is imported: the device count is fixed when a platform starts.
_multi_device.request_devices(sys.argv[1:], default=8)

import argparse  # noqa: E402
from functools import partial  # noqa: E402

import _common  # noqa: E402
import _demos  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

AXIS = "i"


def basics(devices: list[jax.Device], size: int, seed: int) -> float:
    """pmap maps over the leading axis, one entry per device; results stay on the devices."""
    n = len(devices)
    squares = jax.pmap(lambda x: x**2, devices=devices)(np.arange(n, dtype=np.float32))
    print(f"pmap(lambda x: x ** 2)(arange({n})) = {np.asarray(squares).tolist()}")
    print(f"  a {type(squares.sharding).__name__}: one entry on each of {n} devices")
    # Each device draws its own matrix from its own key and multiplies it there: nothing but the
    # keys goes to the devices, and nothing but the small means comes back.
    keys = jax.random.split(jax.random.key(seed), n)
    mats = jax.pmap(lambda k: jax.random.normal(k, (size, size)), devices=devices)(keys)
    means = jax.pmap(lambda m: jnp.mean(m @ m.T), devices=devices)(mats)
    means = np.asarray(means)
    print(f"{n} random {size}x{size} matrices, mean of M @ M.T on each device: "
          + ", ".join(f"{m:.4f}" for m in means))
    return float(means.sum())


def collectives(devices: list[jax.Device]) -> np.ndarray:
    """Collectives over the named axis: every device gets the reduction over all of them."""
    n = len(devices)
    x = np.arange(1, n + 1, dtype=np.float32)

    def per_device(v: jax.Array) -> dict[str, jax.Array]:
        return {"normalized": v / lax.psum(v, AXIS), "pmean": lax.pmean(v, AXIS),
                "pmax": lax.pmax(v, AXIS), "all_gather": lax.all_gather(v, AXIS)}

    out = jax.pmap(per_device, axis_name=AXIS, devices=devices)(x)
    for key in ("normalized", "pmean", "pmax", "all_gather"):
        value = np.asarray(out[key])
        shown = value[0] if key == "all_gather" else value
        print(f"  {key}: [{', '.join(f'{v:.4g}' for v in shown)}]"
              + (" (on device 0; every device holds all)" if key == "all_gather" else ""))
    return np.asarray(out["normalized"])


def composition(devices: list[jax.Device]) -> np.ndarray:
    """pmap of vmap: devices times a batch on each; a collective can name either axis."""
    n = len(devices)
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)

    def cell(v: jax.Array) -> jax.Array:
        return v - lax.pmean(lax.pmean(v, "batch"), AXIS)  # centred on the global mean

    out = np.asarray(jax.pmap(jax.vmap(cell, axis_name="batch"), axis_name=AXIS,
                              devices=devices)(x))
    print(f"  pmap(vmap(v - mean over both axes)): first row {out[0].tolist()}, "
          f"global mean now {out.mean():.1f}")
    return out


def loss(w: jax.Array, xs: jax.Array, ys: jax.Array) -> jax.Array:
    return jnp.mean((xs @ w - ys) ** 2)


def train_step(w: jax.Array, xs: jax.Array, ys: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One data-parallel step: each device's gradient of its shard, averaged over the links."""
    value, grad = jax.value_and_grad(loss)(w, xs, ys)
    grad = lax.pmean(grad, AXIS)
    return w - 0.1 * grad, lax.pmean(value, AXIS)


def data_parallel(devices: list[jax.Device], steps: int, seed: int) -> tuple[list[float], dict]:
    """Linear regression, each device on its shard of the batch, the same weights everywhere."""
    n = len(devices)
    rng = np.random.default_rng(seed)
    true_w = rng.standard_normal((16, 1)).astype(np.float32)
    xs = rng.standard_normal((n, 32, 16)).astype(np.float32)
    ys = xs @ true_w
    w = np.zeros((n, 16, 1), np.float32)  # replicated: one copy per device
    # Split on the leading axis, as pmap splits: the donated weights stay where they are.
    shard = NamedSharding(Mesh(np.array(devices), (AXIS,)), P(AXIS))
    w, xs_d, ys_d = (jax.device_put(a, shard) for a in (w, xs, ys))
    step = jax.pmap(train_step, axis_name=AXIS, devices=devices, donate_argnums=(0,))
    costs = _demos.step_costs(step.lower(w, xs_d, ys_d).compile(), devices[0], 1,
                              "data-parallel step")
    losses = []
    for _ in range(steps):
        w, value = step(w, xs_d, ys_d)
        losses.append(value)
    losses = np.asarray(jnp.stack(losses))[:, 0].tolist()
    error = float(np.abs(np.asarray(w)[0] - true_w).max())
    print(f"  loss {losses[0]:.4f} -> {losses[-1]:.4f} in {steps} steps; weights within "
          f"{error:.2g} of the truth")
    return losses, costs


def ring_all_reduce(v: jax.Array, n: int) -> jax.Array:
    """psum by hand: n-1 times, pass what came from the left on to the right and add it."""
    right = [(k, (k + 1) % n) for k in range(n)]
    total, passing = v, v
    for _ in range(n - 1):
        passing = lax.ppermute(passing, AXIS, right)
        total = total + passing
    return total


def ppermute_ring(devices: list[jax.Device], size: int) -> tuple[bool, dict, dict]:
    """ppermute sends each device's value to another: a shift round the ring, then a ring
    all-reduce made of n-1 shifts, against psum (which the model plans as it would)."""
    n = len(devices)
    right = [(k, (k + 1) % n) for k in range(n)]
    shifted = jax.pmap(lambda v: lax.ppermute(v, AXIS, right), axis_name=AXIS,
                       devices=devices)(np.arange(n, dtype=np.float32))
    print(f"  shift right round the ring: {np.asarray(shifted).tolist()}")
    x = np.arange(n * size, dtype=np.float32).reshape(n, size) % 7
    ring = jax.pmap(partial(ring_all_reduce, n=n), axis_name=AXIS, devices=devices)
    psum = jax.pmap(lambda v: lax.psum(v, AXIS), axis_name=AXIS, devices=devices)
    same = bool(np.array_equal(np.asarray(ring(x)), np.asarray(psum(x))))
    print(f"  ring all-reduce of float32[{size}] by {n - 1} ppermutes equals psum: {same}")
    ring_costs = _demos.step_costs(ring.lower(x).compile(), devices[0], 1, "ring of ppermutes")
    psum_costs = _demos.step_costs(psum.lower(x).compile(), devices[0], 1, "psum")
    return same, ring_costs, psum_costs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    _common.add_common_args(parser)
    _multi_device.add_devices_arg(parser, default=8)
    parser.add_argument("--size", type=int, default=256,
                        help="side of the random matrices, and length of the all-reduced vector")
    parser.add_argument("--steps", type=int, default=50, help="data-parallel training steps")
    args = parser.parse_args(argv)
    if args.size < 1 or args.steps < 1:
        parser.error("--size and --steps must be >= 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    devices = _demos.take_devices(args.platform, args.devices)
    print(f"{len(devices)} devices: {devices}")
    print("\n== basics ==")
    total = basics(devices, args.size, args.seed)
    print("\n== collectives ==")
    normalized = collectives(devices)
    print("\n== pmap of vmap ==")
    centred = composition(devices)
    print("\n== a data-parallel training step (grad, then pmean of the gradients) ==")
    losses, costs = data_parallel(devices, args.steps, args.seed)
    print("\n== ppermute ==")
    same, ring, psum = ppermute_ring(devices, args.size)
    _common.plot_curves(args.plot, "pmap_cookbook_loss.png", "data-parallel linear regression",
                        "step", {"loss": (range(len(losses)), losses)}, logy=True)
    _common.summary(
        "pmap_cookbook", platform=args.platform, devices=len(devices), matmul_means=total,
        normalized=_demos.digest(normalized, centred), final_loss=losses[-1],
        ring_equals_psum=same, **costs,
        **({"ring_link_us": ring["link_us"], "psum_link_us": psum["link_us"]} if ring else {}))


if __name__ == "__main__":
    main()
