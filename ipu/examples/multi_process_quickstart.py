"""Several processes, each with its own IPU Models, joined by jax.distributed on this machine:
global devices, a psum across processes, and data-parallel training on a global sharded batch.

Run it as is and it starts `--processes` copies of itself on 127.0.0.1 (as a cluster launcher
would on several hosts); each copy is one process of the run."""

from __future__ import annotations

import sys

import _multi_device

# Before jax is imported: the device count is fixed when a platform starts.
_multi_device.request_devices(sys.argv[1:], default=2)

import argparse  # noqa: E402
import gc  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402

import _common  # noqa: E402
import jax  # noqa: E402
import jax.extend  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

TRUE_WEIGHTS = np.array([2.0, -3.0, 0.5, 1.0], np.float32)


def launch(argv: list[str], processes: int) -> int:
    """Start one copy of this script per process on loopback; relay their output; 0 if all ok."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    children = [
        subprocess.Popen(
            [sys.executable, __file__, *argv, "--process-id", str(k),
             "--coordinator", f"127.0.0.1:{port}"],
            stdout=subprocess.PIPE, text=True,  # stderr (jaxlib's logs) passes straight through
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "3")},
        )
        for k in range(processes)
    ]
    lock = threading.Lock()

    def relay(k: int, child: subprocess.Popen) -> None:
        for line in child.stdout:
            with lock:
                print(f"[process {k}] {line}" if k else line, end="", flush=True)

    relays = [threading.Thread(target=relay, args=(k, c)) for k, c in enumerate(children)]
    for thread in relays:
        thread.start()
    codes = [child.wait() for child in children]
    for thread in relays:
        thread.join()
    failed = [k for k, code in enumerate(codes) if code]
    if failed:
        print(f"processes {failed} failed (exit codes {[codes[k] for k in failed]})")
    return 1 if failed else 0


def worker(args: argparse.Namespace) -> None:
    jax.distributed.initialize(args.coordinator, num_processes=args.processes,
                               process_id=args.process_id)
    me = jax.process_index(args.platform)
    devices = jax.devices(args.platform)
    mine = jax.local_devices(backend=args.platform)
    leader = me == 0  # prints what every process sees alike
    if leader:
        print(f"{len(devices)} devices in {jax.process_count(args.platform)} processes: "
              + ", ".join(f"{d} on process {d.process_index}" for d in devices))
    print(f"process {me} owns {mine}")

    # A psum across processes: every device of every process adds its process number + 1.
    ones = np.full(len(mine), me + 1.0, np.float32)
    total = jax.pmap(lambda v: lax.psum(v, "i"), axis_name="i", backend=args.platform)(ones)
    print(f"process {me}: psum over all devices of (process index + 1) = "
          f"{np.asarray(total).tolist()}")

    # Data parallelism: each process reads only its part of the batch (here: generates it),
    # the global array spans every device of every process, and XLA averages the gradient.
    mesh = Mesh(np.array(devices), ("batch",))
    rows = NamedSharding(mesh, P("batch"))
    replicated = NamedSharding(mesh, P())
    rng = np.random.default_rng(args.seed + me)
    xs = rng.normal(size=(args.rows * len(mine), 4)).astype(np.float32)
    ys = xs @ TRUE_WEIGHTS + 0.1 * rng.normal(size=len(xs)).astype(np.float32)
    xs = jax.make_array_from_process_local_data(rows, xs)
    ys = jax.make_array_from_process_local_data(rows, ys)

    def loss_fn(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.mean((x @ w - y) ** 2)

    @jax.jit
    def step(w: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        loss, grad = jax.value_and_grad(loss_fn)(w, x, y)
        return w - args.learning_rate * grad, loss

    w = jax.device_put(jnp.zeros(4, jnp.float32), replicated)
    compiled = step.lower(w, xs, ys).compile()
    losses = []
    for _ in range(args.steps):
        w, loss = compiled(w, xs, ys)
        losses.append(float(loss))
    weights = np.asarray(w)
    if leader:
        print(f"global batch {xs.shape[0]} rows; loss {losses[0]:.4f} -> {losses[-1]:.4f} "
              f"after {args.steps} steps")
        print(f"weights {np.round(weights, 3).tolist()} (true {TRUE_WEIGHTS.tolist()})")
        _common.model_view(compiled, mine[0], "the data-parallel step")
        _common.plot_curves(args.plot, "multi_process_loss.png", "Data-parallel regression",
                            "step", {"loss": (range(len(losses)), losses)}, ylabel="MSE",
                            logy=True)
    # Every process ends with the same weights: gather them all and compare.
    gathered = multihost_utils.process_allgather(weights)
    spread = float(np.max(np.abs(gathered - gathered[0])))
    if leader:
        _common.summary("multi_process_quickstart", platform=args.platform,
                        processes=args.processes, devices=len(devices),
                        psum=float(np.asarray(total)[0]), final_loss=losses[-1],
                        weight_error=float(np.max(np.abs(weights - TRUE_WEIGHTS))),
                        process_spread=spread)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    _common.add_common_args(parser)
    _multi_device.add_devices_arg(parser, default=2)
    parser.add_argument("--processes", type=int, default=2, help="processes in the run")
    parser.add_argument("--rows", type=int, default=256, help="training rows per device")
    parser.add_argument("--steps", type=int, default=50, help="gradient steps")
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--process-id", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.processes < 1:
        parser.error(f"--processes must be at least 1, not {args.processes}")
    if args.process_id is None:
        raise SystemExit(launch(argv, args.processes))
    worker(args)
    # Close in order, once worker's arrays are gone: the cpu and ipu clients watch the other
    # processes through the coordination service, so they go first. Left to exit, the service
    # (in process 0) stops while they still watch, and each logs that as a gRPC error block.
    gc.collect()
    jax.clear_caches()
    jax.extend.backend.clear_backends()
    gc.collect()
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
