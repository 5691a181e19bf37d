"""fp8 at its own AMP rate, casts at popops' rates, and the C600 card as a target of its own.

Figures are hand-computed from targets.py's constants; the C600's from its datasheet's peaks."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import pytest

from jax_ipu.model import analyze, get_target
from jax_ipu.model.ir import Program, TensorType
from jax_ipu.model.report import format_streaming_out_of_memory
from jax_ipu.model.streaming import PINNED_HOST, capacity
from jax_ipu.model.targets import (
    IPU21_BYTES_PER_TILE,
    SYNC_CYCLES_PER_STEP,
    VERTEX_OVERHEAD_CYCLES,
    WORKER_THREADS_PER_TILE,
)
from tests._lowering import judge, portable_artifact
from tests._subprocess import run_python

S = jax.ShapeDtypeStruct
F8 = jnp.float8_e4m3fnuz
V, SYNC, W = VERTEX_OVERHEAD_CYCLES, SYNC_CYCLES_PER_STEP, WORKER_THREADS_PER_TILE


def test_c600_is_ipu21_at_its_own_clock():
    c600, bow = get_target("c600"), get_target("ipu21")
    # 280 TFLOP/s of fp16 over 1472 tiles of 128 FLOP a cycle
    assert c600.clock_hz == pytest.approx(280e12 / (1472 * 128))
    assert c600.clock_hz == pytest.approx(1.486e9, rel=1e-3)
    assert c600.peak_flops_per_s("float16") == pytest.approx(280e12)
    assert c600.peak_flops_per_s("float8_e4m3fnuz") == pytest.approx(560e12)
    assert c600.peak_flops_per_s("float32") == pytest.approx(70e12)
    assert (c600.num_tiles, c600.bytes_per_tile) == (1472, IPU21_BYTES_PER_TILE)
    assert c600.supported_dtypes == bow.supported_dtypes
    # ipu21 keeps Bow's clock; fp8 doubles its fp16 rate
    assert bow.clock_hz == 1.85e9 and bow.fp16_flops_per_tile_cycle == 128
    assert bow.flops_per_tile_cycle("float8_e5m2fnuz") == 256
    assert bow.flops_per_tile_cycle("float16") == 128 and bow.flops_per_tile_cycle("float32") == 32


def test_c600_card_has_no_streaming_memory():
    c600 = get_target("c600")
    assert c600.ipus_per_machine == 1
    assert capacity(c600, PINNED_HOST) == 0
    assert capacity(get_target("ipu21"), PINNED_HOST) == 64 * 2**30


def test_c600_out_of_streaming_memory_says_it_has_none():
    t = TensorType((1024,), "float32")
    program = Program("jit_f", (t,), (t,), [], (0,), (0,), input_kinds=(PINNED_HOST,),
                      output_kinds=(PINNED_HOST,))
    report = analyze(program, get_target("c600"))
    assert report.memory.streaming_memory_limit == 0
    assert "a PCIe card, C2 or C600, has no Streaming Memory" in \
        format_streaming_out_of_memory(report)


def _dot(dtype):
    def f(a, b):
        return jnp.dot(a.astype(dtype), b.astype(dtype), preferred_element_type=jnp.float32)
    return f


def test_fp8_product_runs_at_twice_the_fp16_rate():
    # [64, 32] @ [32, 16] on one tile. fp8: 16 units of 8 inputs a cycle, blocks 4 x 8 = 32
    # deep: one pass, 16 x 32 x 1 B of weights loaded at 8 B a cycle (64), then 64 rows of 4
    # cycles. fp16: blocks 16 deep, so two passes of 64 + 64 x 4, the 1x1 vertex restarting
    # its workers for the second (another input-channel group: 25 + 6 x 19 and 15 + 6 x 3, G-4).
    target = get_target("ipu21", 1)

    def dot_cycles(dtype):
        code = portable_artifact(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32),
                                 S((64, 32), dtype), S((32, 16), dtype))
        (row,) = [o for o in judge(code, target)[1].ops if o.kind == "dot_general"]
        return row.compute_cycles
    assert dot_cycles(F8) == V + 64 + 64 * 4
    assert dot_cycles(jnp.float16) == V + 2 * (64 + 64 * 4) + 139 + 33


@pytest.mark.parametrize("source,dest,cycles", [
    # 600 elements a tile on all 1472. float32 -> fp8: no auxiliary-pipeline instruction, 2
    # cycles an element (popops), 8 to a result vector: 75 vectors of 16 cycles, 13 a worker.
    ("float32", F8, V + 13 * W * 16),
    # float16 -> fp8: vectors of 8 at 2 cycles, below the loads and store they take (2 + 1)
    ("float16", F8, V + 13 * W * 3),
    # fp8 -> float32: 2 cycles an element, 2 to a vector: 300 vectors of 4
    (F8, "float32", V + 50 * W * 4),
    # fp8 -> float16: 1 cycle a vector of 4, below its load and store: 150 vectors of 2
    (F8, "float16", V + 25 * W * 2),
])
def test_casts_cost_what_popops_spends(source, dest, cycles):
    code = portable_artifact(lambda x: x.astype(dest), S((1472 * 600,), source))
    report = judge(code, get_target("ipu21"))[1]
    assert report.cycles.compute == cycles


def test_fp8_matmul_with_its_casts_beats_fp16():
    args = (S((2048, 2048), jnp.float16), S((2048, 2048), jnp.float16))
    target = get_target("ipu21")
    half = judge(portable_artifact(_dot(jnp.float16), *args), target)[1]
    eight = judge(portable_artifact(_dot(F8), *args), target)[1]
    casts = [o for o in eight.ops if o.kind == "convert"]
    assert len(casts) == 2
    # two fp16 -> fp8 casts of 2048^2 / 1472 = 2850 elements a tile: 357 vectors of 3
    assert all(o.cycles == V + math.ceil(357 / W) * W * 3 + SYNC for o in casts)
    # fp8's blocks are twice as deep: half the passes, and half the workers' restarts (G-4)
    assert eight.cycles.total < 0.65 * half.cycles.total


def test_c600_is_a_version_of_the_flag():
    proc = run_python("""
        import jax, jax_ipu
        d = jax.devices("ipu")[0]
        print(d.version, d.num_tiles)
        x = jax.jit(lambda a: a * 2)(jax.numpy.ones(4))
        print(jax_ipu.report(jax.jit(lambda a: a * 2).lower(x).compile()).target.clock_hz)
    """, env={"JAX_IPU_MODEL_VERSION": "c600"})
    version, tiles, clock = proc.stdout.split()
    assert (version, tiles) == ("c600", "1472")
    assert float(clock) == pytest.approx(280e12 / (1472 * 128))
