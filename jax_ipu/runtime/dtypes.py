"""PJRT element type codes (PJRT_Buffer_Type) by numpy dtype name, and those numpy dtypes.

The runtime tags buffers with these codes; the PJRT table hands them to jaxlib unchanged."""

import ml_dtypes
import numpy as np

ELEMENT_TYPES = {
    "bool": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "uint8": 6, "uint16": 7,
    "uint32": 8, "uint64": 9, "float16": 10, "float32": 11, "float64": 12, "bfloat16": 13,
    "complex64": 14, "complex128": 15, "float8_e5m2": 16, "float8_e4m3fn": 17,
    "float8_e4m3b11fnuz": 18, "float8_e5m2fnuz": 19, "float8_e4m3fnuz": 20, "int4": 21,
    "uint4": 22, "int2": 24, "uint2": 25, "float8_e4m3": 26, "float8_e3m4": 27,
    "float8_e8m0fnu": 28, "float4_e2m1fn": 29, "token": 23,
}
DTYPE_NAMES = {code: name for name, code in ELEMENT_TYPES.items()}



def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a dtype name, including ml_dtypes' (bfloat16, float8_*, int4...)."""
    if name == "token":  # ordering tokens of effects: no data, held as empty bool arrays
        return np.dtype(bool)
    try:
        return np.dtype(name)
    except TypeError:
        return np.dtype(getattr(ml_dtypes, name))
