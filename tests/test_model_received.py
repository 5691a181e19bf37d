"""Tests of the operand data an expression's tiles receive from other tiles, held in memory on
the reading tile from the exchange to the expression's compute set, each element once a tile.

Figures are hand-computed from the linear tile mapping (see test_model_movement.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jax_ipu.compiler.program import read_program
from jax_ipu.model import analyze, get_target
from tests._lowering import portable_artifact


def _report(fn, *args, tiles=None):
    return analyze(read_program(portable_artifact(fn, *args)), get_target("ipu2", tiles))


def _spec(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def _on_tile(memory) -> dict[str, int]:
    return {c.name: c.bytes_on_tile for c in memory.top_contributors}


def test_transposed_rows_are_held_while_the_sum_runs():
    # x.T + x, float32[64, 64] on 16 tiles of 4 rows: the result lives like x.T, and each
    # tile receives 60 of the 64 rows of its 4 columns, 240 elements (960 B), into a buffer
    # of its own while the add runs: at that step the result (16384 B) and 16 x 960 B live
    m = _report(lambda x: x.T + x, _spec(64, 64), tiles=16).memory
    assert m.by_category["received"] == 16 * 960
    assert m.peak_bytes - m.always_live_bytes == 16384 + 16 * 960
    assert _on_tile(m)["add operands received from other tiles"] == 960


def test_received_data_is_gone_once_its_reader_has_run():
    # y = x.T + x, then a reduction of y that needs nothing from other tiles' rows of x: the
    # 16 x 960 B the add received are held at the add's step only, not at the reduction's
    def f(x):
        y = x.T + x
        return y, jnp.max(y * 3, axis=1)

    m = _report(f, _spec(64, 64), tiles=16).memory
    at = {p.op: p.bytes - m.always_live_bytes for p in m.liveness}
    assert at["stablehlo.add"] == 16384 + 16 * 960
    # the reduction's step holds the add's result, its own 64 results (256 B) and its
    # reducer's 4 B scalar (an 8 B grain), no received rows
    assert at["stablehlo.reduce"] == 16384 + 256 + 8


def test_broadcast_vector_is_received_once_a_tile():
    # x + b, x float32[128, 512] over 1472 tiles (44 or 45 elements each), b float32[512] on
    # 16 tiles: a tile holds the 45 entries of b for its columns once, however many of its
    # rows read them (180 B on the busiest tile)
    m = _report(lambda x, b: x + b, _spec(128, 512), _spec(512)).memory
    assert _on_tile(m)["add operands received from other tiles"] == 45 * 4
