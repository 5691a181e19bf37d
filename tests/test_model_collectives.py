"""Tests of the IPU Model's collectives: IPU-POD layout, ring/tree costs, link bounds, reports.

Expectations are hand-computed from the named constants in jax_ipu/model/targets.py."""

from __future__ import annotations

import json

import pytest

from jax_ipu.compiler.program import read_program
from jax_ipu.model import analyze, get_target
from jax_ipu.model.collectives import (
    all_reduce_bound_seconds,
    all_reduce_plan,
    all_reduce_seconds,
    hierarchical_plan,
    hop,
    layout,
    plan_collective,
    ring_plan,
)
from jax_ipu.model.ir import Op, Program, Region, TensorType
from jax_ipu.model.targets import (
    EXCHANGE_SETUP_CYCLES,
    GW_LINK_STEP_LATENCY_S,
    IPU2_CLOCK_HZ,
    IPU2_LINK_BYTES_PER_S,
    IPU2_LINKS,
    IPU2_LINKS_PER_NEIGHBOUR,
    IPU2_POD_LINKS_PER_IPU,
    IPU_LINK_SYNC_S_PER_HOP,
    SYNC_CYCLES_PER_STEP,
    VERSIONS,
)
from tests._subprocess import run_python

MIB = 1 << 20
# cycles per step over IPU-Links: a global sync over one hop, then the chip's sync and exchange
# set-up
LATENCY = IPU_LINK_SYNC_S_PER_HOP * IPU2_CLOCK_HZ + SYNC_CYCLES_PER_STEP + EXCHANGE_SETUP_CYCLES
# Bytes per cycle, one direction, to a ring neighbour in the same M2000 / in another M2000.
MACHINE_RATE = IPU2_LINKS_PER_NEIGHBOUR * IPU2_LINK_BYTES_PER_S / IPU2_CLOCK_HZ
POD_RATE = IPU2_POD_LINKS_PER_IPU * IPU2_LINK_BYTES_PER_S / IPU2_CLOCK_HZ
F32 = TensorType((), "float32")


