"""Tests of the IPU Model's cycles: cost rules, fusion, loops, matmul planning, peak, host link.

Expectations are hand-computed from the named constants in jax_ipu/model/targets.py."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import pytest

from jax_ipu.compiler.program import read_program
from jax_ipu.model import analyze, host_transfer_cycles
from jax_ipu.model.targets import (
    HOST_TRANSFER_LATENCY_CYCLES,
    IPU2_LOCAL_BYTES_PER_TILE_CYCLE,
    SIMPLE_CYCLES_PER_VECTOR,
    SYNC_CYCLES_PER_STEP,
    TRANSCENDENTAL_CYCLES_PER_VECTOR,
    VERTEX_OVERHEAD_CYCLES,
    get_target,
)
from tests._lowering import portable_artifact


def _spec(*shape, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype)


def _report(fn, *args, version="ipu2", tiles=None, **kw):
    return analyze(read_program(portable_artifact(fn, *args, **kw)), get_target(version, tiles))


def matmul(a, b):
    return a @ b


def test_hand_computed_negate():
    # float32[1024]: 32 tiles x 32 elements = 16 vectors of 2; ALU 16 cycles beats the
    # 32 * 8 B / local bandwidth memory cycles.
    r = _report(lambda x: -x, _spec(1024))
    assert 32 * 8 / IPU2_LOCAL_BYTES_PER_TILE_CYCLE < 16 * SIMPLE_CYCLES_PER_VECTOR
    assert r.cycles.compute == VERTEX_OVERHEAD_CYCLES + 16 * SIMPLE_CYCLES_PER_VECTOR
    assert r.cycles.sync == SYNC_CYCLES_PER_STEP and r.cycles.exchange == 0
    assert r.cycles.total == VERTEX_OVERHEAD_CYCLES + 16 + SYNC_CYCLES_PER_STEP
    assert r.flops == 1024
    assert r.seconds == pytest.approx(r.cycles.total / 1.33e9)


def test_elementwise_chain_fused_once():
    # exp(x) * 2 + 1 on float16[4096] = 8 KiB: one vertex, one sync;
    # 8192 B / 128 B minimum = 64 tiles x 64 halves = 16 vectors of 4
    r = _report(lambda x: jnp.exp(x) * 2 + 1, _spec(4096, dtype=jnp.float16))
    stored = [o for o in r.ops if o.op_class == "elementwise"]
    assert len(stored) == 1 and {"exponential", "multiply"} <= set(stored[0].fused)
    alu = TRANSCENDENTAL_CYCLES_PER_VECTOR + 2 * SIMPLE_CYCLES_PER_VECTOR
    assert r.cycles.compute == VERTEX_OVERHEAD_CYCLES + 16 * alu
    assert r.cycles.sync == SYNC_CYCLES_PER_STEP


def test_loop_body_times_trip_count():
    def loop(x, n):
        return jax.lax.fori_loop(0, n, lambda i, c: jnp.sin(c) * 2, x)

    def body_rows(r):
        return [o for o in r.ops if o.depth == 1 and o.kind == "multiply"]

    two, ten = _report(lambda x: loop(x, 2), _spec(4096)), _report(lambda x: loop(x, 10),
                                                                    _spec(4096))
    assert [o.executions for o in body_rows(two)] == [2]
    assert [o.executions for o in body_rows(ten)] == [10]
    assert body_rows(ten)[0].cycles == 5 * body_rows(two)[0].cycles
    # the condition runs once more than the body
    assert [o.executions for o in ten.ops if o.kind == "compare"] == [11]
    assert ten.cycles.unknown_trip_counts == 0 and not ten.warnings


def test_unknown_trip_count_counted_once_and_flagged():
    r = _report(lambda x: jax.lax.while_loop(lambda c: c.sum() < 1e3, lambda c: c * 2, x),
                _spec(64))
    assert r.cycles.unknown_trip_counts == 1
    assert any("data-dependent trip count" in w for w in r.warnings)
    assert [o.executions for o in r.ops if o.kind == "multiply"] == [1]


def test_more_tiles_never_slower_for_large_matmul():
    a = _spec(2048, 2048)
    cycles = [_report(matmul, a, a, tiles=t).cycles.total
              for t in (4, 16, 64, 128, 256, 512, 1000, 1024, 1472)]
    assert all(later <= earlier for earlier, later in zip(cycles, cycles[1:], strict=False))
    assert cycles[-1] < cycles[0] / 100


@pytest.mark.parametrize("version", ["ipu1", "ipu2", "ipu21"])
@pytest.mark.parametrize("n", [64, 1024, 4096])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16])
def test_never_faster_than_peak(version, n, dtype):
    target = get_target(version)
    r = _report(matmul, _spec(n, n, dtype=dtype), _spec(n, n, dtype=dtype), version=version)
    assert r.flops == 2 * n**3
    assert r.flops / r.seconds <= target.peak_flops_per_s(jnp.dtype(dtype).name)


@pytest.mark.parametrize("dtype,n", [(jnp.float32, 4096), (jnp.float16, 8192)])
def test_large_matmul_approaches_peak(dtype, n):
    target = get_target("ipu2")
    r = _report(matmul, _spec(n, n, dtype=dtype), _spec(n, n, dtype=dtype))
    efficiency = r.flops / r.seconds / target.peak_flops_per_s(jnp.dtype(dtype).name)
    assert 0.7 < efficiency <= 1
    assert not r.memory.out_of_memory


@pytest.mark.parametrize("version", ["ipu1", "ipu2"])
def test_fp16_fp32_throughput_ratio(version):
    # IPU_FACTS: 124.5/31.1 and 250/62.5 TFLOP/s -> 4x
    target = get_target(version)
    assert target.peak_flops_per_s("float16") / target.peak_flops_per_s("float32") == 4
    a32, a16 = _spec(4096, 4096), _spec(4096, 4096, dtype=jnp.float16)
    r32, r16 = _report(matmul, a32, a32, version=version), _report(matmul, a16, a16,
                                                                    version=version)
    ratio = r32.cycles.compute / r16.cycles.compute
    assert 3 < ratio <= 4.05
    assert r16.cycles.total < r32.cycles.total


def test_host_transfer_cycles_hand_computed():
    target = get_target("ipu2")
    mib = 1 << 20
    assert host_transfer_cycles(0, target) == 0
    assert host_transfer_cycles(mib, target) == HOST_TRANSFER_LATENCY_CYCLES + math.ceil(
        mib / (32e9 / 1.33e9))
    r = _report(matmul, _spec(256, 256), _spec(256, 256))
    assert r.cycles.host_input_cycles_per_call == 2 * host_transfer_cycles(256 * 256 * 4, target)
    assert r.cycles.host_output_cycles_per_call == host_transfer_cycles(256 * 256 * 4, target)


def test_per_op_rows_carry_source_lines_and_totals_add_up():
    def f(x, w):
        h = jnp.maximum(x @ w, 0.0)
        return h.sum(axis=1)

    r = _report(f, _spec(128, 784), _spec(784, 512))
    dot = next(o for o in r.ops if o.kind == "dot_general")
    assert dot.file == __file__ and dot.flops == 2 * 128 * 784 * 512 and dot.tiles > 1
    assert dot.exchange_cycles > 0 and dot.compute_cycles > 0
    assert r.cycles.total == pytest.approx(sum(o.cycles for o in r.ops))
    assert r.cycles.total == pytest.approx(
        r.cycles.compute + r.cycles.exchange + r.cycles.sync + r.cycles.host_exchange)
    assert any(o.op_class == "reduction" for o in r.ops)
