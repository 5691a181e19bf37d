"""TessellateIPU's IPU dtypes (IpuType) and their numpy and C++ names, on jax_ipu.tile's table.

The C++ names are jax_ipu.tile's (codegen.CXX_TYPES): what vertex templates are filled with."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from jax_ipu.tile import codegen


class IpuType(enum.IntEnum):
    """The element types a vertex field can have (Poplar's)."""

    BOOL = 0
    CHAR = 1
    UNSIGNED_CHAR = 2
    SHORT = 3
    UNSIGNED_SHORT = 4
    INT = 5
    UNSIGNED_INT = 6
    HALF = 7
    FLOAT = 8


_NUMPY = {IpuType.BOOL: np.bool_, IpuType.CHAR: np.int8, IpuType.UNSIGNED_CHAR: np.uint8,
          IpuType.SHORT: np.int16, IpuType.UNSIGNED_SHORT: np.uint16, IpuType.INT: np.int32,
          IpuType.UNSIGNED_INT: np.uint32, IpuType.HALF: np.float16, IpuType.FLOAT: np.float32}
_IPU = {np.dtype(d): t for t, d in _NUMPY.items()}


def from_numpy_dtype_to_ipu_type(v: Any) -> IpuType:
    """The IpuType of a numpy dtype (an IpuType is returned as it is)."""
    if isinstance(v, IpuType):
        return v
    try:
        return _IPU[np.dtype(v)]
    except (KeyError, TypeError):
        raise TypeError(f"dtype {v!r} has no IPU vertex type; use one of "
                        f"{', '.join(str(np.dtype(d)) for d in _NUMPY.values())}") from None


def from_ipu_type_to_numpy_dtype(v: Any) -> np.dtype:
    """The numpy dtype of an IpuType (a numpy dtype is returned as it is)."""
    if isinstance(v, IpuType):
        return np.dtype(_NUMPY[v])
    return np.dtype(v)


def get_ipu_type_name(v: Any) -> str:
    """The C++ name of a dtype in vertex names ('float', 'unsigned int', ...)."""
    return codegen.cxx_type(from_ipu_type_to_numpy_dtype(from_numpy_dtype_to_ipu_type(v)))


@dataclass(frozen=True)
class IpuShapedArray:
    """A shape and an IpuType."""

    shape: tuple[int, ...]
    dtype: IpuType

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))


def make_ipu_shaped_array(shape: Sequence[int], dtype: Any) -> IpuShapedArray:
    return IpuShapedArray(tuple(int(d) for d in shape), from_numpy_dtype_to_ipu_type(dtype))