def _collective(kind: str, nbytes: int, groups=None, **attrs) -> Op:
    t = TensorType((nbytes // 4,), "float32")
    if groups is not None:
        attrs["replica_groups"] = groups
    add = Op("stablehlo.add", (F32, F32), (F32,), (100, 101), (102,))
    regions = [Region((100, 101), [add], (102,))] if kind in (
        "all_reduce", "reduce_scatter") else []
    return Op(f"stablehlo.{kind}", (t,), (t,), (0,), (1,), attrs, regions=regions)


def _report(op: Op, devices: int, version: str = "ipu2"):
    program = Program("jit_psum", op.operands, op.results, [op], (0,), (1,),
                      num_replicas=1, num_partitions=devices)
    return analyze(program, get_target(version))


def _row(report, kind="all_reduce"):
    (row,) = [o for o in report.ops if o.kind == kind]
    return row


def test_psum_within_one_m2000_is_a_ring():
    # 1 MiB float32 over 4 IPUs: 2(k-1) steps, each sends 1/k of the data, half to each
    # neighbour.
    k = 4
    r = _report(_collective("all_reduce", MIB, [list(range(k))]), k)
    row, steps = _row(r), 2 * (k - 1)
    assert row.exchange_cycles == pytest.approx(steps * (LATENCY + MIB / (2 * k) / MACHINE_RATE))
    assert row.link_bytes == steps * MIB // k
    assert row.note.startswith(f"ring all_reduce over {k} IPUs") and "slowest hop machine" in \
        row.note
    assert r.cycles.exchange == row.exchange_cycles and row.compute_cycles > 0


def test_psum_of_two_ipus_is_one_exchange_of_everything():
    # Two IPUs are each other's only neighbour: a ring's two steps would each send half the
    # data over their one hop; swapping all of it once (recursive doubling) is one latency less.
    r = _report(_collective("all_reduce", MIB, [[0, 1]]), 2)
    row = _row(r)
    assert row.exchange_cycles == pytest.approx(LATENCY + MIB / MACHINE_RATE)
    assert row.link_bytes == MIB
    assert row.note.startswith("recursive doubling all_reduce over 2 IPUs")
    ring = ring_plan("all_reduce", MIB, [0, 1], get_target("ipu2"))
    assert ring.cycles == pytest.approx(2 * (LATENCY + MIB / 2 / MACHINE_RATE))


@pytest.mark.parametrize("k", [8, 16])
def test_psum_across_m2000s_is_rings_inside_and_between_machines_or_one_ring(k):
    # reduce-scatter in each M2000 (3 steps), all-reduce of a quarter between the m machines,
    # all-gather in each M2000 (3 steps); or one ring over all k, whichever is faster.
    m = k // 4
    group = list(range(k))
    inside = 2 * 3 * (LATENCY + MIB / 8 / MACHINE_RATE)
    # between two machines all of a step's share crosses the one hop, over both of an IPU's
    # links to the other machine; around more, half each way, over one link each way
    if m == 2:
        between = 2 * (LATENCY + (MIB // 4) / 2 / POD_RATE)
    else:
        between = 2 * (m - 1) * (LATENCY + (MIB // 4) / (2 * m) / (POD_RATE / 2))
    target = get_target("ipu2")
    rings = hierarchical_plan(MIB, group, target)
    assert rings.cycles == pytest.approx(inside + between)
    assert rings.link_bytes == 2 * 3 * MIB // 4 + 2 * (m - 1) * (MIB // 4) // m
    assert rings.slowest_hop == "pod"
    # the flat ring: 2(k-1) steps of 1/(2k) each way; its hops between machines have all of
    # an IPU's links to the other machine (its other neighbour is in its own), as fast as
    # those inside one
    flat = 2 * (k - 1) * (LATENCY + MIB / (2 * k) / MACHINE_RATE)
    assert ring_plan("all_reduce", MIB, group, target).cycles == pytest.approx(flat)
    row = _row(_report(_collective("all_reduce", MIB, [group]), k))
    assert row.exchange_cycles == pytest.approx(min(flat, inside + between))


def test_small_psum_takes_recursive_doubling():
    # 4 bytes on one M2000: latency rules; log2(4) = 2 steps of 1 and 2 hops beat 6 ring steps.
    plan = all_reduce_plan(4, list(range(4)), get_target("ipu2"))
    assert plan.algorithm == "recursive doubling" and plan.steps == 2
    assert plan.latency_cycles == pytest.approx(3 * LATENCY)
    assert plan.transfer_cycles == pytest.approx(3 * 4 / MACHINE_RATE)


def test_more_bytes_never_cheaper():
    target = get_target("ipu2")
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                 "collective_broadcast"):
        for k in (2, 4, 8, 16, 64, 128):
            cycles = [plan_collective(_collective(kind, n, [list(range(k))]), target).cycles
                      for n in (4, 1024, 64 * 1024, MIB, 64 * MIB)]
            assert cycles == sorted(cycles) and cycles[0] > 0, (kind, k)


def test_crossing_m2000s_costs_more_per_byte():
    target, n = get_target("ipu2"), 100 * MIB
    assert all_reduce_seconds(n, 16, target) / all_reduce_bound_seconds(n, 16, target) > \
        all_reduce_seconds(n, 4, target) / all_reduce_bound_seconds(n, 4, target)
    assert all_reduce_seconds(n, 16, target) > all_reduce_seconds(n, 4, target)
    # the same group size, one IPU from each of four M2000s: an IPU's two IPU-Links to other
    # machines go one to the machine on each side, half the two it has to a neighbour inside
    # one (L-1), so each step takes twice as long on the links
    within = plan_collective(_collective("all_reduce", n, [[0, 1, 2, 3]]), target)
    across = plan_collective(_collective("all_reduce", n, [[0, 4, 8, 12]]), target)
    assert IPU2_POD_LINKS_PER_IPU == IPU2_LINKS_PER_NEIGHBOUR
    assert across.transfer_cycles == pytest.approx(2 * within.transfer_cycles)
    assert across.latency_cycles == pytest.approx(within.latency_cycles)
    assert across.slowest_hop == "pod"
    # beyond an IPU-POD64 the gateway carries the ring
    assert ring_plan("all_reduce", n, list(range(128)), target).slowest_hop == "gateway"


@pytest.mark.parametrize("version", VERSIONS)
def test_never_faster_than_the_link_bound(version):
    target = get_target(version)
    for k in (2, 4, 8, 16, 64):
        for n in (4, 4096, MIB, 100 * MIB):
            assert all_reduce_seconds(n, k, target) >= all_reduce_bound_seconds(n, k, target)


def test_bound_formula_and_the_100mb_figures():
    target, n = get_target("ipu2"), 100_000_000
    assert all_reduce_bound_seconds(n, 4, target) == pytest.approx(
        1.5 * n / (IPU2_LINKS * IPU2_LINK_BYTES_PER_S))
    four = all_reduce_seconds(n, 4, target)
    assert four == pytest.approx(6 * (LATENCY + n / 8 / MACHINE_RATE) / IPU2_CLOCK_HZ)
    # a ring inside one M2000 uses 2 links to each of its 2 neighbours: 4 of its 10 links
    assert four / all_reduce_bound_seconds(n, 4, target) == pytest.approx(
        IPU2_LINKS / (2 * IPU2_LINKS_PER_NEIGHBOUR), rel=1e-2)
    assert 1.0 < all_reduce_seconds(n, 16, target) / all_reduce_bound_seconds(n, 16, target) < 2.6


def test_layout_of_device_counts():
    target = get_target("ipu2")
    assert [(layout(n, target).machines, layout(n, target).pods)
            for n in (1, 2, 4, 8, 16, 64, 128)] == \
        [(1, 1), (1, 1), (1, 1), (2, 1), (4, 1), (16, 1), (32, 2)]
    assert [hop(a, b, target).kind for a, b in ((0, 3), (3, 4), (15, 0), (63, 64))] == \
        ["machine", "pod", "pod", "gateway"]
    assert hop(63, 64, target).latency_cycles == GW_LINK_STEP_LATENCY_S * IPU2_CLOCK_HZ
    assert layout(4, get_target("ipu1")).machines == 2  # ipu1 cards hold a pair


def test_other_collectives_hand_computed():
    target = get_target("ipu2")
    gather = plan_collective(_collective("all_gather", MIB, [[0, 1, 2, 3]]), target)
    assert gather.cycles == pytest.approx(3 * (LATENCY + MIB / 8 / MACHINE_RATE))
    # a shift by one: every IPU sends all its data one hop
    shift = _collective("collective_permute", MIB,
                        source_target_pairs=[[i, (i + 1) % 4] for i in range(4)])
    plan = plan_collective(shift, target)
    assert plan.cycles == pytest.approx(LATENCY + MIB / MACHINE_RATE) and plan.link_bytes == MIB
    # the same hop across two M2000s runs over the slower links between machines
    far = plan_collective(_collective("collective_permute", MIB,
                                      source_target_pairs=[[3, 4]]), target)
    assert far.cycles == pytest.approx(LATENCY + MIB / POD_RATE)
    # all_to_all on 4: a quarter to each neighbour (1 hop), a quarter two hops away
    a2a = plan_collective(_collective("all_to_all", MIB, [[0, 1, 2, 3]]), target)
    assert a2a.link_bytes == MIB and a2a.latency_cycles == pytest.approx(2 * LATENCY)


def test_groups_of_one_and_missing_groups():
    single = _report(_collective("all_reduce", MIB, [[0], [1]]), 2)
    assert _row(single).link_bytes == 0 and "nothing crosses a link" in _row(single).note
    # no replica_groups: every IPU of the program, here 8
    everyone = _report(_collective("all_reduce", MIB), 8)
    assert everyone.target.num_ipus == 8 and "over 8 IPUs" in _row(everyone).note


def test_reader_keeps_large_and_splat_groups():
    groups = [list(range(g * 16, g * 16 + 16)) for g in range(8)]
    text = f"""
    module @m attributes {{mhlo.num_partitions = 128 : i32, mhlo.num_replicas = 1 : i32}} {{
      func.func public @main(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {{
        %0 = "stablehlo.all_reduce"(%x) <{{channel_handle = #stablehlo.channel_handle<handle = 1,
            type = 1>, replica_groups = dense<{groups}> : tensor<8x16xi64>,
            use_global_device_ids}}> ({{
        ^bb0(%a: tensor<f32>, %b: tensor<f32>):
          %s = stablehlo.add %a, %b : tensor<f32>
          stablehlo.return %s : tensor<f32>
        }}) : (tensor<8xf32>) -> tensor<8xf32>
        %1 = "stablehlo.all_gather"(%x) <{{all_gather_dim = 0 : i64,
            replica_groups = dense<0> : tensor<1x1xi64>}}> : (tensor<8xf32>) -> tensor<8xf32>
        return %0, %1 : tensor<8xf32>, tensor<8xf32>
      }}
    }}"""
    program = read_program(text)
    reduce, gather = program.ops
    assert reduce.attributes["replica_groups"] == groups
    assert gather.attributes["replica_groups"] == [[0]]
    r = analyze(program, get_target("ipu2"))
    assert r.target.num_ipus == 128 and "x 8 groups" in _row(r).note


LOWER_COLLECTIVES = """
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax, jax.numpy as jnp
def f(v):
    a = jax.lax.psum(v, "i")
    b = jax.lax.all_gather(v, "i")
    c = jax.lax.psum_scatter(v, "i", tiled=True)
    d = jax.lax.ppermute(v, "i", [(j, (j + 1) % 4) for j in range(4)])
    e = jax.lax.all_to_all(v, "i", 0, 0, tiled=True)
    return a, b, c, d, e
spec = jax.ShapeDtypeStruct((4, 1024), jnp.float32)
print(jax.pmap(f, axis_name="i").lower(spec).as_text(debug_info=True))
"""


def test_lowered_pmap_collectives_reported_with_source_lines():
    # pmap needs 4 CPU devices, set before jax starts: lower in a child process.
    text = run_python(LOWER_COLLECTIVES, env={"JAX_PLATFORMS": "cpu"}).stdout
    r = analyze(read_program(text), get_target("ipu2"))
    assert r.target.num_ipus == 4 and not r.warnings
    rows = {o.kind: o for o in r.ops if o.op_class == "collective"}
    assert set(rows) == {"all_reduce", "all_gather", "reduce_scatter", "collective_permute",
                         "all_to_all"}
    lines = {kind: row.line for kind, row in rows.items()}
    assert lines == {"all_reduce": 6, "all_gather": 7, "reduce_scatter": 8,
                     "collective_permute": 9, "all_to_all": 10}
    for row in rows.values():
        assert row.link_bytes > 0 and row.exchange_cycles >= LATENCY and "over 4 IPUs" in \
            row.note
    psum = rows["all_reduce"]
    assert psum.exchange_cycles == pytest.approx(
        plan_collective(_collective("all_reduce", 4096, [[0, 1, 2, 3]]),
                        get_target("ipu2")).cycles)
    # the report's JSON form carries the link bytes of each op
    doc = json.loads(json.dumps(r.to_dict()))
    assert [o["link_bytes"] for o in doc["ops"] if o["kind"] == "all_reduce"] == \
        [psum.link_bytes]
    assert doc["target"]["num_ipus"] == 4


def _permute(pairs, src: int, dst: int, nbytes: int = MIB) -> Op:
    t = TensorType((nbytes // 4,), "float32")
    return Op("stablehlo.collective_permute", (t,), (t,), (src,), (dst,),
              {"source_target_pairs": pairs})


def _permutes(ops: list[Op], devices: int = 2):
    program = Program("jit_halo", (ops[0].operands[0],) * 2, tuple(o.results[0] for o in ops),
                      ops, (0, 1), tuple(o.result_ids[0] for o in ops), num_replicas=1,
                      num_partitions=devices)
    report = analyze(program, get_target("ipu2"))
    return [o for o in report.ops if o.kind == "collective_permute"], report


def test_halo_swap_in_both_directions_costs_one_direction():
    # Two IPUs of an M2000 swap 1 MiB halos: 0 -> 1 and 1 -> 0 are the two directions of the
    # same full-duplex IPU-Links, so both go in the time of one: a hop's latency and 1 MiB
    # over the two links to the neighbour.
    one_way = LATENCY + MIB / MACHINE_RATE
    (alone,), _ = _permutes([_permute([[0, 1]], 0, 10)])
    assert alone.exchange_cycles == pytest.approx(one_way)
    (first, second), report = _permutes([_permute([[0, 1]], 0, 10), _permute([[1, 0]], 1, 11)])
    assert first.exchange_cycles == pytest.approx(one_way)
    assert (second.exchange_cycles, second.sync_cycles) == (0, 0)
    assert "full-duplex" in first.note and "sent in one exchange" in second.note
    assert report.cycles.exchange == pytest.approx(one_way)


def test_permutes_sharing_a_direction_or_waiting_on_each_other_are_not_overlapped():
    one_way = LATENCY + MIB / MACHINE_RATE
    # the same direction twice: the link carries 2 MiB
    (a, b), _ = _permutes([_permute([[0, 1]], 0, 10), _permute([[0, 1]], 1, 11)])
    assert a.exchange_cycles + b.exchange_cycles == pytest.approx(LATENCY + 2 * MIB / MACHINE_RATE)
    # the second sends back what the first received: it must wait for it
    (a, b), _ = _permutes([_permute([[0, 1]], 0, 10), _permute([[1, 0]], 10, 11)])
    assert a.exchange_cycles == b.exchange_cycles == pytest.approx(one_way)
