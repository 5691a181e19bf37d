"""Collectives XLA's SPMD partitioner inserts into sharded jax.jit programs: read from the
partitioned HLO, costed like the program's own collectives, and counted in the report.

The reader is tested on hand-written HLO; whole programs run in children with 4 IPU Models."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import pytest
from jaxlib import _hlo

from jax_ipu.compiler.judge import PARTITIONER_NOTE, judge_partitioned
from jax_ipu.compiler.partitioned import (
    entry_result_types,
    inserted_collectives,
    read_collectives,
)
from jax_ipu.model import add_collectives, analyze, get_target
from jax_ipu.model.collectives import plan_collective
from jax_ipu.model.ir import Op, Program, SourceLocation, TensorType
from jax_ipu.model.targets import (
    EXCHANGE_SETUP_CYCLES,
    IPU2_CLOCK_HZ,
    IPU2_LINK_BYTES_PER_S,
    IPU2_LINKS_PER_NEIGHBOUR,
    IPU_LINK_SYNC_S_PER_HOP,
    SYNC_CYCLES_PER_STEP,
)
from tests._subprocess import run_python

# cycles per step over IPU-Links: a global sync over one hop, then the chip's sync and exchange
# set-up
LATENCY = IPU_LINK_SYNC_S_PER_HOP * IPU2_CLOCK_HZ + SYNC_CYCLES_PER_STEP + EXCHANGE_SETUP_CYCLES
# Bytes per cycle, one direction, to a ring neighbour in the same M2000.
MACHINE_RATE = IPU2_LINKS_PER_NEIGHBOUR * IPU2_LINK_BYTES_PER_S / IPU2_CLOCK_HZ

# What XLA:CPU prints for a partitioned program (trimmed): a counted loop whose body
# all-reduces and, inside a fusion, permutes; then an all-gather with no metadata. XLA's own
# parser turns it into the HloModuleProto the reader takes (proto() below).
HLO_TEXT = """\
HloModule jit_step, entry_computation_layout={(f32[2,4]{1,0})->f32[8,4]{1,0}}, num_partitions=4

FileNames
1 "/home/user/train.py"

FunctionNames
1 "step"

FileLocations
1 {file_name_id=1 function_name_id=1 line=12 end_line=12 column=4 end_column=4}

StackFrames
1 {file_location_id=1 parent_frame_id=1}


%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add.1 = f32[] add(%x, %y)
}

%fused (p: f32[2,4]) -> f32[2,4] {
  %p = f32[2,4]{1,0} parameter(0)
  ROOT %cp = f32[2,4]{1,0} collective-permute(%p), channel_id=2, \
source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
}

