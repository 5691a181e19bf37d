"""Tests of the IPU Model's cycles: elementwise, reduction and matmul rules, fusion, loops, peak.

Expectations are hand-computed from the named constants in jax_ipu/model/targets.py."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import pytest

from jax_ipu.compiler.program import read_program
from jax_ipu.model import analyze
from jax_ipu.model.ir import Op, Program, TensorType
from jax_ipu.model.matmul import plan_matmul
from jax_ipu.model.targets import (
    AMP_1X1_INPUT_GROUP_SUPERVISOR_CYCLES,
    AMP_1X1_INPUT_GROUP_WORKER_CYCLES,
    AMP_1X1_PASS_SUPERVISOR_CYCLES,
    AMP_1X1_PASS_WORKER_CYCLES,
    AMP_FP16_INPUTS_PER_CYCLE,
    AMP_PIPELINE_DEPTH,
    EXCHANGE_BYTES_PER_TILE_CYCLE,
    EXCHANGE_SETUP_CYCLES,
    IPU2_FP16_FLOPS_PER_TILE_CYCLE,
    LOCAL_BYTES_PER_TILE_CYCLE,
    SIMPLE_CYCLES_PER_VECTOR,
    SYNC_CYCLES_PER_STEP,
    TRANSCENDENTAL_CYCLES_PER_VECTOR,
    VERTEX_OVERHEAD_CYCLES,
    WORKER_THREADS_PER_TILE,
    get_target,
)
from tests._lowering import portable_artifact

BLOCK16 = AMP_PIPELINE_DEPTH * AMP_FP16_INPUTS_PER_CYCLE  # fp16 weights an AMP unit holds
V, SYNC, SETUP = VERTEX_OVERHEAD_CYCLES, SYNC_CYCLES_PER_STEP, EXCHANGE_SETUP_CYCLES
W = WORKER_THREADS_PER_TILE


def _spec(*shape, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype)


def _report(fn, *args, version="ipu2", tiles=None, amp=0.6, **kw):
    return analyze(read_program(portable_artifact(fn, *args, **kw)),
                   get_target(version, tiles, amp))


def _busiest_worker(vectors: int) -> int:
    """Cycles per instruction slot of a tile whose 6 workers share `vectors` vectors."""
    return math.ceil(vectors / W) * W


def matmul(a, b):
    return a @ b


def test_hand_computed_negate():
    # float32[1024] = 4096 B: 32 tiles x 32 elements = 16 vectors of 2, 3 per worker. Each
    # vector is one ALU op but two 64-bit accesses (load, store): 2 cycles per slot.
    r = _report(lambda x: -x, _spec(1024))
    assert r.cycles.compute == V + _busiest_worker(16) * max(SIMPLE_CYCLES_PER_VECTOR, 2)
    assert r.cycles.compute == 190 + 18 * 2
    assert r.cycles.sync == SYNC and r.cycles.exchange == 0
    assert r.cycles.total == r.cycles.compute + SYNC
    assert r.flops == 1024
    assert r.seconds == pytest.approx(r.cycles.total / 1.33e9)


def test_elementwise_chain_fused_once():
    # exp(x) * 2 + 1 on float16[4096] = 8 KiB: one vertex, one sync;
    # 8192 B / 128 B minimum = 64 tiles x 64 halves = 16 vectors of 4 (3 per worker);
    # ALU 8 + 1 + 1 cycles a vector beats its 2 accesses.
    r = _report(lambda x: jnp.exp(x) * 2 + 1, _spec(4096, dtype=jnp.float16))
    stored = [o for o in r.ops if o.op_class == "elementwise"]
    assert len(stored) == 1 and {"exponential", "multiply"} <= set(stored[0].fused)
    alu = TRANSCENDENTAL_CYCLES_PER_VECTOR + 2 * SIMPLE_CYCLES_PER_VECTOR
    assert r.cycles.compute == V + _busiest_worker(16) * alu
    assert r.cycles.sync == SYNC


def test_memory_bound_elementwise_pays_one_access_a_cycle():
    # a + s * b on 512 float32 on one tile (C-3): 256 vectors, 43 per worker; 2 ALU ops
    # but 3 accesses (two loads, one store) a vector: 3 cycles per slot.
    r = _report(lambda a, s, b: a + s * b, _spec(512), _spec(), _spec(512), tiles=1)
    assert 3 == math.ceil(2 * 8 / LOCAL_BYTES_PER_TILE_CYCLE) + 1
    assert r.cycles.compute == V + _busiest_worker(256) * 3
    assert r.cycles.total == V + 258 * 3 + SYNC == 1054


def test_one_element_costs_a_whole_worker_turn():
    # A tile with one vector: the one busy worker issues every 6th cycle (C-4).
    r = _report(lambda x: x * x + 1, _spec(1), tiles=1)
    assert r.cycles.compute == V + W * 2  # 2 ALU ops, 2 accesses (x once, the result)


def test_x_times_x_fuses_into_one_expression():
    r = _report(lambda x: (x + 1) * (x + 1), _spec(4096))
    assert [o.kind for o in r.ops if o.cycles] == ["multiply"]


def test_reduction_crossing_tiles_has_two_stages():
    # sum over rows of float32[1024,1024]: 1472 tiles x 713 elements = 357 vectors (60 per
    # worker) of one add and one load; 1024 rows + 1472 tile boundaries of float32 partials
    # = 9984 B over 78 tiles (128 B each) cross the exchange, and a second vertex adds them.
    r = _report(lambda x: x.sum(axis=1), _spec(1024, 1024))
    (row,) = [o for o in r.ops if o.op_class == "reduction"]
    first = V + _busiest_worker(357) * 1
    second = V + 128 // LOCAL_BYTES_PER_TILE_CYCLE
    assert row.compute_cycles == first + second == 550 + 206
    assert row.exchange_cycles == SETUP + 128 // EXCHANGE_BYTES_PER_TILE_CYCLE == 132
    assert row.sync_cycles == 2 * SYNC
    assert row.cycles == 550 + 206 + 132 + 180


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


def test_batch_per_tile_matmul_has_no_exchange():
    # C-1: [64,16] @ [16,16] fp16 on each of 1472 tiles (ipu21). One group per tile, inputs
    # laid out with it: no exchange, one sync. The AMP: 16 units of 4 inputs a cycle hold a
    # 16 x 16 weight block (loaded at 8 B a cycle: 64 cycles), then 64 rows of 4 cycles.
    r = _report(lambda x, w: jnp.einsum("tnk,tmk->tnm", x, w), _spec(1472, 64, 16,
                dtype=jnp.float16), _spec(1472, 16, 16, dtype=jnp.float16), version="ipu21")
    load = 16 * BLOCK16 * 2 // LOCAL_BYTES_PER_TILE_CYCLE
    assert load == 64
    (dot,) = [o for o in r.ops if o.kind == "dot_general"]
    assert dot.exchange_cycles == 0 and dot.sync_cycles == SYNC
    assert dot.compute_cycles == V + load + 64 * BLOCK16 // AMP_FP16_INPUTS_PER_CYCLE
    assert dot.cycles == 190 + 64 + 256 + 90
    assert dot.tiles == 1472


def test_matmul_plan_hand_computed():
    # (64 x 64) @ (64 x 64) fp16 on 16 tiles: the cheapest plan splits M and N 4 ways each
    # (16 x 16 blocks, K whole). Inputs are laid out for the plan, so a tile receives the 3/4
    # of its row block and of its column block that other tiles hold.
    target = get_target("ipu2", 16)
    plan = plan_matmul(1, 64, 64, 64, 2, target)
    assert plan.splits == (1, 4, 4, 1) and plan.serial == 1
    received = 16 * 64 * 2 * (1 - 1 / 4) * 2
    # one pass over the whole of K: the float32 partial sums stay in the AMP's accumulators
    assert plan.workspace_bytes_per_tile == received
    assert plan.exchange_cycles == SETUP + received / EXCHANGE_BYTES_PER_TILE_CYCLE
    # 4 blocks of 16 x 16 weights, each loaded (64 cycles) then 16 rows of 4 cycles; the 1x1
    # vertex restarts its workers for each further block, of another input-channel group
    # (G-4): 25 + 6 x 19 a block and 15 + 6 x 3 a group
    amp = (64 // BLOCK16) * (64 + 16 * 4)
    restarts = 3 * (AMP_1X1_PASS_SUPERVISOR_CYCLES + 6 * AMP_1X1_PASS_WORKER_CYCLES) + \
        3 * (AMP_1X1_INPUT_GROUP_SUPERVISOR_CYCLES + 6 * AMP_1X1_INPUT_GROUP_WORKER_CYCLES)
    assert restarts == 3 * 139 + 3 * 33
    assert plan.compute_cycles == V + amp + restarts == 190 + 512 + 516
    assert plan.syncs == 2
    # the AMP never beats its peak: 64 MAC a cycle
    assert amp >= 2 * 16 * 16 * 64 / IPU2_FP16_FLOPS_PER_TILE_CYCLE


def test_matmul_of_computed_operand_rearranges_it():
    # the second product reads tanh(x @ w): made by a matmul, not laid out for this plan
    def two(x, w1, w2):
        return jnp.tanh(x @ w1) @ w2

    def one(h, w2):
        return h @ w2

    r2 = _report(two, _spec(256, 256), _spec(256, 256), _spec(256, 256))
    r1 = _report(one, _spec(256, 256), _spec(256, 256))
    second = [o for o in r2.ops if o.kind == "dot_general"][1]
    (alone,) = [o for o in r1.ops if o.kind == "dot_general"]
    assert "rearranged" in second.note and "rearranged" not in alone.note
    assert second.exchange_cycles > alone.exchange_cycles


def test_available_memory_proportion_trades_cycles_for_memory():
    big = get_target("ipu2", 16, available_memory_proportion=0.6)
    small = get_target("ipu2", 16, available_memory_proportion=0.1)
    wide, tight = (plan_matmul(1, 256, 256, 256, 4, t) for t in (big, small))
    assert wide.workspace_bytes_per_tile <= 0.6 * big.bytes_per_tile
    assert tight.workspace_bytes_per_tile <= 0.1 * small.bytes_per_tile
    assert tight.workspace_bytes_per_tile < wide.workspace_bytes_per_tile
    cycles = [p.compute_cycles + p.exchange_cycles + p.syncs * SYNC for p in (wide, tight)]
    assert cycles[1] > cycles[0] and tight.serial > wide.serial


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


@pytest.mark.parametrize("dtype,n", [(jnp.float32, 4096), (jnp.float16, 6144)])
def test_large_matmul_approaches_peak(dtype, n):
    # C-2's widest product reaches 60% of peak on hardware
    target = get_target("ipu2")
    r = _report(matmul, _spec(n, n, dtype=dtype), _spec(n, n, dtype=dtype))
    efficiency = r.flops / r.seconds / target.peak_flops_per_s(jnp.dtype(dtype).name)
    assert 0.6 < efficiency <= 1
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


def test_ops_without_operands_cost_nothing_and_place_fine():
    # replica_id and partition_id are "free" ops with no operand to be a view of
    t = TensorType((), "uint32")
    ops = [Op("stablehlo.replica_id", (), (t,), (), (1,)),
           Op("stablehlo.partition_id", (), (t,), (), (2,))]
    r = analyze(Program("jit_ids", (), (t, t), ops, (), (1, 2)), get_target("ipu2"))
    assert r.cycles.total == 0 and not r.warnings


def test_an_op_no_rule_can_cost_is_named_and_does_not_stop_compilation():
    # An unknown op reading a slice (a view of 16 elements) into 32 elements: not even an
    # elementwise pass over its result can place that operand.
    x, piece, out = TensorType((64,), "float32"), TensorType((16,), "float32"), \
        TensorType((32,), "float32")
    ops = [Op("stablehlo.slice", (x,), (piece,), (1,), (2,),
              {"start_indices": [0], "limit_indices": [16], "strides": [1]}),
           Op("stablehlo.mystery", (piece,), (out,), (2,), (3,))]
    r = analyze(Program("jit_mystery", (x,), (out,), ops, (1,), (3,)), get_target("ipu2"))
    assert "stablehlo.mystery" in r.cycles.unmodelled_ops
    assert any("stablehlo.mystery" in w for w in r.warnings)
