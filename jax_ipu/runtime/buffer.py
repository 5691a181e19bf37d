"""Arrays on an IPU Model device: a CPU array of jaxlib's private client plus PJRT metadata.

Creating one charges the device's memory stats; deleting, donating or dropping it gives back."""

from __future__ import annotations

from typing import Any

import numpy as np

from jax_ipu.runtime.device import IpuDevice


class IpuBuffer:
    """One device array. The attributes read by the PJRT table are plain and fixed."""

    __slots__ = ("array", "device", "dtype", "dims", "element_type", "nbytes", "deleted")

    def __init__(self, array: Any, device: IpuDevice, dtype: np.dtype, dims: tuple[int, ...],
                 nbytes: int, element_type: int) -> None:
        self.array = array
        self.device = device
        self.dtype = dtype
        self.dims = dims
        self.element_type = element_type
        self.nbytes = nbytes
        self.deleted = False
        device.stats.alloc(nbytes)

    def delete(self) -> None:
        """Free the array (explicit delete or donation); later reads raise."""
        if not self.deleted:
            self.deleted = True
            self.array = None
            self.device.stats.free(self.nbytes)

    def __del__(self) -> None:
        if not self.deleted:
            self.device.stats.free(self.nbytes)

    def to_numpy(self) -> np.ndarray:
        if self.deleted:
            raise RuntimeError("Array has been deleted (it was donated or deleted).")
        return np.asarray(self.array)

    def __repr__(self) -> str:
        state = "deleted" if self.deleted else self.dtype.name
        return f"IpuBuffer({state}{list(self.dims)}, device={self.device.id})"
