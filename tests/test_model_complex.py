"""Tests of complex64 in the IPU Model: pairs of float32, each op costed as the float32 work it
becomes, and FFTs planned as a tiled FFT runs (model/complex_ops.py, model/fft.py).

Expectations are hand-computed from the named constants in jax_ipu/model/targets.py."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import pytest

from jax_ipu.compiler.program import read_program
from jax_ipu.dtypes import itemsize
from jax_ipu.model import analyze
from jax_ipu.model.fft import Pass, candidates, pass_flops, plan_pass, radices
from jax_ipu.model.matmul import choose_matmul
from jax_ipu.model.targets import (
    EXCHANGE_BYTES_PER_TILE_CYCLE,
    EXCHANGE_SETUP_CYCLES,
    SYNC_CYCLES_PER_STEP,
    TRANSCENDENTAL_CYCLES_PER_VECTOR,
    VERTEX_OVERHEAD_CYCLES,
    WORKER_THREADS_PER_TILE,
    get_target,
)
from tests._lowering import portable_artifact

V, SYNC, W = VERTEX_OVERHEAD_CYCLES, SYNC_CYCLES_PER_STEP, WORKER_THREADS_PER_TILE
C64, F32 = jnp.complex64, jnp.float32
IPU2 = get_target("ipu2")


def _spec(*shape, dtype=C64):
    return jax.ShapeDtypeStruct(shape, dtype)


def _report(fn, *args):
    return analyze(read_program(portable_artifact(fn, *args)), IPU2)


def _row(report, kind):
    rows = [o for o in report.ops if o.kind == kind]
    assert len(rows) == 1, [o.kind for o in report.ops]
    return rows[0]


def _slots(vectors: int) -> int:
    """Instruction slots of the busiest of a tile's six workers sharing `vectors` vectors."""
    return math.ceil(vectors / W) * W


def test_complex64_is_two_float32():
    assert itemsize("complex64") == 2 * itemsize("float32") == 8


def test_complex_product_is_four_multiplies_and_two_adds():
    # complex64[1024] = 8 KiB over 64 tiles: 16 values a tile, one to a 64-bit vector. Its six
    # float32 operations are 3 two-lane instructions a value, as many as its 3 accesses (two
    # loads, a store): the float32 product of the same bytes costs the same cycles.
    r = _report(lambda a, b: a * b, _spec(1024), _spec(1024))
    row = _row(r, "multiply")
    assert row.flops == 1024 * 6
    assert row.compute_cycles == V + _slots(16) * 3 == 244
    real = _row(_report(lambda a, b: a * b, _spec(2048, dtype=F32), _spec(2048, dtype=F32)),
                "multiply")
    assert real.compute_cycles == row.compute_cycles and real.flops == row.flops // 3


def test_complex_exp_and_divide_are_their_float32_formulas():
    # exp(a + bi) = e^a (cos b + i sin b): 3 transcendentals and 2 multiplies a value, halved
    # over the two lanes: (3 x 8 + 2) / 2 = 13 cycles a vector.
    row = _row(_report(jnp.exp, _spec(1024)), "exponential")
    assert row.flops == 1024 * 5
    assert row.compute_cycles == V + _slots(16) * (3 * TRANSCENDENTAL_CYCLES_PER_VECTOR + 2) / 2
    assert row.compute_cycles == 424
    # a quotient: 9 simple operations and 2 divides (4 cycles each): 8.5, a whole 9 a slot
    row = _row(_report(lambda a, b: a / b, _spec(1024), _spec(1024)), "divide")
    assert row.flops == 1024 * 11 and row.compute_cycles == V + _slots(16) * 9 == 352


def test_abs_of_complex_reads_pairs_and_makes_float32():
    # |z| = sqrt(a^2 + b^2) makes float32: two results a vector, each 3 simple operations and a
    # square root: 2 x (3 + 8) / 2 = 11 cycles; the result lives where its operand does (64
    # tiles, 16 values a tile: 8 vectors).
    row = _row(_report(jnp.abs, _spec(1024)), "abs")
    assert row.flops == 1024 * 4
    assert row.compute_cycles == V + _slots(8) * 11 == 322


def test_complex_sum_is_two_float32_sums():
    complex_sum = _row(_report(jnp.sum, _spec(4096)), "reduce")
    real_sum = _row(_report(jnp.sum, _spec(8192, dtype=F32)), "reduce")
    assert complex_sum.flops == 2 * 4096 == real_sum.flops
    assert complex_sum.cycles == real_sum.cycles


def test_complex_matmul_is_the_real_matmul_of_twice_the_depth_and_width():
    # [Re a, Im a] @ [[Re b, Im b], [-Im b, Re b]]: the four real products in one matmul.
    row = _row(_report(jnp.matmul, _spec(64, 128), _spec(128, 32)), "dot_general")
    real = _row(_report(jnp.matmul, _spec(64, 256, dtype=F32), _spec(256, 64, dtype=F32)),
                "dot_general")
    assert row.flops == 8 * 64 * 128 * 32 == real.flops
    assert (row.compute_cycles, row.exchange_cycles, row.cycles) == \
        (real.compute_cycles, real.exchange_cycles, real.cycles)
    assert row.plan == real.plan


def test_radices_are_the_odd_part_times_powers_of_two():
    assert radices(8) == [(1, 3), (2, 2), (4, 1), (8, 0)]
    assert radices(12) == [(3, 2), (6, 1), (12, 0)]
    assert radices(7) == [(7, 0)]


