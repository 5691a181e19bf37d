"""Every dtype jax_ipu meets, in one table: its size, PJRT element type, MLIR and HLO spellings.

Pure data (no jax): the model sizes tensors with it, the compiler reads programs with it, and the
PJRT layer tags buffers with it."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    name: str  # numpy / jax name
    bits: int  # per element; sub-byte types take a whole byte when stored (the IPU
    # addresses bytes)
    pjrt: int  # PJRT_Buffer_Type
    mlir: str  # spelling of the element type in MLIR
    hlo: str  # spelling in XLA's HLO text
    # A complex type is held as two values of this real type (real part, then imaginary), as
    # Poplar programs hold complex data: it runs where that type runs. None for real types.
    pair_of: str | None = None


TABLE: tuple[DType, ...] = (
    DType("bool", 8, 1, "i1", "pred"),
    DType("int8", 8, 2, "i8", "s8"),
    DType("int16", 16, 3, "i16", "s16"),
    DType("int32", 32, 4, "i32", "s32"),
    DType("int64", 64, 5, "i64", "s64"),
    DType("uint8", 8, 6, "ui8", "u8"),
    DType("uint16", 16, 7, "ui16", "u16"),
    DType("uint32", 32, 8, "ui32", "u32"),
    DType("uint64", 64, 9, "ui64", "u64"),
    DType("float16", 16, 10, "f16", "f16"),
    DType("float32", 32, 11, "f32", "f32"),
    DType("float64", 64, 12, "f64", "f64"),
    DType("bfloat16", 16, 13, "bf16", "bf16"),
    DType("complex64", 64, 14, "complex<f32>", "c64", pair_of="float32"),
    DType("complex128", 128, 15, "complex<f64>", "c128", pair_of="float64"),
    DType("float8_e5m2", 8, 16, "f8E5M2", "f8e5m2"),
    DType("float8_e4m3fn", 8, 17, "f8E4M3FN", "f8e4m3fn"),
    DType("float8_e4m3b11fnuz", 8, 18, "f8E4M3B11FNUZ", "f8e4m3b11fnuz"),
    DType("float8_e5m2fnuz", 8, 19, "f8E5M2FNUZ", "f8e5m2fnuz"),
    DType("float8_e4m3fnuz", 8, 20, "f8E4M3FNUZ", "f8e4m3fnuz"),
    DType("int4", 4, 21, "i4", "s4"),
    DType("uint4", 4, 22, "ui4", "u4"),
    DType("token", 0, 23, "!stablehlo.token", "token"),
    DType("int2", 2, 24, "i2", "s2"),
    DType("uint2", 2, 25, "ui2", "u2"),
    DType("float8_e4m3", 8, 26, "f8E4M3", "f8e4m3"),
    DType("float8_e3m4", 8, 27, "f8E3M4", "f8e3m4"),
    DType("float8_e8m0fnu", 8, 28, "f8E8M0FNU", "f8e8m0fnu"),
    DType("float4_e2m1fn", 4, 29, "f4E2M1FN", "f4e2m1fn"),
)
BY_NAME = {d.name: d for d in TABLE}
BY_PJRT = {d.pjrt: d for d in TABLE}
BY_MLIR = {d.mlir: d for d in TABLE}
BY_HLO = {d.hlo: d for d in TABLE}


def itemsize(name: str) -> int:
    """Bytes one element takes in memory (unknown dtypes count as 4)."""
    d = BY_NAME.get(name)
    return 4 if d is None else (d.bits + 7) // 8


def pair_of(name: str) -> str | None:
    """The real type a complex dtype is held as two of (complex64: float32); None otherwise."""
    d = BY_NAME.get(name)
    return None if d is None else d.pair_of


def with_pairs(native: frozenset[str]) -> frozenset[str]:
    """`native` and every complex dtype whose parts are in it: a chip that runs float32 holds
    complex64 as pairs of float32; one without float64 has no complex128."""
    return native | {d.name for d in TABLE if d.pair_of in native}


def element_type(name: str) -> int:
    """The PJRT element type of a dtype name."""
    return BY_NAME[name].pjrt


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a dtype name, including ml_dtypes' (bfloat16, float8_*, int4...)."""
    if name == "token":  # ordering tokens of effects: no data, held as empty bool arrays
        return np.dtype(bool)
    try:
        return np.dtype(name)
    except TypeError:
        return np.dtype(getattr(ml_dtypes, name))


@functools.lru_cache(maxsize=256)
def row_major_strides(dims: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The byte strides of a dense row-major array of `dims` items of `itemsize` bytes."""
    strides, step = [], itemsize
    for d in reversed(dims):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))
