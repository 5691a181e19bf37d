"""TessellateIPU's device helpers: IpuDevice (any jax device of the ipu platform), its target
types, and is_ipu_model (always true here: the IPU Model is the only ipu device)."""

from __future__ import annotations

import enum
from typing import Any


class IpuTargetType(str, enum.Enum):
    """What an ipu device is; equal to the device's `target_type` string."""

    IPU = "IPU"
    IPU_MODEL = "IPU_MODEL"


class _IpuDeviceType(type):
    def __instancecheck__(cls, device: Any) -> bool:
        return getattr(device, "platform", None) == "ipu"


class IpuDevice(metaclass=_IpuDeviceType):
    """isinstance(d, IpuDevice) for a jax device of the ipu platform (jax's own device objects:
    attributes num_tiles, version, tile_clock_frequency, num_worker_contexts, target_type)."""


def is_ipu_model(device: Any) -> bool:
    """Whether `device` is an IPU Model (an emulated IPU)."""
    return isinstance(device, IpuDevice) and \
        getattr(device, "target_type", None) == IpuTargetType.IPU_MODEL
