"""What the multi-device examples share: `--devices N`, turned into environment variables before jax
is imported, since both the ipu plugin and XLA:CPU fix their device count when they start."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence


def add_devices_arg(parser: argparse.ArgumentParser, default: int) -> None:
    """The `--devices` option, so that it shows in --help; request_devices has already read it."""
    parser.add_argument(
        "--devices",
        type=int,
        default=default,
        help=f"IPU Models (or CPU devices with --platform cpu) to run on; default {default}",
    )


def request_devices(argv: Sequence[str], default: int) -> int:
    """Read --devices and --platform from `argv` and ask that platform for that many devices.

    Must run before `import jax`: JAX_IPU_DEVICE_COUNT and XLA_FLAGS are read once, at start-up."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--devices", type=int, default=default)
    pre.add_argument("--platform", default="ipu")
    known, _ = pre.parse_known_args(argv)
    count = known.devices
    if count < 1:
        raise SystemExit(f"--devices must be at least 1, not {count}")
    os.environ["JAX_IPU_DEVICE_COUNT"] = str(count)
    if known.platform == "cpu":
        # Appended, so flags the user already set in XLA_FLAGS still apply.
        flag = f"--xla_force_host_platform_device_count={count}"
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
    return count
