"""Tests of the IPU Model's memory: tile mapping, liveness, capacity edges, out-of-memory.

Expectations are hand-computed from the named constants in jax_ipu/model/targets.py."""

from __future__ import annotations

import inspect
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jax_ipu import config
from jax_ipu.compiler.program import read_program
from jax_ipu.errors import IpuConfigError, IpuOutOfMemoryError
from jax_ipu.model import analyze
from jax_ipu.model.code import code_per_tile
from jax_ipu.model.costs import OpCost
from jax_ipu.model.cycles import OpRow
from jax_ipu.model.ir import Op, TensorType
from jax_ipu.model.mapping import Layouts, Mapped, linear_mapping, tiles_used
from jax_ipu.model.targets import (
    AMP_WORKLIST_BYTES,
    CONTROL_CODE_BYTES_PER_STEP,
    CONTROL_CODE_BYTES_PER_TILE,
    EXCHANGE_CODE_BYTES_PER_INSTRUCTION,
    EXCHANGE_CODE_BYTES_PER_STEP,
    MIN_BYTES_PER_TILE,
    POINTER_BYTES,
    TENSOR_GRAIN_BYTES,
    VERTEX_CODE_BYTES_PER_KIND,
    VERTEX_DESCRIPTOR_BYTES,
    get_target,
)
from tests import _bert, _resnet50
from tests._lowering import judge, portable_artifact
from tests._subprocess import run_python

F32 = jnp.float32
# Code of a program made of one elementwise op: on every tile the skeleton and one step of
# control code; on the op's tiles its codelet and one vertex (a descriptor and a pointer for
# its operand and its result); no exchange.
CONTROL_ONLY = CONTROL_CODE_BYTES_PER_TILE + CONTROL_CODE_BYTES_PER_STEP
ONE_OP_CODE = CONTROL_ONLY + VERTEX_CODE_BYTES_PER_KIND + VERTEX_DESCRIPTOR_BYTES + \
    2 * POINTER_BYTES


def _spec(*shape, dtype=F32):
    return jax.ShapeDtypeStruct(shape, dtype)


def negate(x):
    return -x


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_linear_mapping_grain_and_minimum():
    assert tiles_used(4096, 1472) == 4096 // MIN_BYTES_PER_TILE
    assert tiles_used(4, 1472) == 1
    m = linear_mapping(100, 4, start=3)
    assert m.sum() == 104 and m[3] == 104  # one tile, whole grains
    m = linear_mapping(4 * 1000 * TENSOR_GRAIN_BYTES + 8, 4)
    assert list(m) == [1001 * 8, 1000 * 8, 1000 * 8, 1000 * 8]


def test_hand_computed_negate():
    # float32[1024] = 4096 B -> 32 tiles x 128 B; the result goes on the next 32 tiles. The
    # op's code sits on its 32 tiles, those of x.
    target = get_target("ipu2")
    r = analyze(read_program(portable_artifact(negate, _spec(1024))), target)
    m = r.memory
    assert ONE_OP_CODE == 8192 + 16 + 1024 + 16
    assert m.code_bytes_per_tile == ONE_OP_CODE
    assert m.max_tile_bytes == 128 + ONE_OP_CODE
    assert int((m.per_tile_bytes == 128 + ONE_OP_CODE).sum()) == 32
    assert int((m.per_tile_bytes == 128 + CONTROL_ONLY).sum()) == 32
    assert m.peak_bytes == 2 * 4096 + CONTROL_ONLY * 1472 + (ONE_OP_CODE - CONTROL_ONLY) * 32
    assert m.by_category["inputs"] == 4096 and m.by_category["outputs"] == 4096
    assert m.argument_bytes == 4096 and m.output_bytes == 4096
    assert m.tiles_out_of_memory == []


