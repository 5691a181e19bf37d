"""What a cast to or from an 8-bit float costs on a tile: popops' Cast vertices, by their estimate.

ipu21 converts between quarter and half in its auxiliary pipeline, 8 elements a vector; between
quarter and float it has no such instruction, and popops' codelet converts an element at a time."""

from __future__ import annotations

import math

from jax_ipu.dtypes import itemsize
from jax_ipu.model.targets import CAST_LOAD_PORTS, VECTOR_BYTES

# Conversions ipu21's auxiliary pipeline does a vector at a time (popops' castWorkerCycles).
_AUX = {frozenset({"float32", "float16"}), frozenset({"float16"}), frozenset({"float32"})}


def _eight_bit(dtype: str) -> bool:
    return dtype.startswith("float8")


def _aux(source: str, dest: str) -> bool:
    if _eight_bit(source) or _eight_bit(dest):
        other = dest if _eight_bit(source) else source
        return other == "float16"
    return frozenset({source, dest}) in _AUX


def cast_cycles_per_element(source: str, dest: str) -> float:
    """Worker cycles a cast spends on an element, by popops' estimate (G-5, castWorkerCycles):
    vectors of as many elements as two 64-bit loads of the source and one store of the result
    hold, each taking as many cycles as its loads or its store need; a cast the auxiliary
    pipeline cannot do goes an element at a time, with a cycle more to convert it."""
    load = VECTOR_BYTES // max(1, itemsize(source))
    store = VECTOR_BYTES // max(1, itemsize(dest))
    if not _aux(source, dest):
        return 2.0
    width = min(load * CAST_LOAD_PORTS, store)
    per_vector = max(math.ceil(width / min(width, load)), math.ceil(width / min(width, store)))
    return per_vector / width


def cast_alu_cycles(source: str, dest: str, width: int) -> float | None:
    """Cycles a cast involving an 8-bit float spends on a vector of `width` result elements
    (None for other casts, which the model prices by their loads and stores)."""
    if not (_eight_bit(source) or _eight_bit(dest)):
        return None
    return width * cast_cycles_per_element(source, dest)
