"""The remote IPU Model against the local one: a server on 127.0.0.1 and the same workloads in a
local process and in a remote client, in alternating rounds (not a test: speed goes here).

- a call plus read-back of float32[8] (`np.asarray(f(x))`, f = a*2+1): median;
- the same with a host callback (an identity pure_callback), which a server calls back: median;
- a 64 MiB device_put (until ready) and its read-back: MB/s each way, median of the rounds;
- a training step of the MNIST example (784-512-512-10 MLP, batch 128, SGD with momentum,
  donated state, each batch put from the host as the example does): time per step, and the
  CPU per step of the local process against the server's and the remote client's.

Each round runs one fresh worker process per side; the figures are medians over the rounds,
and the ratios are of those medians. The server's CPU time per operation is printed too (read
from /proc by the remote worker): on a shared machine it varies far less than wall time.

With --split-cores the server (and the local worker, for the same compute) runs on half of the
machine's cores and the remote client on the other half, as if the client were another host;
without it, client and server share every core, so the client's own work (jaxlib's transfer
threads) is taken from the step's compute.
With --shared-dir the remote client puts host buffers of 1 MiB or more as files in a private
directory under /dev/shm (JAX_IPU_REMOTE_SHARED_DIR), which the server maps.
Run: python bench/remote.py [--rounds 3] [--transport native|grpcio] [--split-cores]
[--shared-dir [PARENT]]."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20
SERVER_PID_VAR = "BENCH_REMOTE_SERVER_PID"  # tells a remote worker whose CPU time to read


def worker(calls: int, steps: int) -> dict[str, float]:
    """The workloads on platform ipu (local or remote, by the environment); seconds."""
    sys.path.insert(0, str(ROOT / "ipu" / "examples"))
    from functools import partial

    import jax
    import jax.numpy as jnp
    import numpy as np
    from mnist_classifier import init_params, sgd_step

    device = jax.devices("ipu")[0]
    out: dict[str, float] = {}
    server = os.environ.get(SERVER_PID_VAR)

    def server_cpu() -> float:
        """The server's CPU seconds so far (user + system; 0 on a local run): a figure the
        machine's other load changes far less than wall time."""
        if not server:
            return 0.0
        with open(f"/proc/{server}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    f = jax.jit(lambda a: a * 2 + 1)
    x = jax.device_put(np.arange(8, dtype=np.float32), device)
    times = []
    for i in range(calls + calls // 10):
        if i == calls // 10:  # after a warm-up
            cpu = server_cpu()
        start = time.perf_counter()
        np.asarray(f(x))
        if i >= calls // 10:
            times.append(time.perf_counter() - start)
    out["call_read_s"] = statistics.median(times)
    out["call_read_server_cpu_s"] = (server_cpu() - cpu) / calls

    # a host callback's round trip: locally a call into this process, remotely the server's
    # call back to this client (a poll answered, the result returned)
    echo = jax.jit(lambda a: jax.pure_callback(lambda v: v, a, a))
    times = []
    for i in range(calls // 5 + calls // 50):
        start = time.perf_counter()
        np.asarray(echo(x))
        if i >= calls // 50:
            times.append(time.perf_counter() - start)
    out["callback_s"] = statistics.median(times)

    host = np.random.default_rng(0).standard_normal(64 * MIB // 4).astype(np.float32)
    puts, reads = [], []
    cpu = server_cpu()
    for _ in range(5):
        start = time.perf_counter()
        y = jax.device_put(host, device).block_until_ready()
        puts.append(time.perf_counter() - start)
        start = time.perf_counter()
        back = np.asarray(y)
        reads.append(time.perf_counter() - start)
        assert back[-1] == host[-1]
        y.delete()
    out["put_64mib_s"], out["read_64mib_s"] = statistics.median(puts), statistics.median(reads)
    out["put_read_64mib_server_cpu_s"] = (server_cpu() - cpu) / 5

    rng = np.random.default_rng(0)
    with jax.default_device(jax.devices("cpu")[0]):
        params = init_params(jax.random.key(0), [784, 512, 512, 10])
        velocity = jax.tree.map(jnp.zeros_like, params)
    params, velocity = jax.device_put((params, velocity), device)
    step = jax.jit(partial(sgd_step, lr=0.05, momentum=0.9), donate_argnums=(0, 1))
    batches = min(steps, 50)  # distinct batches, reused in turn
    images = rng.random((batches, 128, 784), dtype=np.float32)
    labels = rng.integers(0, 10, (batches, 128)).astype(np.int32)
    for phase in ("warm-up", "timed"):
        start, cpu, own = time.perf_counter(), server_cpu(), time.process_time()
        losses = []
        for i in range(steps if phase == "timed" else 3):
            batch = jax.device_put((images[i % batches], labels[i % batches]), device)
            params, velocity, loss = step(params, velocity, *batch)
            losses.append(loss)
        np.asarray(jnp.stack(losses))
    out["mnist_step_s"] = (time.perf_counter() - start) / steps
    out["mnist_step_server_cpu_s"] = (server_cpu() - cpu) / steps
    # this process's CPU: locally the whole step (dispatch and compute), remotely the client's
    out["mnist_step_own_cpu_s"] = (time.process_time() - own) / steps
    return out


def _pinned(cores: set[int] | None) -> Any:
    """A preexec_fn that runs a child on `cores` (set before exec, so that XLA sizes its thread
    pools to them), or None."""
    return None if cores is None else lambda: os.sched_setaffinity(0, cores)


def _run_worker(env: dict[str, str], calls: int, steps: int, cores: set[int] | None
                ) -> dict[str, float]:
    proc = subprocess.run([sys.executable, __file__, "--worker", "--calls", str(calls),
                           "--steps", str(steps)], env=env, capture_output=True, text=True,
                          timeout=900, preexec_fn=_pinned(cores))
    if proc.returncode != 0:
        raise SystemExit(f"worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--transport", choices=("native", "grpcio"), default="native",
                        help="the server's transport (python -m jax_ipu serve --transport)")
    parser.add_argument("--split-cores", action="store_true",
                        help="server and local worker on half the cores, the remote client on "
                             "the other half (as if it were another host)")
    parser.add_argument("--shared-dir", nargs="?", const="/dev/shm", default="",
                        help="the remote client's JAX_IPU_REMOTE_SHARED_DIR (default /dev/shm): "
                             "large host buffers as files, for a server on this host")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.calls, args.steps)))
        return

    server_cores = client_cores = None
    if args.split_cores:
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2:
            raise SystemExit("--split-cores needs at least 2 cores")
        client_cores, server_cores = set(cores[:len(cores) // 2]), set(cores[len(cores) // 2:])
    base = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_IPU_", "POPLAR_"))}
    base.update(JAX_PLATFORMS="ipu,cpu", TF_CPP_MIN_LOG_LEVEL="3")
    server = subprocess.Popen([sys.executable, "-m", "jax_ipu", "serve", "--port", "0",
                               "--transport", args.transport],
                              env=base, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, preexec_fn=_pinned(server_cores))
    try:
        line = server.stdout.readline()
        address = "grpc://" + line.split("listening on ")[1].split()[0]
        remote_env = {**base, "JAX_IPU_REMOTE": address, SERVER_PID_VAR: str(server.pid),
                      "JAX_IPU_REMOTE_SHARED_DIR": args.shared_dir}
        results: dict[str, list[dict[str, float]]] = {"local": [], "remote": []}
        loads = [_load()]
        for _ in range(args.rounds):
            results["local"].append(_run_worker(base, args.calls, args.steps, server_cores))
            results["remote"].append(_run_worker(remote_env, args.calls, args.steps,
                                                 client_cores))
            loads.append(_load())
    finally:
        server.terminate()
        server.wait(30)

    def med(side: str, key: str) -> float:
        return statistics.median(r[key] for r in results[side])

    placement = (f"server and local worker on cores {sorted(server_cores)}, remote client on "
                 f"{sorted(client_cores)}" if server_cores else "client and server share the cores")
    if args.shared_dir:
        placement += f"; host buffers of 1 MiB or more as files under {args.shared_dir}"
    print(f"remote IPU Model over loopback ({args.transport} transport), {args.rounds} rounds "
          f"(load average 1/5/15 min during the run: {'; '.join(loads)}; {os.cpu_count()} cores; "
          f"{placement})")
    rows: list[tuple[str, Any, Any, str]] = [
        ("call + read-back of float32[8]", med("local", "call_read_s") * 1e3,
         med("remote", "call_read_s") * 1e3, "ms (target: remote <= 1 ms)"),
        ("call with a host callback", med("local", "callback_s") * 1e3,
         med("remote", "callback_s") * 1e3, "ms (no target)"),
        ("64 MiB device_put", 64 * MIB / med("local", "put_64mib_s") / 1e6,
         64 * MIB / med("remote", "put_64mib_s") / 1e6, "MB/s (target: remote >= 500)"),
        ("64 MiB read-back", 64 * MIB / med("local", "read_64mib_s") / 1e6,
         64 * MIB / med("remote", "read_64mib_s") / 1e6, "MB/s (target: remote >= 500)"),
        ("MNIST training step", med("local", "mnist_step_s") * 1e3,
         med("remote", "mnist_step_s") * 1e3, "ms (target: remote <= 1.2x local)"),
    ]
    print(f"{'':34}{'local':>12}{'remote':>12}{'remote/local':>14}")
    for name, local, remote, unit in rows:
        print(f"{name:34}{local:12.3f}{remote:12.3f}{remote / local:14.2f}  {unit}")
    print("server CPU (user + system) per operation, remote runs: "
          f"{med('remote', 'call_read_server_cpu_s') * 1e3:.3f} ms per call + read-back; "
          f"{med('remote', 'put_read_64mib_server_cpu_s') * 1e3:.0f} ms per 64 MiB put + "
          f"read-back; {med('remote', 'mnist_step_server_cpu_s') * 1e3:.2f} ms per MNIST step")
    local_cpu = med("local", "mnist_step_own_cpu_s")
    server_cpu, client_cpu = (med("remote", "mnist_step_server_cpu_s"),
                              med("remote", "mnist_step_own_cpu_s"))
    # With the cores shared the step keeps them all busy on both sides, so its time follows the
    # CPU of both remote processes together; with the client on cores of its own, the server's.
    together = (server_cpu + client_cpu) / local_cpu
    print(f"CPU per MNIST step: local process {local_cpu * 1e3:.2f} ms; remote server "
          f"{server_cpu * 1e3:.2f} + client {client_cpu * 1e3:.2f} ms; "
          + (f"server alone {server_cpu / local_cpu:.2f}x local" if server_cores else
             f"together {together:.2f}x local, of which the client alone "
             f"{client_cpu / local_cpu:.2f}x"))


if __name__ == "__main__":
    main()
