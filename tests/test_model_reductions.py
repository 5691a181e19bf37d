"""Partial sums reduced as PopLibs reduces them: poplin's stages for a matmul's K split, popops'
stages and final move for a scatter-add's update groups. Hand-computed from targets.py."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import pytest

from jax_ipu.model import get_target
from jax_ipu.model.matmul import reduce_partials, reduce_stage_depths
from jax_ipu.model.slicing import reduction_extra, reduction_stages
from jax_ipu.model.targets import (
    EXCHANGE_SETUP_CYCLES,
    SYNC_CYCLES_PER_STEP,
    VERTEX_OVERHEAD_CYCLES,
)
from tests._lowering import judge, portable_artifact

V, SETUP, SYNC = VERTEX_OVERHEAD_CYCLES, EXCHANGE_SETUP_CYCLES, SYNC_CYCLES_PER_STEP
TARGET = get_target("ipu21")


@pytest.mark.parametrize("depth,stages", [
    (15, ()),  # one stage below 16 partials
    (16, (4,)),  # two: 16 ** (1/2) = 4
    # 23 ** (1/2) = 4.8: 4 leaves 23/4 + 4 = 9.75 messages, 5 leaves 23/5 + 5 = 9.6
    (23, (5,)),
    (124, (11,)),
    # three from 125: 125 ** (2/3) = 25, then 25 ** (1/2) = 5
    (125, (25, 5)),
])
def test_poplin_reduces_partial_sums_in_stages(depth, stages):
    assert reduce_stage_depths(depth) == stages


def test_each_stage_exchanges_and_adds_what_its_groups_lack():
    # 4 KiB of partials on each of 23 tiles: 23 -> 5 moves 1 - 5/23 of them, 5 -> 1 moves 4/5
    acc = 4096
    first, second = acc * (1 - 5 / 23), acc * (1 - 1 / 5)
    compute = sum(V + math.ceil(m / 8) for m in (first, second))
    exchange = sum(SETUP + math.ceil(m / 4) for m in (first, second))
    assert reduce_partials(acc, 23, TARGET) == (compute, exchange, 4)
    # one stage below 16: the balanced reduce-scatter of before
    assert reduce_partials(acc, 8, TARGET) == (V + math.ceil(acc * 7 / 8 / 8),
                                               SETUP + math.ceil(acc * 7 / 8 / 4), 2)


def test_skinny_matmul_pays_the_stages():
    code = portable_artifact(lambda a, b: a @ b, jax.ShapeDtypeStruct((4096, 4096), jnp.float16),
                             jax.ShapeDtypeStruct((4096, 16), jnp.float16))
    (row,) = [o for o in judge(code, TARGET)[1].ops if o.kind == "dot_general"]
    assert "K 23" in row.plan  # 23 tiles share each output block: two stages
    # 9,093 before the 1x1 AMP vertex paid its restarts (11 further blocks, 139 + 33 each:
    # tests/test_model_thin_conv.py pins them)
    assert row.cycles == 9093 + 11 * (139 + 33) == 10985


@pytest.mark.parametrize("depth,tiles,stages", [
    (46, 1472, 1),  # no more than 64 partials an output: straight to the output
    # 70 > 64, but from fewer than 2 sqrt(1472) = 76.7 tiles covering most of the chip
    (70, 1472, 1),
    (70, 500, 2),  # ... not when they cover less than 3/4 of it
    (92, 1472, 2),  # an intermediate stage leaves ceil(sqrt(92)) = 10
    (184, 1472, 2),
])
def test_popops_adds_an_intermediate_stage_for_deep_reductions(depth, tiles, stages):
    assert reduction_stages(depth, tiles, TARGET) == stages


def test_sums_move_to_the_table_or_are_reduced_there():
    # 23 groups of 512 B: spreading the reduction and moving each sum to its table tile
    # (an exchange of 512 B and a sync, 318) beats reducing on the table's tiles (receiving
    # 22 x 512 B instead of 22/23 of 512 and adding them: 2916 - 223 + 1408 = 4101)
    more = reduction_extra(512, 23, 1472, TARGET)
    assert (more.compute_cycles, more.exchange_cycles, more.syncs) == (0, SETUP + 128, 1)
    # 2 groups of 64 B: receiving the other group's 64 B where the table lives is cheaper
    # (116 - 108 + 8 = 16 against 116 + 90)
    more = reduction_extra(64, 2, 1472, TARGET)
    assert (more.compute_cycles, more.exchange_cycles, more.syncs) == (8, 8, 0)
    # 184 groups on every tile also run popops' intermediate stage
    more = reduction_extra(512, 184, 1472, TARGET)
    incoming = 512 * 183 / 184
    assert more.compute_cycles == V + 512 / 8
    assert more.exchange_cycles == SETUP + 128 + SETUP + incoming / 4
    assert more.syncs == 1 + 2
