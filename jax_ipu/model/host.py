"""The host side of the chip: what a transfer over the host link and a call of a program cost.

Pure functions of a Target (figures in targets.py, H-1, H-3 and H-5); the runtime charges them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from jax_ipu.model.targets import CALL_HOST_SYNCS, HOST_STAGING_BYTES_PER_S, Target

TO_DEVICE = "to_device"
TO_HOST = "to_host"
DIRECTIONS = (TO_DEVICE, TO_HOST)


@dataclass(frozen=True)
class HostTransfer:
    """Cycles of one stream copy between host and IPU, in the target's clock."""

    direction: str
    nbytes: int
    setup_cycles: int  # the host handshakes that begin and end a stream copy, and its fixed part
    link_cycles: int  # the bytes over the host link in this direction
    staging_cycles: int = 0  # the host copying them between the user's array and the stream

    @property
    def total(self) -> int:
        return self.setup_cycles + self.link_cycles + self.staging_cycles


def host_link_bytes_per_s(target: Target, direction: str) -> float:
    """The host link's measured rate in one direction (H-1)."""
    if direction == TO_DEVICE:
        return target.host_to_device_bytes_per_s
    if direction == TO_HOST:
        return target.device_to_host_bytes_per_s
    raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")


def stream_copy_setup_cycles(target: Target) -> int:
    """Fixed cycles of one stream copy, whatever its size: a StreamCopyBegin and a
    StreamCopyEnd handshake with the host and the data phase's fixed part (H-3)."""
    return math.ceil((2 * target.host_sync_s + target.stream_copy_mid_s) * target.clock_hz)


def host_transfer(nbytes: int, target: Target, direction: str = TO_DEVICE) -> HostTransfer:
    """One stream copy of nbytes: set-up, bytes over the link, and the host's staging copy
    between the user's array and the stream buffer (H-5); nothing moves for 0 bytes."""
    rate = host_link_bytes_per_s(target, direction)
    if nbytes <= 0:
        return HostTransfer(direction, 0, 0, 0)
    link = math.ceil(nbytes / rate * target.clock_hz)
    return HostTransfer(direction, nbytes, stream_copy_setup_cycles(target), link,
                        staging_cycles(nbytes, target))


def staging_cycles(nbytes: int, target: Target) -> int:
    """The host copying nbytes between the user's buffer and the stream's (H-5), in cycles of
    the target's clock (host time, the same seconds on every chip)."""
    return math.ceil(nbytes / HOST_STAGING_BYTES_PER_S * target.clock_hz) if nbytes > 0 else 0


def host_transfer_cycles(nbytes: int, target: Target, direction: str = TO_DEVICE) -> int:
    """Total cycles of one stream copy of nbytes in `direction` (to_device unless given)."""
    return host_transfer(nbytes, target, direction).total


def call_overhead_cycles(target: Target) -> int:
    """Cycles the host adds to every call of a program: it starts the program and waits to
    hear that it has finished, two handshakes like those of a stream copy (H-3)."""
    return math.ceil(CALL_HOST_SYNCS * target.host_sync_s * target.clock_hz)
