"""Fuzz serialized ipu executables (what jax's cache stores) as an attacker without the key would.

python bench/fuzz_entries.py [--count 2000]: mutates one program's blob (flipped bits, bytes set,
cuts, another program's code spliced in), re-seals each as anyone can (unkeyed SHA-256) or leaves
the old seal, and loads it. Prints how many loaded, ran and gave wrong numbers (all must be 0).
--with-key re-seals with this user's key instead: what the harness finds when a seal holds."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import random
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jax_ipu import sealing
from jax_ipu.runtime import client as runtime_client
from jax_ipu.runtime import codec, serialized

X = np.linspace(0.5, 1.5, 8, dtype=np.float32)

# Run one candidate that loaded, in a child (it may crash): exit 0 right numbers, 3 wrong.
CHILD = """
    import sys
    import jax, jax.numpy as jnp, numpy as np
    from jax.experimental import serialize_executable
    from jax_ipu.runtime import client
    x = jax.device_put(np.linspace(0.5, 1.5, 8, dtype=np.float32), jax.devices("ipu")[0])
    compiled = jax.jit(lambda a: jnp.sin(a) * 2 + a).lower(x).compile()
    crafted = open(sys.argv[1], "rb").read()
    client.IpuClient.serialize = lambda self, exe: crafted
    payload, i, o = serialize_executable.serialize(compiled)
    loaded = serialize_executable.deserialize_and_load(payload, i, o, backend="ipu")
    got = np.asarray(loaded(x))
    sys.exit(0 if np.allclose(got, np.sin(np.asarray(x)) * 2 + np.asarray(x)) else 3)
"""


def blob_of(fn) -> serialized.Blob:
    ipu = jax.devices("ipu")[0]
    compiled = jax.jit(fn).lower(jax.device_put(X, ipu)).compile()
    exe = runtime_client.find_executable(compiled.runtime_executable().fingerprint.decode())
    client = runtime_client.live_clients()[0]
    return serialized.loads(client.serialize(exe), client.build)


def mutate(data: bytes, head: int, other: bytes, rng: random.Random, with_key: bool) -> bytes:
    """One change to `data` (its first `head` bytes are the header and seal), then re-sealed
    with an unkeyed SHA-256 three times in four (with the user's key: always)."""
    body = bytearray(data[head:])
    kind = rng.randrange(4)
    if kind == 0:
        for _ in range(rng.randint(1, 8)):
            body[rng.randrange(len(body))] ^= 1 << rng.randrange(8)
    elif kind == 1:
        at = rng.randrange(len(body))
        body[at:at + 4] = rng.randbytes(4)
    elif kind == 2:
        del body[rng.randrange(len(body)):]
    else:
        body = bytearray(other)
    prefix = data[:head - sealing.SEAL_BYTES]
    if with_key:
        return prefix + sealing.seal(prefix + bytes(body)) + bytes(body)
    mac = hashlib.sha256(prefix + bytes(body)).digest() if rng.random() < 0.75 \
        else data[head - sealing.SEAL_BYTES:head]
    return prefix + mac + bytes(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--with-key", action="store_true")
    args = parser.parse_args()
    blob = blob_of(lambda a: jnp.sin(a) * 2 + a)
    other = blob_of(lambda a: jnp.maximum(a, 42.0))
    data = serialized.dumps(blob)
    body_size = len(codec.dumps(serialized.Blob, blob))
    head = len(data) - body_size
    swapped = codec.dumps(serialized.Blob,
                          dataclasses.replace(blob, cpu_executable=other.cpu_executable))
    client = runtime_client.live_clients()[0]
    rng = random.Random(29)
    loaded = ran = wrong = 0
    refusals: dict[str, int] = {}
    for _ in range(args.count):
        candidate = mutate(data, head, swapped, rng, args.with_key)
        try:
            client.deserialize(candidate)
        except Exception as e:  # noqa: BLE001 - every refusal is counted, by its words
            reason = f"{type(e).__name__}: {str(e).split(':')[0][:60]}"
            refusals[reason] = refusals.get(reason, 0) + 1
            continue
        loaded += 1
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "candidate"
            path.write_bytes(candidate)
            done = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), str(path)],
                                  capture_output=True, timeout=300, check=False)
        ran += 1
        wrong += done.returncode != 0
    print(f"{args.count} mutated entries: {loaded} loaded, {ran} executed, {wrong} crashed or "
          "gave wrong numbers")
    for reason, n in sorted(refusals.items(), key=lambda item: -item[1]):
        print(f"  refused {n:5d}: {reason}")


if __name__ == "__main__":
    main()
