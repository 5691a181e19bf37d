"""Tests of the model reading a program as Poplar's compiler sees it: static copies, fused
expressions, and a judgement linear in the program. Figures hand-computed from targets.py."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_ipu.compiler.program import read_program
from jax_ipu.model import analyze
from jax_ipu.model.targets import (
    EXCHANGE_BYTES_PER_TILE_CYCLE,
    EXCHANGE_SETUP_CYCLES,
    FILL_CYCLES_PER_REGION,
    LOCAL_BYTES_PER_TILE_CYCLE,
    SIMPLE_CYCLES_PER_VECTOR,
    SYNC_CYCLES_PER_STEP,
    TRANSCENDENTAL_CYCLES_PER_VECTOR,
    VERTEX_OVERHEAD_CYCLES,
    WORKER_THREADS_PER_TILE,
    get_target,
)

V, SYNC, SETUP = VERTEX_OVERHEAD_CYCLES, SYNC_CYCLES_PER_STEP, EXCHANGE_SETUP_CYCLES
W, SIMPLE, TRANSCENDENTAL = WORKER_THREADS_PER_TILE, SIMPLE_CYCLES_PER_VECTOR, \
    TRANSCENDENTAL_CYCLES_PER_VECTOR
TARGET = get_target("ipu2")
F32 = jnp.float32


def _spec(*shape, dtype=F32):
    return jax.ShapeDtypeStruct(shape, dtype)


def _report(fn, *args, **jit_kwargs):
    text = jax.jit(fn, **jit_kwargs).lower(*args).as_text(debug_info=True)
    return analyze(read_program(text), TARGET)


def _on(platform, *arrays):
    return [jax.device_put(a, jax.devices(platform)[0]) for a in arrays]


def _slots(vectors: int) -> int:
    """Vector slots of the busiest worker's turns: the six workers issue in turn."""
    return math.ceil(vectors / W) * W


def _costed(report):
    return [o for o in report.ops if o.cycles]


# --- static copies -----------------------------------------------------------------------------
def _update_at(u, v):
    return u.at[16:1008].set(v)


def _update_dus(u, v):
    return lax.dynamic_update_slice(u, v, (16,))


def test_constant_index_update_is_a_static_copy_hand_computed():
    # u float32[1024] lives linearly on 32 tiles, 32 elements each (u[32t:32t+32] on tile t);
    # v float32[992] on 31 tiles, 32 each. v[r] goes to u[r + 16]: destination tile t gets
    # 16 elements from v's tile t - 1 (exchanged) and 16 from its own tile t (copied on the
    # tile): it writes 128 B in 2 regions, 64 B of them received.
    copy = V + 2 * FILL_CYCLES_PER_REGION + 2 * 128 / LOCAL_BYTES_PER_TILE_CYCLE
    exchange = SETUP + 64 / EXCHANGE_BYTES_PER_TILE_CYCLE
    assert copy + exchange + 2 * SYNC == 560
    for form in (_update_at, _update_dus):
        (row,) = _costed(_report(form, _spec(1024), _spec(992)))
        assert row.op_class == "static_copy" and row.plan == "static copy"
        assert row.note.startswith("static copy: constant indices (start [16])")
        assert (row.compute_cycles, row.exchange_cycles, row.sync_cycles) == \
            (copy, exchange, 2 * SYNC)


def test_static_copy_numbers_match_cpu():
    u = np.arange(1024, dtype=np.float32)
    v = -np.arange(992, dtype=np.float32)
    for form in (_update_at, _update_dus):
        np.testing.assert_array_equal(jax.jit(form)(*_on("ipu", u, v)),
                                      jax.jit(form)(*_on("cpu", u, v)))


def test_constant_index_slice_is_a_view():
    # dynamic_slice at constant starts reads u[16:1008] where it lies: the multiply runs on
    # u's tiles (32 elements, 16 vectors a tile) and nothing crosses the exchange.
    report = _report(lambda u: lax.dynamic_slice(u, (16,), (992,)) * 2, _spec(1024))
    (sliced,) = [o for o in report.ops if o.kind == "dynamic_slice"]
    assert sliced.op_class == "view" and sliced.cycles == 0
    (row,) = _costed(report)
    assert row.cycles == V + _slots(16) * 2 + SYNC  # a load and a store outweigh 1 ALU step


def test_update_at_run_time_index_is_still_planned():
    report = _report(lambda u, v, i: lax.dynamic_update_slice(u, v, (i,)), _spec(1024),
                     _spec(992), _spec(dtype=jnp.int32))
    (row,) = [o for o in report.ops if o.kind == "dynamic_update_slice"]
    assert row.op_class == "dynamic_update_slice" and "static" not in row.note


def _stencil(u):
    return u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]


def test_stencil_update_forms_cost_what_pad_costs():
    # issue 25 item 1: on float32[2000, 2000] the .at[].set and dynamic_update_slice forms of
    # a stencil step within 1.5x of the pad form, in cycles and in the busiest tile's bytes
    forms = {
        "at": lambda u: u.at[1:-1, 1:-1].set(u[1:-1, 1:-1] + 0.1 * _stencil(u)),
        "dus": lambda u: lax.dynamic_update_slice(u, u[1:-1, 1:-1] + 0.1 * _stencil(u),
                                                  (1, 1)),
        "pad": lambda u: jnp.pad(u[1:-1, 1:-1] + 0.1 * _stencil(u), 1),
    }
    reports = {k: _report(f, _spec(2000, 2000)) for k, f in forms.items()}
    pad = reports.pop("pad")
    for report in reports.values():
        assert report.cycles.total <= 1.5 * pad.cycles.total
        assert report.memory.max_tile_bytes <= 1.5 * pad.memory.max_tile_bytes
        assert not report.memory.out_of_memory
        assert any(o.op_class == "static_copy" for o in report.ops)


