"""Thin convolutions and skinny products as PopLibs' poplin runs them (G-4), every figure
hand-computed from targets.py: fp32 AMP rows, stacked kernel rows, vertex restarts, copies."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import pytest

from jax_ipu.model import get_target
from jax_ipu.model.matmul import (
    Kernel,
    Product,
    _blocks,
    amp_cycles,
    choose_conv,
    mac_cycles,
    padded_channels,
    transform_copy_cycles,
)
from jax_ipu.model.targets import (
    AMP_1X1_INPUT_GROUP_SUPERVISOR_CYCLES,
    AMP_1X1_INPUT_GROUP_WORKER_CYCLES,
    AMP_1X1_PASS_SUPERVISOR_CYCLES,
    AMP_1X1_PASS_WORKER_CYCLES,
    AMP_PASS_SUPERVISOR_CYCLES,
    AMP_PASS_WORKER_CYCLES,
    AMP_WEIGHT_HEIGHT_LOAD_CYCLES,
    EXCHANGE_SETUP_CYCLES,
    SYNC_CYCLES_PER_STEP,
    VERTEX_OVERHEAD_CYCLES,
)
from tests._lowering import judge, portable_artifact

S = jax.ShapeDtypeStruct
V, SETUP, SYNC = VERTEX_OVERHEAD_CYCLES, EXCHANGE_SETUP_CYCLES, SYNC_CYCLES_PER_STEP
IPU2 = get_target("ipu2")
# a further pass of the nx1 vertex over a block holding 2 kernel rows (G-4): 12 + 3 supervisor
# cycles, 46 to load the block's weights, 42 a worker
NX1_RESTART_2 = AMP_PASS_SUPERVISOR_CYCLES + AMP_WEIGHT_HEIGHT_LOAD_CYCLES[2] + \
    6 * AMP_PASS_WORKER_CYCLES
# a further block of the 1x1 vertex, and a further input-channel group of it (G-4)
BLOCK_1X1 = AMP_1X1_PASS_SUPERVISOR_CYCLES + 6 * AMP_1X1_PASS_WORKER_CYCLES
GROUP_1X1 = AMP_1X1_INPUT_GROUP_SUPERVISOR_CYCLES + 6 * AMP_1X1_INPUT_GROUP_WORKER_CYCLES


def conv3x3(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _conv_row(n: int, version: str = "ipu2"):
    code = portable_artifact(conv3x3, S((1, n, n, 4), jnp.float32),
                             S((3, 3, 4, 4), jnp.float32))
    report = judge(code, get_target(version), allow_out_of_memory=True)[1]
    (row,) = [o for o in report.ops if o.kind == "convolution"]
    return report, row


def test_fp32_amp_rows_take_8_cycles_on_16_units():
    # PopLibs' fp32 AMP loops take 8 cycles a row (coreCycles), through blocks 4 x 2 = 8 deep;
    # 16 MAC a cycle (32 FLOP) on ipu2 is 16 x 8 / 8 = 16 units (f32sisov2amp), 8 on ipu1
    assert IPU2.amp_shape(4) == (16, 2) and IPU2.amp_row_cycles(4) == 8
    assert IPU2.amp_block_inputs(4) == 8
    assert get_target("ipu1").amp_shape(4) == (8, 2)
    # fp16 and fp8 unchanged: 16 units, 4 cycles a row, 16 and 32 deep
    assert IPU2.amp_shape(2) == (16, 4) and IPU2.amp_row_cycles(2) == 4
    assert get_target("ipu21").amp_shape(1) == (16, 8)
    # output channels held padded to the 8-unit configuration, else to whole units
    assert [padded_channels(c, 16) for c in (4, 8, 12, 20)] == [8, 8, 16, 32]
    assert padded_channels(4, 8) == 8


@pytest.mark.parametrize("itemsize,channels,positions,width,blocks", [
    # fp32, 4 channels of a 3x3 kernel: groups of 2 at 4 rows (1 x 3 x 2 = 6 passes), of 4 at
    # 2 rows (2 x 3 x 1 = 6), of 8 at one (9): 6 passes on 2 rows, the cheaper load
    (4, 4, 9, 3, (6, 2)),
    # fp16 (blocks 16 deep, loads of 4): 4 channels at 4 rows, one block a kernel column
    (2, 4, 9, 3, (3, 4)),
    # 64 channels fill blocks: 9 positions x 8 blocks, one row each
    (4, 64, 9, 3, (72, 1)),
    # the width folded in (12 channels, a 3x1 kernel): 6 passes whichever grouping
    (4, 12, 3, 1, (6, 1)),
])
def test_kernel_rows_stack_in_a_units_weights(itemsize, channels, positions, width, blocks):
    # PopLibs' convUnitWeightHeight: a unit's weights hold g channels at weights / g rows
    k = positions * channels
    p = Product(1, 100, 4, k, itemsize, positions, channels, width=width, conv=True)
    assert _blocks(p, k, 1, IPU2) == blocks


def test_thin_fp32_convolution_hand_computed():
    # 1x512x512x4 -> 4 channels, fp32, 3x3 SAME, on an ipu2: 262,144 outputs over 1472 tiles,
    # 179 a tile. 6 passes (above) of a weight load (16 units x 8 x 4 B at 8 B a cycle: 64)
    # and 179 rows of 8 cycles; 5 further passes restart the nx1 vertex; it zeroes the
    # float32 partial sums of 8 (padded) channels first.
    report, row = _conv_row(512)
    assert row.plan.startswith("AMP, kernel positions in turn")
    rows, padded = 179, 8
    amp = 6 * (64 + rows * 8) + 5 * NX1_RESTART_2 + math.ceil(rows * padded * 4 / 8)
    assert NX1_RESTART_2 == 15 + 46 + 6 * 42 == 313
    assert amp == 8_976 + 1_565 + 716
    # 4 channels padded to 8: the output is copied out of the partial sums (179 x 8 x 4 B at
    # 4 B x 4/5 a cycle) and exchanged to its layout (poplin's rearrangeOutput)
    out = rows * padded * 4
    assert transform_copy_cycles(out, 4, IPU2) == math.ceil(out * 5 / 16) == 1_790
    assert row.compute_cycles == V + amp + V + 1_790 == 13_427
    # the weights (4 x 36 x 4 B) reach every tile; the output's 5,728 B cross the exchange
    assert row.exchange_cycles == SETUP + 576 // 4 + SETUP + out // 4 == 1_776
    assert row.cycles == 13_427 + 1_776 + 4 * SYNC == 15_563  # was 7,944
    # its temporaries: the weights received and the padded partial sums
    choice = choose_conv(1, 262_144, 4, Kernel(9, 3, 4), 4, IPU2)
    assert choice.chosen.temp_bytes_per_tile == 576 + out
    assert report.memory.max_tile_bytes == 21_768 and not report.memory.out_of_memory


def test_thin_fp32_convolution_on_a_large_image():
    # 1x2048x2048x4: 2,850 outputs a tile. The partial sums (2,850 x 8 x 4 B = 91,200 B) are
    # the plan's temporaries; the busiest tile holds them, the image's and the result's share
    # (45,592 and 45,584 B) and code: it fits, at 0.30 of a tile
    report, row = _conv_row(2048)
    rows = 2850
    amp = 6 * (64 + rows * 8) + 5 * NX1_RESTART_2 + rows * 8 * 4 // 8
    copy = math.ceil(rows * 8 * 4 * 5 / 16)
    assert row.compute_cycles == V + amp + V + copy == 179_029  # was 70,192
    assert row.cycles == 202_533  # was 93,416: 17.2 TFLOP/s, now 7.9
    assert report.memory.max_tile_bytes == 192_712 and not report.memory.out_of_memory


def test_horizontal_mac_costs_poplibs_estimate():
    # no AMP: per output, output channel and kernel position 7 cycles and a dot product over
    # 4 fp32 channels (7 + 2 vectors): 179 x 4 x 9 x 16 = 103,104, far above the AMP's
    assert mac_cycles(1, 179, 4, 36, 4, IPU2, positions=9) == 179 * 4 * 9 * 16 == 103_104
    choice = choose_conv(1, 262_144, 4, Kernel(9, 3, 4), 4, IPU2)
    assert not choice.chosen.family.startswith("HorizontalMac")


def test_skinny_fp16_product_pays_the_1x1_vertex_restarts():
    # (4096 x 4096) @ (4096 x 16) fp16 on a Bow: 64 rows of 16 columns a tile, K split over 23
    # tiles (179 deep: 12 blocks of 16). Each block a weight load (64) and 64 rows of 4; each
    # of the 11 further blocks restarts the 1x1 vertex's workers (25 + 6 x 19) in a further
    # input-channel group (15 + 6 x 3)
    assert (BLOCK_1X1, GROUP_1X1) == (139, 33)
    target = get_target("ipu21")
    assert amp_cycles(1, 64, 16, 12, 2, target) == 12 * (64 + 256) + 11 * (139 + 33) == 5_732
    code = portable_artifact(lambda a, b: a @ b, S((4096, 4096), jnp.float16),
                             S((4096, 16), jnp.float16))
    (row,) = [o for o in judge(code, target)[1].ops if o.kind == "dot_general"]
    assert "K 23" in row.plan
    assert row.cycles == 10_985  # was 9,093 (the restarts left out): 90 TFLOP/s, was 109
