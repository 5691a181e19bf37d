"""A remote server's memory over sessions (not a test: how much it grows depends on the C
library's allocator and the machine). Starts `python -m jax_ipu serve` on 127.0.0.1, then runs
--sessions client processes one after another, each making 300 small calls and a 16 MiB
round trip, and prints the server's resident memory after each.
Run: python bench/remote_memory.py [--sessions 12] [--transport native|grpcio]."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

CLIENT = """
import jax, numpy as np
d = jax.devices("ipu")[0]
f = jax.jit(lambda a: a * 2 + 1)
x = jax.device_put(np.arange(8, dtype=np.float32), d)
for _ in range(300):
    np.asarray(f(x))
big = jax.device_put(np.ones(4 << 20, np.float32), d)
assert float(np.asarray(big)[-1]) == 1.0
"""


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=12)
    parser.add_argument("--transport", choices=("native", "grpcio"), default="native")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_IPU_", "POPLAR_"))}
    env.update(JAX_PLATFORMS="ipu,cpu", TF_CPP_MIN_LOG_LEVEL="3")
    server = subprocess.Popen([sys.executable, "-m", "jax_ipu", "serve", "--port", "0",
                               "--transport", args.transport], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline()
        address = "grpc://" + line.split("listening on ")[1].split()[0]
        print(f"server ({args.transport} transport) at start: {rss_mb(server.pid):.0f} MB")
        for i in range(args.sessions):
            subprocess.run([sys.executable, "-c", CLIENT], env={**env, "JAX_IPU_REMOTE": address},
                           check=True, timeout=300)
            time.sleep(0.5)  # the session's close, logged by the server
            print(f"after session {i + 1}: {rss_mb(server.pid):.0f} MB", flush=True)
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