def _heat3d(form):
    def step(u):
        c = u[1:-1, 1:-1, 1:-1]
        new = c + 0.1 * (u[2:, 1:-1, 1:-1] + u[:-2, 1:-1, 1:-1] + u[1:-1, 2:, 1:-1]
                         + u[1:-1, :-2, 1:-1] + u[1:-1, 1:-1, 2:] + u[1:-1, 1:-1, :-2] - 6 * c)
        return u.at[1:-1, 1:-1, 1:-1].set(new) if form == "at" else jnp.pad(new, 1)
    return lambda u: lax.fori_loop(0, 5, lambda i, u: step(u), u)


def test_heat_equation_loop_forms_cost_alike():
    # the 3D heat step inside fori_loop with donated state: .at[].set within 1.5x of pad
    at, pad = (_report(_heat3d(f), _spec(96, 96, 96), donate_argnums=0) for f in ("at", "pad"))
    assert at.cycles.total <= 1.5 * pad.cycles.total
    assert at.memory.max_tile_bytes <= 1.5 * pad.memory.max_tile_bytes
    assert [o.executions for o in at.ops if o.op_class == "static_copy"] == [5]


# --- fused expressions -------------------------------------------------------------------------
def test_scalar_made_for_a_broadcast_is_computed_inside_the_expression():
    # x * (s * 2 + 1): the scalar's multiply and add join the vector multiply, one compute
    # set; each of the 6 workers works the scalar out once (2 ALU steps in its turn). x
    # float32[1024] is 32 elements (16 vectors) a tile; a vector's 2 accesses (x in, result
    # out) outweigh its one multiply.
    (row,) = _costed(_report(lambda x, s: x * (s * 2 + 1), _spec(1024), _spec()))
    assert row.note == "fused: 3 ops, 1 compute set"
    assert row.cycles == V + W * 2 * SIMPLE + _slots(16) * 2 + SYNC == 328


_SAME_TYPE_CONVERT = """
func.func public @main(%arg0: tensor<64xi32>) -> tensor<64xi32> {
  %c = stablehlo.constant dense<1> : tensor<64xi32>
  %0 = stablehlo.add %arg0, %c : tensor<64xi32>
  %1 = stablehlo.convert %0 : tensor<64xi32>
  %c3 = stablehlo.constant dense<3> : tensor<64xi32>
  %2 = stablehlo.multiply %1, %c3 : tensor<64xi32>
  return %2 : tensor<64xi32>
}
"""


def test_conversion_to_its_own_type_is_nothing():
    # XLA's simplifier removes it; the add reads through it into the multiply. int32[64] is
    # on 2 tiles (256 B, 128 B a tile at least), 32 elements a tile, one a vector (integer
    # ops are scalar).
    # (jax writes such conversions when a weakly typed index becomes a strong one)
    report = analyze(read_program(_SAME_TYPE_CONVERT), TARGET)
    (row,) = _costed(report)
    assert row.fused == ["add", "convert"] and row.note == "fused: 2 ops, 1 compute set"
    # x and the two splat constants read, the result stored: 4 accesses a vector
    assert row.cycles == V + _slots(32) * 4 + SYNC


def _residual(n):
    def chain(a):
        for _ in range(n):
            a = a + jnp.cos(a)
        return a
    return chain


def test_residual_chain_of_200_is_one_expression():
    # issue 29 item 4: the judgement is linear in the program (the fusion roots were found by
    # walking every path: exponential in the depth). float32[1000] is on 31 tiles (4000 B at
    # 128 B a tile at least), 33 elements (17 vectors) on the busiest; each vector runs 200
    # adds and 200 cosines.
    (row,) = _costed(_report(_residual(200), _spec(1000)))
    assert row.note == "fused: 400 ops, 1 compute set"
    assert row.cycles == V + _slots(17) * 200 * (SIMPLE + TRANSCENDENTAL) + SYNC == 32680


def test_residual_chain_of_200_compiles_and_matches_cpu():
    a = np.linspace(-1, 1, 257, dtype=np.float32)
    np.testing.assert_allclose(jax.jit(_residual(200))(*_on("ipu", a)),
                               jax.jit(_residual(200))(*_on("cpu", a)), rtol=1e-6)


def test_twelve_stacked_gelus_are_one_expression():
    # jax.nn.gelu (tanh form) is 9 computing ops: 6 multiplies, 2 adds and a tanh, 16 ALU
    # steps a vector; twelve of them on float32[1000] (17 vectors on the busiest tile).
    def gelus(x):
        for _ in range(12):
            x = jax.nn.gelu(x)
        return x
    (row,) = _costed(_report(gelus, _spec(1000)))
    assert row.note == "fused: 108 ops, 1 compute set"
    assert row.cycles == V + _slots(17) * 12 * (8 * SIMPLE + TRANSCENDENTAL) + SYNC == 3736