%body (t: (s32[], f32[2,4])) -> (s32[], f32[2,4]) {
  %t = (s32[], f32[2,4]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %v = f32[2,4]{1,0} get-tuple-element(%t), index=1
  %ar = f32[2,4]{1,0} all-reduce(%v), channel_id=1, replica_groups=[2,2]<=[4], \
use_global_device_ids=true, to_apply=%add, \
metadata={op_name="jit(step)/while/body/reduce_sum" stack_frame_id=1}
  %f = f32[2,4]{1,0} fusion(%ar), kind=kLoop, calls=%fused
  ROOT %out = (s32[], f32[2,4]{1,0}) tuple(%i, %f)
}

%cond (t.1: (s32[], f32[2,4])) -> pred[] {
  %t.1 = (s32[], f32[2,4]{1,0}) parameter(0)
  ROOT %c = pred[] constant(true)
}

ENTRY %main (x: f32[2,4]) -> f32[8,4] {
  %x = f32[2,4]{1,0} parameter(0), sharding={devices=[4,1]<=[4]}
  %c0 = s32[] constant(0)
  %init = (s32[], f32[2,4]{1,0}) tuple(%c0, %x)
  %w = (s32[], f32[2,4]{1,0}) while(%init), condition=%cond, body=%body, \
metadata={op_name="jit(step)/while" stack_frame_id=1}, backend_config={"known_trip_count":{"n":"5"}}
  %v.1 = f32[2,4]{1,0} get-tuple-element(%w), index=1
  ROOT %ag = f32[8,4]{1,0} all-gather(%v.1), channel_id=3, replica_groups=mesh['d'=4] {'d'}, \
dimensions={0}, use_global_device_ids=true
}
"""
F32 = TensorType((2, 4), "float32")


def proto(text: str) -> bytes:
    """The serialized HloModuleProto of HLO text, as XLA's parser makes it."""
    return _hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto()


HLO = proto(HLO_TEXT)


def test_reader_keeps_collectives_and_the_loops_that_repeat_them():
    loop, gather = read_collectives(HLO)
    assert loop.kind == "while" and loop.trip_count == 5
    cond, body = loop.regions
    assert cond.ops == []
    reduce, permute = body.ops
    assert reduce.kind == "all_reduce" and reduce.operands == (F32,) == reduce.results
    assert reduce.attributes["replica_groups"] == [[0, 1], [2, 3]]
    assert reduce.location == SourceLocation("/home/user/train.py", 12, "step",
                                             "jit(step)/while/body/reduce_sum")
    assert [o.kind for o in reduce.regions[0].ops] == ["add"]  # the combining body
    # The fusion has no metadata of its own: its collective takes the enclosing loop's line.
    assert permute.kind == "collective_permute" and permute.location.line == 12
    assert permute.attributes["source_target_pairs"] == [[0, 1], [1, 2], [2, 3], [3, 0]]
    assert gather.kind == "all_gather" and gather.results == (TensorType((8, 4), "float32"),)
    assert gather.attributes["replica_groups"] == [[0, 1, 2, 3]]
    assert gather.location.file is None


@pytest.mark.parametrize("text, groups", [
    ("{{0,1},{2,3}}", [[0, 1], [2, 3]]),
    ("{}", []),  # none named: every device
    ("[2,4]<=[8]", [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ("[4,2]<=[2,4]T(1,0)", [[0, 4], [1, 5], [2, 6], [3, 7]]),
    # Mesh devices are numbered row-major: the group holds those differing along the axes.
    ("mesh['a'=2,'b'=2] {'b'}", [[0, 1], [2, 3]]),
    ("mesh['a'=2,'b'=2] {'a'}", [[0, 2], [1, 3]]),
    # device_ids lists which device sits at each mesh position (here the transpose).
    ("mesh['a'=2,'b'=2], device_ids=([2,2]T(1,0)) {'b'}", [[0, 2], [1, 3]]),
    ("mesh['a'=2,'b'=2], device_ids=(0,2,1,3) {'b'}", [[0, 2], [1, 3]]),
    ("mesh['a'=2,'b'=2], device_ids=(3,2,1,0) {'a'}", [[3, 1], [2, 0]]),
    # "x":(p)s is the middle factor of x = [p, s, rest]: (1)2 the major half, (2)2 the minor.
    ("mesh['x'=4,'y'=2] {'x':(1)2}", [[0, 4], [1, 5], [2, 6], [3, 7]]),
    ("mesh['x'=4,'y'=2] {'x':(2)2}", [[0, 2], [1, 3], [4, 6], [5, 7]]),
    ("mesh['x'=4,'y'=2] {'y','x':(2)2}", [[0, 2, 1, 3], [4, 6, 5, 7]]),
])
def test_replica_group_forms(text, groups):
    devices = 8 if "8" in text or "'x'=4" in text else 4
    module = proto(f"""\
HloModule m, num_partitions={devices}

ENTRY %main (x: f32[2]) -> f32[2] {{
  %x = f32[2]{{0}} parameter(0)
  ROOT %a = f32[2]{{0}} all-to-all(%x), channel_id=1, replica_groups={text}, dimensions={{0}}
}}
""")
    (op,) = read_collectives(module)
    assert op.kind == "all_to_all" and op.attributes["replica_groups"] == groups


def test_collectives_of_the_programs_own_lines_are_not_read_twice():
    # A shard_map psum at train.py:12 is in the StableHLO and, again, in the partitioned HLO.
    psum = Op("stablehlo.all_reduce", (F32,), (F32,),
              location=SourceLocation("/home/user/train.py", 12, "step", "reduce_sum"))
    program = Program("jit_step", (F32,), (F32,), [psum], num_partitions=4)
    loop, gather = inserted_collectives(program, HLO)
    # Only the all-reduce is its: the permute from the same line is another primitive.
    assert [o.kind for o in loop.regions[1].ops] == ["collective_permute"]
    assert gather.kind == "all_gather"


def _report():
    add = Op("stablehlo.add", (F32, F32), (F32,), (0, 1), (2,),
             location=SourceLocation("/home/user/train.py", 12, "step", "add"))
    program = Program("jit_step", (F32, F32), (F32,), [add], (0, 1), (2,), num_partitions=4)
    return analyze(program, get_target("ipu2"))


def test_added_collectives_are_costed_and_counted_like_the_programs_own():
    before = _report()
    after = add_collectives(before, read_collectives(HLO), PARTITIONER_NOTE)
    added = [o for o in after.ops if PARTITIONER_NOTE in o.note]
    assert [o.kind for o in added] == ["all_reduce", "collective_permute", "all_gather"]
    # Rows follow the row of their source line; one with no line goes last.
    assert [o.kind for o in after.ops] == ["add", "all_reduce", "collective_permute",
                                           "all_gather"]
    reduce, permute, gather = added
    assert (reduce.executions, permute.executions, gather.executions) == (5, 5, 1)
    target = after.target
    assert target.num_ipus == 4
    for row, op in zip(added, [*read_collectives(HLO)[0].regions[1].ops,
                               read_collectives(HLO)[1]], strict=True):
        plan = plan_collective(op, target)
        assert row.exchange_cycles == pytest.approx(plan.cycles * row.executions)
        assert row.link_bytes == plan.link_bytes * row.executions
        assert row.sync_cycles == target.sync_cycles * row.executions
    # A group of 2 IPUs sums by one exchange of the whole 32 bytes; the gather's ring sends
    # 3 of its 4 shares of 128 bytes.
    assert reduce.link_bytes == 5 * 32 and gather.link_bytes == 96
    assert "over 2 IPUs x 2 groups" in reduce.note and "over 4 IPUs" in gather.note
    assert after.cycles.exchange == pytest.approx(
        before.cycles.exchange + sum(o.exchange_cycles for o in added))
    assert after.cycles.sync == before.cycles.sync + sum(o.sync_cycles for o in added)
    assert after.cycles.total == pytest.approx(sum(o.cycles for o in after.ops))
    assert after.flops == before.flops + reduce.flops and reduce.flops > 0
    assert after.seconds == pytest.approx(after.cycles.total / target.clock_hz)
    assert after.memory is before.memory  # memory stays the judged program's


def test_unreadable_partitioned_program_warns_and_keeps_the_report():
    before = _report()
    for broken in (b"HloModule broken\n", HLO[:len(HLO) // 2], b""):
        after = judge_partitioned(Program("jit_step", (), (), [], num_partitions=4), before,
                                  broken)
        assert after.ops == before.ops and after.cycles == before.cycles
        assert any("could not be read" in w for w in after.warnings)


def test_per_device_outputs_are_read_from_the_entry_signature():
    module = proto("""\
HloModule m

ENTRY %main.4_spmd (param: f32[11,1], p2: s32[]) -> (f32[11,1], pred[], token[]) {
  %param = f32[11,1]{1,0} parameter(0)
  %p2 = s32[] parameter(1)
  %c = pred[] constant(true)
  %t = token[] after-all()
  ROOT %r = (f32[11,1]{1,0}, pred[], token[]) tuple(%param, %c, %t)
}
""")
    assert entry_result_types(module) == (TensorType((11, 1), "float32"),
                                          TensorType((), "bool"), TensorType((), "token"))
    with pytest.raises(ValueError, match="no ENTRY"):
        entry_result_types(b"")


MLP = """
import json
import jax, jax.numpy as jnp, numpy as np
import jax_ipu
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

def loss(w, x):
    return jnp.mean(jnp.tanh(x @ w) ** 2)

def sgd_step(w, x):
    return w - 0.1 * jax.grad(loss)(w, x)

def run(devices):
    mesh = Mesh(np.array(devices), ("d",))
    rng = np.random.default_rng(0)
    x = jax.device_put(rng.normal(size=(64, 256)).astype(np.float32),
                       NamedSharding(mesh, P("d")))
    w = jax.device_put(rng.normal(size=(256, 128)).astype(np.float32) / 16,
                       NamedSharding(mesh, P()))
    compiled = jax.jit(sgd_step).lower(w, x).compile()
    return compiled, np.asarray(compiled(w, x)), (w, x)

def rows(report):
    return [dict(kind=o.kind, note=o.note, link_bytes=o.link_bytes, line=o.line,
                 executions=o.executions, exchange=o.exchange_cycles)
            for o in report.ops if o.op_class == "collective"]

ipus, cpus = jax.devices("ipu"), jax.devices("cpu")
sharded, got, (w, x) = run(ipus)
_, want, _ = run(cpus)
report = jax_ipu.report(sharded)
one = jax.jit(sgd_step).lower(jax.device_put(w, ipus[0]), jax.device_put(x, ipus[0])).compile()

mesh = Mesh(np.array(ipus), ("d",))
psum = jax.jit(jax.shard_map(lambda v: lax.psum(v * 2, "d"), mesh=mesh, in_specs=P("d"),
                             out_specs=P()))
shard_map = psum.lower(x).compile()

def scan(w, xs):
    return lax.scan(lambda c, b: (c - 0.1 * jax.grad(loss)(c, b), None), w, xs)[0]

xs = jax.device_put(np.ones((3, 64, 256), np.float32), NamedSharding(mesh, P(None, "d")))
looped = jax.jit(scan).lower(w, xs).compile()
print(json.dumps(dict(
    rows=rows(report), loss_line=loss.__code__.co_firstlineno + 1,
    exchange=report.cycles.exchange, one_exchange=jax_ipu.report(one).cycles.exchange,
    cost_exchange=sharded.cost_analysis()["ipu_exchange_cycles"],
    json_notes=[o["note"] for o in report.to_dict()["ops"]],
    same=bool(np.allclose(got, want, rtol=1e-5, atol=1e-6)),
    one_ipus=jax_ipu.report(one).target.num_ipus, shard_map=rows(jax_ipu.report(shard_map)),
    shard_map_same=bool(np.allclose(np.asarray(psum(x)),
                                    2 * np.asarray(x).reshape(4, 16, 256).sum(0))),
    looped=rows(jax_ipu.report(looped)))))
"""


@pytest.fixture(scope="module")
def mlp() -> dict:
    proc = run_python(MLP, env={"JAX_IPU_DEVICE_COUNT": "4",
                                "XLA_FLAGS": "--xla_force_host_platform_device_count=4"},
                      timeout=300)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _doubling_or_ring_link_bytes(note: str, nbytes: int, k: int) -> int:
    """Bytes one IPU sends in an all-reduce of nbytes over k IPUs, by the algorithm named."""
    if note.startswith("recursive doubling"):
        return nbytes * sum(min(2 ** s, k - 2 ** s) for s in range(math.ceil(math.log2(k))))
    assert note.startswith("ring"), note
    return math.ceil(2 * (k - 1) * nbytes / k)


def test_sharded_gradient_all_reduce_is_in_the_report(mlp):
    (row,) = mlp["rows"]
    grad_bytes = 256 * 128 * 4  # float32 gradient of w, whole on every IPU
    assert row["kind"] == "all_reduce" and row["executions"] == 1
    assert "over 4 IPUs" in row["note"] and PARTITIONER_NOTE in row["note"]
    assert row["link_bytes"] == _doubling_or_ring_link_bytes(row["note"], grad_bytes, 4)
    # 128 KiB on one M2000: a ring of 6 steps, each sending a quarter, half to each neighbour
    # (recursive doubling would send 3 x 128 KiB over one neighbour's links).
    assert row["note"].startswith("ring")
    assert row["exchange"] == pytest.approx(6 * (LATENCY + grad_bytes / 8 / MACHINE_RATE))
    # Its source line is the forward matmul whose transpose makes the gradient.
    assert row["line"] == mlp["loss_line"]
    assert any(PARTITIONER_NOTE in n for n in mlp["json_notes"])


def test_exchange_between_ipus_is_not_free(mlp):
    assert mlp["one_ipus"] == 1
    (row,) = mlp["rows"]
    # The same program on one IPU has only on-chip exchange: the IPUs add the all-reduce.
    assert mlp["exchange"] > mlp["one_exchange"] + 3 * LATENCY
    assert mlp["exchange"] == pytest.approx(mlp["one_exchange"] + row["exchange"])
    assert mlp["cost_exchange"] == pytest.approx(mlp["exchange"], rel=1e-6)


def test_sharded_results_still_match_cpu(mlp):
    assert mlp["same"] and mlp["shard_map_same"]


def test_shard_map_collectives_are_not_counted_twice(mlp):
    (row,) = mlp["shard_map"]
    assert row["kind"] == "all_reduce" and PARTITIONER_NOTE not in row["note"]


def test_collectives_inside_loops_count_every_trip(mlp):
    (row,) = mlp["looped"]
    assert row["kind"] == "all_reduce" and row["executions"] == 3
    assert row["link_bytes"] == 3 * mlp["rows"][0]["link_bytes"]


def test_profile_reports_include_inserted_collectives(tmp_path: Path):
    run_python(f"""
        import os
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        os.chdir({str(tmp_path)!r})
        mesh = Mesh(np.array(jax.devices()), ("d",))
        x = jax.device_put(np.ones((64, 32), np.float32), NamedSharding(mesh, P("d")))
        def total(x):
            return x.sum(0)
        assert (np.asarray(jax.jit(total)(x)) == 64).all()
    """, env={"JAX_IPU_DEVICE_COUNT": "4", "JAX_PLATFORMS": "ipu",
              "POPLAR_ENGINE_OPTIONS": '{"autoReport.all": "true", "autoReport.directory": "out"}'})
    (folder,) = (tmp_path / "out").glob("jit_total_*")
    graph = json.loads((folder / "graph.json").read_text())
    (row,) = [o for o in graph["ops"] if o["kind"] == "all_reduce"]
    assert PARTITIONER_NOTE in row["note"] and row["link_bytes"] > 0
    assert graph["cycles"]["exchange"] >= row["exchange_cycles"] > 0
    assert html.escape(PARTITIONER_NOTE) in (folder / "report.html").read_text()
    execution = json.loads((folder / "execution.json").read_text())
    assert execution["per_run"]["exchange"] == graph["cycles"]["exchange"]
    assert f"{graph['cycles']['total']:,.0f}" in (folder / "summary.txt").read_text()