def test_donation_works_in_place():
    target = get_target("ipu2", 16)
    x = _spec(16 * 1024)
    kept = analyze(read_program(portable_artifact(negate, x)), target).memory
    donated = analyze(read_program(portable_artifact(negate, x, donate_argnums=0)), target).memory
    assert kept.max_tile_bytes == 2 * 4096 + ONE_OP_CODE
    assert donated.max_tile_bytes == 4096 + ONE_OP_CODE
    assert "donated inputs" in donated.by_category and "inputs" not in donated.by_category


def _capacity_cases():
    for version, full in (("ipu1", 1216), ("ipu2", 1472), ("ipu21", 1472)):
        for tiles in (4, 16, 100, full):
            yield version, tiles


@pytest.mark.parametrize("version,tiles", list(_capacity_cases()))
def test_capacity_edges(version, tiles):
    # negate keeps its input and writes a result of the same size on every tile:
    # per tile 2 * d + code, where d is the input's bytes per tile.
    target = get_target(version, tiles)
    limit = target.bytes_per_tile
    d = (limit - ONE_OP_CODE) // 2 // TENSOR_GRAIN_BYTES * TENSOR_GRAIN_BYTES
    fits = analyze(read_program(portable_artifact(negate, _spec(tiles * d // 4))), target)
    assert fits.memory.max_tile_bytes == 2 * d + ONE_OP_CODE <= limit
    assert fits.memory.tiles_out_of_memory == []
    d += TENSOR_GRAIN_BYTES
    over = analyze(read_program(portable_artifact(negate, _spec(tiles * d // 4))), target)
    assert over.memory.max_tile_bytes == 2 * d + ONE_OP_CODE > limit
    assert len(over.memory.tiles_out_of_memory) == tiles


@pytest.mark.parametrize("version", ["ipu1", "ipu2", "ipu21"])
def test_identity_holds_exactly_the_chip(version):
    target = get_target(version)
    per_tile = target.bytes_per_tile - CONTROL_CODE_BYTES_PER_TILE

    def identity(x):
        return x

    code = portable_artifact(identity, _spec(target.num_tiles * per_tile // 4))
    assert judge(code, target)[1].memory.max_tile_bytes == target.bytes_per_tile
    code = portable_artifact(identity, _spec(target.num_tiles * per_tile // 4 + 2))
    with pytest.raises(IpuOutOfMemoryError):
        judge(code, target)


def mlp(params, x):
    for w in params:
        x = jnp.tanh(x @ w)
    return x


def test_larger_batch_never_smaller_memory():
    target = get_target("ipu2")
    params = [_spec(256, 256)] * 3
    peaks, tiles = [], []
    for batch in (8, 32, 128, 512, 2048):
        m = analyze(read_program(portable_artifact(mlp, params, _spec(batch, 256))), target).memory
        peaks.append(m.peak_bytes)
        tiles.append(m.max_tile_bytes)
    assert peaks == sorted(peaks) and peaks[0] < peaks[-1]
    assert tiles == sorted(tiles)


def oversized(x, w):
    h = x @ w
    return jnp.tanh(h)


def test_out_of_memory_message_like_poplar():
    target = get_target("ipu2", 4)
    code = portable_artifact(oversized, _spec(512, 512), _spec(512, 512))
    with pytest.raises(IpuOutOfMemoryError) as err:
        judge(code, target)
    lines = str(err.value).splitlines()
    assert lines[0].startswith("Out of memory on tile ")
    assert lines[0].endswith("bytes used but tiles only have 638976 bytes of memory")
    assert lines[1].startswith("4 tile(s) out of memory")
    assert f"{__file__}:{_line_of(oversized, 'x @ w')}" in str(err.value)
    assert "argument 0 (x)" in str(err.value)
    for hint in ("activations", "float16", "more tiles", "donate",
                 "jax_ipu_available_memory_proportion"):
        assert hint in str(err.value)


def test_allow_out_of_memory_returns_the_report():
    target = get_target("ipu2", 4)
    code = portable_artifact(oversized, _spec(512, 512), _spec(512, 512))
    program, report = judge(code, target, allow_out_of_memory=True)
    assert report.memory.out_of_memory and len(report.memory.tiles_out_of_memory) == 4
    assert report.memory.max_tile_bytes > target.bytes_per_tile
    assert program.name == "jit_oversized"


def test_liveness_curve_and_report_dict():
    target = get_target("ipu2")
    r = analyze(read_program(portable_artifact(mlp, [_spec(256, 256)] * 2, _spec(64, 256))), target)
    m = r.memory
    assert len(m.liveness) >= 4
    assert max(p.bytes for p in m.liveness) == m.peak_bytes
    assert m.liveness[m.peak_step].bytes == m.peak_bytes
    assert m.peak_bytes == m.always_live_bytes + m.not_always_live_peak_bytes
    assert int(np.argmax(m.per_tile_bytes)) == m.max_tile
    d = json.loads(json.dumps(r.to_dict()))
    assert d["memory"]["fits"] is True
    assert len(d["memory"]["per_tile_bytes"]) == 1472
    assert d["target"]["bytes_per_tile"] == 638976
    assert {"total", "compute", "exchange", "sync"} <= set(d["cycles"])
    assert all(op["location"] for op in d["ops"])


def _judge_text(fn, *args, target, **kw):
    return analyze(read_program(portable_artifact(fn, *args, **kw)), target)


def test_views_are_memory_of_what_they_view():
    # c is a view of a and b: both stay alive while c is read, and c takes nothing itself
    def f(x, y, z):
        a, b = x * 2, y * 3
        c = jnp.concatenate([a, b])
        d = jnp.exp(z)  # read twice and costly: stored, not computed again in each reader
        return c.sum() + d.sum() + d.max()

    n = 1472 * 256
    m = _judge_text(f, _spec(n), _spec(n), _spec(n), target=get_target("ipu2")).memory
    # a, b and d live at once (and a scalar or two); nothing for c
    assert 3 * n * 4 <= m.not_always_live_peak_bytes < 3 * n * 4 + 64


def test_stencil_of_shifted_slices_fits_where_copies_would_not():
    # five shifted slices of a 2-D grid: as copies they would need 5 grids more. They are
    # views: the expression's result lives like u[1:-1, 1:-1], and each tile (2.78 rows of
    # 4096 of u) receives from its neighbours the row above and the row below its own, each
    # element once however many slices read it, into a buffer held while the expression runs
    # (Poplar's exchange writes them on the reading tile). So the peak is the result and
    # 2 x 16 KiB a tile, not the result alone (before: received data held no memory).
    def jacobi(u):
        return 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]) - u[1:-1, 1:-1]

    target = get_target("ipu2")
    side = 4096  # 64 MiB of float32
    m = _judge_text(jacobi, _spec(side, side), target=target).memory
    grid, result = side * side * 4, (side - 2) ** 2 * 4
    halo = 2 * side * 4
    received = m.by_category["received"]
    # sampled (one element of each run of 128, at a moving offset): a row of 4096 holds 32
    # samples, and a tile's partial first and last rows one more or one fewer, so within 6%
    # (every element judged: 32,752 B a tile; sampled: 34,304)
    assert abs(received / 1472 - halo) <= 0.06 * halo
    assert m.not_always_live_peak_bytes == result + received < 2 * grid
    on_tile = {c.name: c.bytes_on_tile for c in m.top_contributors}
    assert abs(on_tile["subtract operands received from other tiles"] - halo) <= 0.06 * halo
    assert not m.out_of_memory


def test_a_view_the_program_returns_is_a_buffer_of_its_own():
    # An executable's output is an allocation of its own: a pad, transpose or broadcast the
    # program returns is written into one (before: it took no bytes, a view of its operand).
    # On 16 tiles of an ipu2: pad(float32[1024], 1) is 1026 floats, 4104 B in 8 B grains,
    # 32 or 33 grains a tile (the busiest tile is one with 32); x.T of float32[64, 64] is
    # 16384 B, 1024 a tile; zeros((1024,)) and a reshape of a kept float32[1024] argument
    # 4096 B, 256 a tile
    target = get_target("ipu2", 16)
    for fn, args, nbytes, busiest in (
            (lambda x: jnp.pad(x, 1), [_spec(1024)], 4104, 32 * 8),
            (lambda x: x.T, [_spec(64, 64)], 16384, 1024),
            (lambda x: jnp.zeros((1024,)), [_spec(4)], 4096, 256),
            (lambda x: x.reshape(32, 32), [_spec(1024)], 4096, 256)):  # x stays the caller's
        m = _judge_text(fn, *args, target=target).memory
        assert m.by_category["outputs"] == nbytes
        outputs = [c for c in m.top_contributors if c.category == "outputs"]
        assert [(c.total_bytes, c.bytes_on_tile) for c in outputs] == [(nbytes, busiest)]
    # a reshape of a temporary that dies there is that temporary: no copy
    m = _judge_text(lambda x: (x * 2).reshape(32, 32), _spec(1024), target=target).memory
    assert m.by_category["outputs"] == 4096 and "temporaries" not in m.by_category


def mlp_loss(ws, x, remat):
    def layer(x, w):
        return jnp.tanh(jnp.sin(x @ w) * 2)
    if remat:
        layer = jax.checkpoint(layer)
    for w in ws:
        x = layer(x, w)
    return (x ** 2).sum()


def test_checkpoint_keeps_only_layer_inputs_alive():
    # 8 layers of float32[4096,512] activations (8 MiB each). Without remat the backward pass
    # needs two residuals a layer; with jax.checkpoint only each layer's input, and the
    # recomputation (after an optimization_barrier) lives briefly in the backward pass.
    ws, x = [_spec(512, 512)] * 8, _spec(4096, 512)
    act = 4096 * 512 * 4
    plain, remat = (_judge_text(lambda ws, x, r=r: jax.grad(mlp_loss)(ws, x, r), ws, x,
                                target=get_target("ipu2")).memory for r in (False, True))
    # two residuals a layer, less the one the peak step's weight-gradient matmul last reads
    assert plain.by_category["temporaries"] >= 15 * act
    assert remat.by_category["temporaries"] <= (8 + 1.5) * act
    assert remat.peak_bytes < plain.peak_bytes - 6 * act


def test_available_memory_proportion_decides_what_fits():
    # (656 x 656) @ (656 x 656) float32 on 16 tiles: operands and result take 315 KiB of
    # each tile; matmul temporaries up to 0.6 of a tile overflow it, up to 0.3 do not
    code = portable_artifact(oversized, _spec(656, 656), _spec(656, 656))
    with pytest.raises(IpuOutOfMemoryError) as err:
        judge(code, get_target("ipu2", 16, 0.6))
    assert "jax_ipu_available_memory_proportion (now 0.6)" in str(err.value)
    program, fits = judge(code, get_target("ipu2", 16, 0.3))
    assert not fits.memory.out_of_memory
    assert fits.memory.max_tile_bytes <= get_target("ipu2").bytes_per_tile
    too_big = judge(code, get_target("ipu2", 16, 0.6), allow_out_of_memory=True)[1]
    assert fits.cycles.total > too_big.cycles.total


def test_available_memory_proportion_flag_reaches_the_target():
    proc = run_python("""
        import jax, jax_ipu
        from jax_ipu import config
        from jax_ipu.runtime.client import Settings
        print(config.source("jax_ipu_available_memory_proportion"),
              Settings.from_config().target.available_memory_proportion)
        try:
            jax.config.update("jax_ipu_available_memory_proportion", 1.5)
        except Exception as e:
            print("ERROR", e)
    """, env={"JAX_IPU_AVAILABLE_MEMORY_PROPORTION": "0.25"})
    lines = proc.stdout.splitlines()
    assert lines[0] == "env 0.25"
    assert lines[1].startswith("ERROR Invalid value 1.5 for jax_ipu_available_memory_proportion")
    assert "greater than 0 and at most 1" in lines[1]


@pytest.mark.parametrize("bad", ["0", "-0.5", "1.01", "most"])
def test_available_memory_proportion_refuses_values_outside_0_1(bad):
    flag = config.BY_NAME["jax_ipu_available_memory_proportion"]
    assert flag.default == 0.6 and flag.parse("1") == 1.0 and flag.parse("0.3") == 0.3
    with pytest.raises(IpuConfigError, match="greater than 0 and at most 1"):
        flag.parse(bad)
    with pytest.raises(IpuConfigError, match="outside"):
        get_target("ipu2", None, float(bad) if bad != "most" else 2.0)


def _code(fn, *args, tiles=None):
    return analyze(read_program(portable_artifact(fn, *args)),
                   get_target("ipu2", tiles)).memory.by_category


def test_vertex_state_is_a_descriptor_and_a_pointer_per_field():
    # a * b + c fused into one vertex on each of the 16 tiles of float32[16, 32]: fields a,
    # b, c and the result
    code = _code(lambda a, b, c: a * b + c, *[_spec(16, 32)] * 3, tiles=16)
    assert code["vertex state"] == 16 * (VERTEX_DESCRIPTOR_BYTES + 4 * POINTER_BYTES) == 384
    assert code["vertex code"] == 16 * 2 * VERTEX_CODE_BYTES_PER_KIND == 32768  # multiply, add


def test_exchange_code_is_set_up_and_an_instruction_per_message():
    # x.T + x on 16 tiles: one exchange step on each, receiving and sending once
    code = _code(lambda x: x.T + x, _spec(64, 64), tiles=16)
    per_tile = EXCHANGE_CODE_BYTES_PER_STEP + 2 * EXCHANGE_CODE_BYTES_PER_INSTRUCTION
    assert code["exchange code"] == 16 * per_tile == 16 * 24


def test_amp_vertex_carries_worklists_and_receives_from_each_holder():
    # (64 x 64) @ (64 x 64) fp16 on 16 tiles, split 4 x 4: a tile receives its row block
    # (1.5 KiB it lacks) from the 3 others sharing it, its column block likewise, and
    # multicasts its own piece: 7 instructions in one exchange step. Its vertex holds
    # pointers to the two operands and the result, and a worklist entry per worker.
    code = _code(lambda a, b: a @ b, _spec(64, 64, dtype=jnp.float16),
                 _spec(64, 64, dtype=jnp.float16), tiles=16)
    assert code["exchange code"] == 16 * (EXCHANGE_CODE_BYTES_PER_STEP +
                                          7 * EXCHANGE_CODE_BYTES_PER_INSTRUCTION) == 16 * 44
    assert code["vertex state"] == 16 * (VERTEX_DESCRIPTOR_BYTES + 3 * POINTER_BYTES +
                                         6 * AMP_WORKLIST_BYTES) == 16 * 56


def test_identical_ops_share_their_code():
    # two products alike in shapes and plan compile once (Poplar outlines them, G-7): the
    # second adds only a call to the control program
    a = _spec(64, 64, dtype=jnp.float16)
    one = _code(lambda x, w: x @ w, a, a, tiles=16)
    two = _code(lambda x, y, w: (x @ w, y @ w), a, a, a, tiles=16)
    assert two["vertex state"] == one["vertex state"]
    assert two["exchange code"] == one["exchange code"]
    # the first product's steps take CONTROL_CODE_BYTES_PER_STEP of control code on each
    # tile, the second's a call
    assert one["control code"] == 16 * (CONTROL_CODE_BYTES_PER_TILE +
                                        CONTROL_CODE_BYTES_PER_STEP) == 16 * 8208
    assert two["control code"] == one["control code"] + 16 * POINTER_BYTES


def test_published_resnet50_training_fits_one_ipu_and_needs_its_recomputation():
    # Graphcore trains ResNet-50 on one Mk2 IPU per replica at micro-batch 18 with
    # recomputation and availableMemoryProportion 0.16 (G-8): the model must judge it to fit;
    # without the recomputation it must not.
    published = _resnet50.judged(18, True, 0.16).memory
    assert not published.out_of_memory
    assert published.max_tile_bytes > 0.75 * 638_976  # a near fit, not an empty chip
    assert _resnet50.judged(18, False, 0.16).memory.out_of_memory


def test_published_bert_large_squad_inference_fits_one_ipu_and_its_training_does_not():
    # Graphcore runs BERT-Large SQuAD inference (24 layers, hidden 1024, sequence 128,
    # micro-batch 1, fp16) on one IPU (G-9: layers_per_ipu [24]): its 334M fp16 weights, 668
    # MB of the chip's 941 MB, stay on the device; the model must judge it to fit. Its SQuAD
    # training (sequence 384, micro-batch 4) is published on 8 IPUs: weights, gradients and
    # Adam's two moments on one IPU must not fit.
    inference = _bert.judged(_bert.LARGE, 1, 128, training=False).memory
    assert not inference.out_of_memory
    assert inference.always_live_bytes > 0.7 * 1472 * 638_976  # the weights: a near fit
    assert _bert.judged(_bert.LARGE, 4, 384, training=True).memory.out_of_memory


def test_code_goes_on_the_tiles_an_op_says_it_runs_on():
    # the hook for programs that place their own work: an op's explicit tiles carry its code
    t = TensorType((8,), "float32")
    op = Op("stablehlo.add", (t, t), (t,), (1, 2), (3,))
    row = OpRow(op, "elementwise", OpCost(compute_cycles=10, syncs=1, tiles=2, on_tiles=(5, 9)))
    code = code_per_tile([row], get_target("ipu2", 16))
    assert list(np.flatnonzero(code["vertex state"])) == [5, 9]
    assert code["vertex state"][5] == VERTEX_DESCRIPTOR_BYTES + 3 * POINTER_BYTES


def test_a_value_placed_by_the_program_is_read_where_it_lies():
    layouts = Layouts(16)
    layouts.assign(7, Mapped.from_tiles(np.array([3, 3, 4, 4])))
    tiles, _ = layouts.of(7, TensorType((4,), "float32")).locate(np.arange(4))
    assert list(tiles) == [3, 3, 4, 4] and not layouts.planned(7)


def test_sampled_elements_do_not_line_up_with_a_planned_layout():
    # Beyond EXACT_ELEMENTS an elementwise op is judged on one element per run of `step`. A
    # fixed stride lined up with a gradient's layout (a product's plan): in an MLP's momentum
    # update, 0.9 * m + g on float32[1024, 4096], every 32nd element of g fell on a few tiles,
    # and the add was judged as gathering from them (82,396 and 228,470 cycles for the two
    # updates, against 7,604 with every element judged). A moving offset samples every block:
    # each update's cycles are the exact count's (EXACT_ELEMENTS raised past the size)
    # within 10% (the sample's own error: 3 and 6% here).
    from jax_ipu.model import mapping

    def loss(w1, w2, x, y):
        return jnp.mean((jax.nn.gelu(x @ w1) @ w2 - y) ** 2)

    def f(w1, w2, m1, m2, x, y):
        g1, g2 = jax.grad(loss, argnums=(0, 1))(w1, w2, x, y)
        return 0.9 * m1 + g1, 0.9 * m2 + g2

    w1, w2 = _spec(1024, 4096), _spec(4096, 1024)
    args = (w1, w2, w1, w2, _spec(256, 1024), _spec(256, 1024))
    target = get_target("ipu2")

    def update_cycles(exact_elements):
        saved, mapping.EXACT_ELEMENTS = mapping.EXACT_ELEMENTS, exact_elements
        try:
            report = _judge_text(f, *args, target=target)
        finally:
            mapping.EXACT_ELEMENTS = saved
        return [r.cycles for r in report.ops if r.kind == "add" and "4096" in r.shapes]

    assert 1024 * 4096 > mapping.EXACT_ELEMENTS  # sampled, not judged element by element
    sampled, exact = update_cycles(mapping.EXACT_ELEMENTS), update_cycles(1 << 40)
    assert len(exact) >= 2
    for s, e in zip(sampled, exact, strict=True):
        assert abs(s - e) <= 0.1 * e
