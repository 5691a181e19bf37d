"""Command line: `python -m jax_ipu info` (devices, chips, flags), `report DIR` (summaries) and
`serve` (this process's IPU Model devices, served to remote jax clients).

`report` prints the text summary of report folders written under POPLAR_ENGINE_OPTIONS."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from jax_ipu import config
from jax_ipu.errors import IpuError


def _size(nbytes: float) -> str:
    for div, unit in ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")):
        if nbytes >= div:
            return f"{nbytes / div:,.1f} {unit}"
    return f"{nbytes:,.0f} B"


def info() -> int:
    """Print the ipu devices, their chips and memory, every flag and the report options."""
    import jax

    from jax_ipu.remote.client import is_remote
    from jax_ipu.runtime.client import find_device

    try:
        devices = jax.devices("ipu")
    except RuntimeError as exc:  # jax wraps what stopped the backend (a bad flag, say)
        print(f"error: the ipu backend did not start: {exc}", file=sys.stderr)
        return 2
    print(f"jax {jax.__version__}; {len(devices)} ipu device(s)")
    if devices and is_remote(devices[0].client):
        print(f"remote: the IPU Model of the jax-ipu server at {config.value('jax_ipu_remote')}"
              " (its flags are the server's)")
        for d in devices:
            print(f"  {d}: {d.device_kind}, {d.num_tiles:,} tiles, "
                  f"{_size(d.tile_memory_bytes)} per tile, clock {d.clock_hz / 1e9:.2f} GHz")
    else:
        for d in devices:
            t = find_device(d.id).target
            print(f"  {d}: {d.device_kind}, {t.num_tiles:,} of {t.full_chip_tiles:,} "
                  f"tiles, {_size(t.bytes_per_tile)} per tile, {_size(t.total_bytes)} in all, "
                  f"clock {t.clock_hz / 1e9:.2f} GHz")
    print("\nFlags (value, source, environment variable):")
    width = max(len(f.name) for f in config.FLAGS)
    for flag in config.FLAGS:
        print(f"  {flag.name:<{width}}  {config.value(flag.name)!r:<10} "
              f"{config.source(flag.name):<8} {flag.env_var}")
    print("\nReport options:")
    for var, read in ((config.ENGINE_OPTIONS_VAR, config.engine_options),
                      (config.PVTI_OPTIONS_VAR, config.pvti_options)):
        print(f"  {var}: {json.dumps(read()) if read() else '(not set)'}")
    return 0


def _load(path: Path, spec: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """A profile read back and checked against its schema; None when the file is absent."""
    from jax_ipu.profile.schema import check

    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    problems = check(doc, spec)
    if isinstance(doc, dict) and doc.get("kind") != kind:
        problems.insert(0, f"kind is {doc.get('kind')!r}, not {kind!r}")
    if problems:
        raise ValueError(f"{path} does not match the jax-ipu report schema: "
                         + "; ".join(problems[:5]))
    return doc


def report(directory: Path) -> int:
    """Print the summary of one report folder, or of every program folder inside `directory`."""
    from jax_ipu.profile import execution as execution_profile
    from jax_ipu.profile import graph as graph_profile
    from jax_ipu.profile import schema
    from jax_ipu.profile.recorder import EXECUTION_FILE, GRAPH_FILE
    from jax_ipu.profile.summary import render

    candidates = [directory, *sorted(p for p in directory.iterdir() if p.is_dir())] \
        if directory.is_dir() else []
    folders = [p for p in candidates
               if (p / GRAPH_FILE).exists() or (p / EXECUTION_FILE).exists()]
    if not folders:
        print(f"No jax-ipu report in {directory} (expected {GRAPH_FILE} or {EXECUTION_FILE}; "
              "write reports with POPLAR_ENGINE_OPTIONS='{\"autoReport.all\":\"true\"}').",
              file=sys.stderr)
        return 1
    for i, folder in enumerate(folders):
        try:
            graph = _load(folder / GRAPH_FILE, schema.GRAPH, graph_profile.KIND)
            execution = _load(folder / EXECUTION_FILE, schema.EXECUTION, execution_profile.KIND)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 1
        print(("\n" if i else "") + f"== {folder} ==")
        print(render(graph, execution), end="")
    return 0


def serve(host: str, port: int, devices: int | None, token_file: Path | None,
          transport: str = "auto") -> int:
    """Serve this process's IPU Model devices over the IFRT proxy protocol until SIGINT/SIGTERM."""
    try:
        from jax_ipu.remote.server import serve as run
    except ImportError as exc:
        print(f"error: the server needs the remote extra ({exc.name} is missing): "
              "pip install 'jax-ipu[remote]'", file=sys.stderr)
        return 2
    token = None
    if token_file is not None:
        token = token_file.read_text().strip()
        if not token:
            print(f"error: the token file {token_file} is empty", file=sys.stderr)
            return 2
    import jax

    # The server's devices are local IPU Models, whatever this shell points clients at.
    jax.config.update("jax_ipu_remote", "")
    if devices is not None:
        jax.config.update("jax_ipu_device_count", devices)
    return run(host, port, token, transport=transport)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jax_ipu", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info", help="devices, chip versions, tiles, memory and every flag")
    show = commands.add_parser("report", help="print the text summary of a report folder")
    show.add_argument("directory", type=Path)
    server = commands.add_parser(
        "serve", help="serve IPU Model devices to jax clients (JAX_IPU_REMOTE=grpc://host:port)")
    server.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1; another needs --token-file)")
    server.add_argument("--port", type=int, default=8470, help="port (0: any free one)")
    server.add_argument("--devices", type=int, default=None,
                        help="IPU Model devices to serve (default: jax_ipu_device_count)")
    server.add_argument("--token-file", type=Path, default=None,
                        help="file holding the token clients must give (JAX_IPU_REMOTE_TOKEN)")
    server.add_argument("--transport", choices=("auto", "native", "grpcio"), default="auto",
                        help="gRPC's C++ core (native: built on first use, needs libgrpc++-dev)"
                        " or grpcio's Python server; auto: native when it builds")
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            return serve(args.host, args.port, args.devices, args.token_file, args.transport)
        return info() if args.command == "info" else report(args.directory)
    except IpuError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
