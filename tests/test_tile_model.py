"""The model's figures for tile programs, pinned by hand: memory per tile from the placement,
exchange bytes and cycles from source to destination tiles, vertex cycles, syncs, cycle counts,
and an out-of-memory message naming the tile and the user's line."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax import lax

import jax_ipu
from jax_ipu.model.targets import (
    EXCHANGE_CODE_BYTES_PER_INSTRUCTION,
    EXCHANGE_CODE_BYTES_PER_STEP,
    POINTER_BYTES,
    VERTEX_CODE_BYTES_PER_KIND,
    VERTEX_DESCRIPTOR_BYTES,
)
from jax_ipu.tile import (
    cycles_of,
    ipu_cycle_count,
    ipu_cycle_count_overhead,
    tile_constant_replicated,
    tile_gather,
    tile_map,
    tile_put_replicated,
    tile_put_sharded,
)

TILES = (0, 2, 5)
# ipu2, full chip: 1472 tiles, exchange 100 cycles set-up + 4 B/cycle, sync 90, vertex 190.
SETUP, BYTES_PER_CYCLE, SYNC, VERTEX = 100, 4, 90, 190


def report(fn, *args):
    ipu = jax.devices("ipu")[0]
    return jax_ipu.report(jax.jit(fn).lower(*(jax.device_put(a, ipu) for a in args)).compile())


def rows(rep, kind):
    return [o for o in rep.ops if o.kind == kind]


X = np.ones((3, 1024), np.float32)  # 12,288 B: linear over 96 tiles, 128 B (32 elements) each


def test_put_sharded_exchange_and_memory():
    rep = report(lambda x: tile_put_sharded(x, TILES), X)
    (put,) = rows(rep, "tile_put")
    # Row i (4,096 B) goes to TILES[i]; tile 0 already holds the first 128 B of row 0, tiles 2
    # and 5 hold parts of row 0, none of rows 1 and 2: they receive 3,968 + 4,096 + 4,096 B.
    assert "12160 B exchanged from 95 tile(s) to 3 tile(s); busiest tile moves 4096 B" in put.note
    assert put.exchange_cycles == SETUP + 4096 / BYTES_PER_CYCLE == 1124
    assert put.sync_cycles == SYNC and put.compute_cycles == 0
    per_tile = rep.memory.per_tile_bytes
    # Tile 5 holds 128 B of the argument and its 4,096 B row; tile 200 neither. Tiles that
    # send or receive hold the put's exchange code (a step's set-up and one instruction each
    # way: 16 + 2 x 4 B); tile 200 takes no part.
    exchange_code = EXCHANGE_CODE_BYTES_PER_STEP + 2 * EXCHANGE_CODE_BYTES_PER_INSTRUCTION
    assert exchange_code == 24
    assert per_tile[5] - per_tile[200] == 128 + 4096 + exchange_code
    assert per_tile[1] - per_tile[200] == 128 + exchange_code  # its share, sent to tile 0
    assert per_tile[100] == per_tile[200]  # holds nothing of the argument, sends nothing


def test_gather_between_tiles_is_exact():
    def f(x):
        return tile_gather(tile_put_sharded(x, TILES), (2, 0, 0, 1), (0, 1, 2, 3))

    (_, gather) = rows(report(f, X), "tile_put") + rows(report(f, X), "tile_gather")
    # Row 2 (tile 5) -> tile 0; row 0 (tile 0) -> tiles 1 and 2 (sent once, multicast); row 1
    # (tile 2) -> tile 3. Each receiver takes 4,096 B; tile 0 sends 4,096 B once.
    assert "16384 B exchanged from 3 tile(s) to 4 tile(s); busiest tile moves 4096 B" in \
        gather.note
    assert gather.exchange_cycles == 1124


def test_rows_already_in_place_do_not_move():
    def f(x):
        return tile_gather(tile_put_sharded(x, TILES), (0, 1, 2), TILES)

    (gather,) = rows(report(f, X), "tile_gather")
    assert gather.exchange_cycles == 0 and gather.sync_cycles == 0
    assert "nothing moves" in gather.note


def test_replicated_put_multicasts():
    w = np.ones(256, np.float32)  # 1,024 B: linear over 8 tiles (0..7), 128 B each
    (put,) = rows(report(lambda w: tile_put_replicated(w, (2, 9, 10)), w), "tile_put")
    # Tile 2 already holds 128 B: it receives 896; tiles 9 and 10 receive 1,024 each.
    assert "2944 B exchanged from 8 tile(s) to 3 tile(s); busiest tile moves 1024 B" in put.note
    assert put.exchange_cycles == SETUP + 1024 / BYTES_PER_CYCLE


def test_constants_are_laid_out_on_their_tiles():
    rep = report(lambda x: (x, tile_constant_replicated(np.ones(4096, np.float32), (7, 8))), X)
    (put,) = rows(rep, "tile_put")
    assert put.exchange_cycles == 0 and put.sync_cycles == 0
    per_tile = rep.memory.per_tile_bytes
    assert per_tile[7] - per_tile[200] == 16384 + 128  # the copy, and its share of x
    assert per_tile[100] == per_tile[200]


def test_vertex_cycles_from_the_models_rates_on_one_tile():
    def f(x):
        a = tile_put_sharded(x, TILES)
        return tile_map(lax.add_p, a, a), tile_map(lax.exp_p, a)

    rep = report(f, X)
    add, exp = rows(rep, "tile_map")
    # 1,024 floats on a tile: 512 two-float vectors over 6 workers (86 each), 2 loads and a
    # store per vector: 190 + 86 * 6 * 3.
    assert add.compute_cycles == VERTEX + 86 * 6 * 3 == 1738
    # exp: 8 cycles a vector beats the 2 memory accesses: 190 + 86 * 6 * 8.
    assert exp.compute_cycles == VERTEX + 86 * 6 * 8
    assert add.exchange_cycles == 0 and add.sync_cycles == SYNC and add.tiles == 3
    assert rep.tiles["compute_cycles"][2] == 1738 + exp.compute_cycles
    assert rep.tiles["compute_cycles"][1] == 0
    by_tile = {v["vertex"]: v["tiles"] for v in rep.tiles["vertices"]}
    assert by_tile == {"lax.add<float32>": [0, 2, 5], "lax.exp<float32>": [0, 2, 5]}


def test_sync_option_adds_a_sync():
    (m,) = rows(report(lambda x: tile_map(lax.neg_p, tile_put_sharded(x, TILES), sync=True), X),
                "tile_map")
    assert m.sync_cycles == 2 * SYNC


def test_loop_body_tile_values_stay_on_their_tiles():
    def f(x):
        a = tile_put_sharded(x, TILES)
        return lax.fori_loop(0, 4, lambda _, v: tile_map(lax.neg_p, v), a)

    rep = report(f, X)
    (neg,) = rows(rep, "tile_map")
    assert neg.executions == 4 and neg.exchange_cycles == 0
    per_tile = rep.memory.per_tile_bytes
    # The carried rows and the body's new rows: on tiles 0, 2 and 5 only, with the put's
    # exchange code (24 B) and two vertices, each its codelet (1 KiB) and its state (a
    # descriptor and a pointer for its operand and its result: 8 + 2 x 4 B): the tile_map's,
    # and the copy of its new rows into the loop's carry at the end of each iteration.
    vertex = VERTEX_CODE_BYTES_PER_KIND + VERTEX_DESCRIPTOR_BYTES + 2 * POINTER_BYTES
    assert vertex == 1040
    (copy,) = rows(rep, "loop_carry_copy")
    assert copy.executions == 4
    assert per_tile[5] - per_tile[200] == 128 + 2 * 4096 + 24 + 2 * vertex
    assert per_tile[7] - per_tile[200] == 128 + 24  # sends its share of the argument


def test_cycle_counts_bracket_exactly_the_reports_cycles():
    def f(x):
        a = tile_put_sharded(x, TILES)
        a, start = ipu_cycle_count(a)
        b = tile_map(lax.exp_p, tile_gather(a, (1, 2, 0), TILES))
        b, end = ipu_cycle_count(b)
        return b, start, end

    ipu = jax.devices("ipu")[0]
    compiled = jax.jit(f).lower(jax.device_put(X, ipu)).compile()
    _, start, end = compiled(jax.device_put(X, ipu))
    ops = jax_ipu.report(compiled).ops
    marks = [i for i, o in enumerate(ops) if o.kind == "tile_cycle_count"]
    # A count is every row before it and its own read (45 cycles, ipu_cycle_count_overhead()).
    assert ipu_cycle_count_overhead() == ops[marks[0]].cycles == 45
    assert list(cycles_of(start.array)) == [sum(o.cycles for o in ops[:marks[0] + 1])] * 3 == \
        [1214 + 45] * 3
    between = sum(o.cycles for o in ops[marks[0] + 1:marks[1]])
    assert int(cycles_of(end.array)[0] - cycles_of(start.array)[0]) == between + 45 > 45
    _, s_cpu, e_cpu = jax.jit(f)(jax.device_put(X, jax.devices("cpu")[0]))
    assert cycles_of(s_cpu.array).tolist() == cycles_of(e_cpu.array).tolist() == [0, 0, 0]


def test_plain_array_cycle_count():
    _, count = jax.jit(lambda x: ipu_cycle_count(x * 2))(jax.device_put(X, jax.devices("ipu")[0]))
    assert count.shape == (2,) and count.dtype == np.uint32 and cycles_of(count) > 0


def test_cycle_count_in_a_loop_of_unknown_trip_count_is_refused():
    def f(x):
        return lax.while_loop(lambda v: v[0, 0] < 5, lambda v: ipu_cycle_count(v + 1)[0], x)

    with pytest.raises(Exception, match="ipu_cycle_count at .*test_tile_model.py:\\d+ .* is "
                       "inside a loop whose trip count the model does not know"):
        jax.jit(f)(jax.device_put(X, jax.devices("ipu")[0]))


def test_out_of_memory_names_the_tile_and_the_line():
    big = np.ones(200_000, np.float32)  # 800,000 B: more than a tile's 638,976

    def f(w):
        return tile_put_replicated(w, (3, 9))

    with pytest.raises(jax.errors.JaxRuntimeError, match="RESOURCE_EXHAUSTED") as err:
        report(f, big)
    message = str(err.value)
    assert "Out of memory on tile 3:" in message or "Out of memory on tile 9:" in message
    assert "2 tile(s) out of memory" in message
    assert f"{__file__}:{f.__code__.co_firstlineno + 1}" in message