def test_butterflies_on_one_tile():
    # 8 points (64 B) fit one tile: 3 stages of 4 butterflies, no exchange. A butterfly is a
    # twiddle product, an add and a subtract (10 float32 operations: 5 two-lane instructions)
    # against 3 loads and 2 stores: 5 cycles; 4 butterflies take one turn of the six workers.
    plans = candidates(Pass(1, 8), IPU2)
    alone = next(p for p, radix in plans.items() if radix == 1)
    stage = V + _slots(4) * 5
    assert (alone.compute_cycles, alone.exchange_cycles, alone.syncs) == (3 * stage, 0, 3)
    assert alone.cycles(IPU2) == 3 * 220 + 3 * SYNC == 930
    # the share (64 B) written again, and the 4 twiddles
    assert alone.temp_bytes_per_tile == 64 + 4 * 8


def test_a_transform_spanning_tiles_exchanges_in_log2_of_its_tiles_stages():
    # 4096 points = 32 KiB over 256 tiles (128 B each): 12 stages of 2048 butterflies, 8 a
    # tile; the 8 stages pairing points 16 or more apart first swap the tile's 128 B share.
    plans = candidates(Pass(1, 4096), IPU2)
    alone = next(p for p, radix in plans.items() if radix == 1)
    stage = V + _slots(8) * 5
    swap = EXCHANGE_SETUP_CYCLES + 128 / EXCHANGE_BYTES_PER_TILE_CYCLE
    assert alone.tiles == 256
    assert (alone.compute_cycles, alone.exchange_cycles, alone.syncs) == \
        (12 * stage, 8 * swap, 12 + 8)
    assert alone.cycles(IPU2) == 12 * 250 + 8 * 132 + 20 * SYNC == 5856
    # A radix-1024 plan: the 1024-point DFT of the 4 columns on the AMP, as one float32 matmul
    # (1024 x 2048) @ (2048 x 8), its right operand rearranged (a transform spans tiles), then
    # 2 butterfly stages, both across tiles.
    dft = next(p for p, radix in plans.items() if radix == 1024)
    matmul = choose_matmul(1, 1024, 2 * 4, 2 * 1024, 4, IPU2, (True, False)).chosen
    assert dft.compute_cycles == matmul.compute_cycles + 2 * stage
    assert dft.exchange_cycles == matmul.exchange_cycles + 2 * swap
    assert dft.syncs == matmul.syncs + 2 + 2
    assert pass_flops(Pass(1, 4096), 1024) == 8 * 1024 * 4096 + 10 * 2048 * 2
    assert pass_flops(Pass(1, 4096), 1) == 10 * 2048 * 12


def test_real_transform_packs_half_the_points_and_adds_a_split_stage():
    # rfft of float32[8, 256]: 8 transforms of 128 complex points (8 KiB over 64 tiles, a
    # transform spans 8 of them), 7 stages plus the split stage of 512 butterflies each, 8 a
    # tile; 3 of the stages and the split (k with 128 - k) cross tiles.
    p = Pass(8, 128, split=True)
    alone = next(q for q, radix in candidates(p, IPU2).items() if radix == 1)
    stage = V + _slots(8) * 5
    swap = EXCHANGE_SETUP_CYCLES + 128 / EXCHANGE_BYTES_PER_TILE_CYCLE
    assert (alone.compute_cycles, alone.exchange_cycles, alone.syncs) == \
        (8 * stage, 4 * swap, 8 + 4)
    # 2.5 N log2 N for N = 256 real points, FFTW's convention for real transforms
    assert pass_flops(p, 1) == 8 * 2.5 * 256 * 8


def test_fft_op_takes_the_cheapest_plan_that_fits():
    r = _report(jnp.fft.fft, _spec(4096))
    row = _row(r, "fft")
    plans = candidates(Pass(1, 4096), IPU2)
    best = min((p for p in plans if p.fit_bytes <= 0.6 * IPU2.bytes_per_tile),
               key=lambda p: p.cycles(IPU2))
    assert row.cycles == best.cycles(IPU2) == r.cycles.total
    choice, radix = plan_pass(Pass(1, 4096), IPU2)
    assert choice.chosen == best and row.flops == pass_flops(Pass(1, 4096), radix)
    assert row.plan.startswith(f"1 x 4096-point: radix-{radix} DFT on the AMP")
    assert "lost:" in row.runner_up


@pytest.mark.parametrize("fn, shape, dtype, passes", [
    (jnp.fft.rfft, (8, 256), F32, [Pass(8, 128, True)]),
    (jnp.fft.irfft, (8, 129), C64, [Pass(8, 128, True)]),
    (jnp.fft.fft2, (4, 64, 32), C64, [Pass(256, 32), Pass(128, 64)]),
    (jnp.fft.rfft2, (64, 32), F32, [Pass(64, 16, True), Pass(17, 64)]),
])
def test_fft_passes_one_per_dimension(fn, shape, dtype, passes):
    row = _row(_report(fn, _spec(*shape, dtype=dtype)), "fft")
    plans = [plan_pass(p, IPU2) for p in passes]
    expected = sum(choice.chosen.cycles(IPU2) for choice, _ in plans)
    # a pass over an outer dimension of transforms that span tiles moves its lines onto tiles
    # and back: two exchanges of each tile's share
    outer = [p for p in passes[1:] if -(-p.points * 8 // 128) > math.prod(shape[:-2] or (1,))]
    for p in outer:
        tiles = min(IPU2.num_tiles, p.points * 8 // 128)
        expected += 2 * (EXCHANGE_SETUP_CYCLES + math.ceil(p.points * 8 / tiles /
                                                           EXCHANGE_BYTES_PER_TILE_CYCLE)
                         + SYNC)
    assert row.cycles == expected
    assert row.flops == sum(pass_flops(p, radix) for p, (_, radix) in zip(passes, plans,
                                                                          strict=True))
