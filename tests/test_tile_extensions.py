"""jax_ipu.tile's additions for TessellateIPU users, against numpy and jax on cpu, and the model's
figures for them pinned by hand: in-place and scaled ops, fill, copy, identity, rotation2d, tile
random numbers and seeds, tile_map's parameter fixes, tiles holding several rows, cycle counts
inside loops, device attributes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jax_ipu
from jax_ipu.errors import IpuTileTypeError
from jax_ipu.tile import (
    INPLACE,
    TileShardedArray,
    cycles_of,
    ipu_cycle_count,
    rotation2d_p,
    scaled_add_p,
    scaled_sub_p,
    tile_constant_replicated,
    tile_constant_sharded,
    tile_copy,
    tile_fill,
    tile_gather,
    tile_get_hw_seeds,
    tile_map,
    tile_put_replicated,
    tile_put_sharded,
    tile_random_normal,
    tile_random_uniform,
    tile_set_hw_seeds,
    tile_sharded_identity,
)
from jax_ipu.tile import primitives as P

TILES = (0, 2, 5)
VERTEX, FILL_REGION, SYNC = 190, 21, 90  # ipu2: a vertex launch, PopLibs' Fill set-up, a sync


def run(platform, fn, *args):
    device = jax.devices(platform)[0]
    return jax.tree.map(np.asarray, jax.jit(fn)(*(jax.device_put(a, device) for a in args)))


def report(fn, *args):
    ipu = jax.devices("ipu")[0]
    return jax_ipu.report(jax.jit(fn).lower(*(jax.device_put(a, ipu) for a in args)).compile())


def rows(rep, kind):
    return [o for o in rep.ops if o.kind == kind]


# ---- in-place and scaled ops ---------------------------------------------------------------
BINARY = ("add", "atan2", "div", "max", "min", "mul", "pow", "rem", "sub")


def _lax(p, *xs):
    """What p's lax operation gives, by jax's own wrapper (lax.exp, lax.add...)."""
    return getattr(lax, p.base.name)(*xs)


def test_inplace_ops_compute_their_lax_ops():
    assert len(INPLACE) == 28
    x = np.linspace(0.1, 0.9, 12, dtype=np.float32).reshape(3, 4)
    y = np.linspace(1.5, 2.5, 12, dtype=np.float32).reshape(3, 4)
    k = np.arange(12, dtype=np.int32).reshape(3, 4)
    binary = [INPLACE[n] for n in BINARY]
    # is_finite's bool result cannot be written into its float operand (Poplar refuses too)
    unary = [p for n, p in INPLACE.items()
             if n not in BINARY and n not in ("population_count", "is_finite")]

    def f(x, y, k):
        a, b, i = (tile_put_sharded(v, TILES) for v in (x, y, k))
        outs = [tile_map(p, a) for p in unary] + [tile_map(p, b, a) for p in binary]
        return outs + [tile_map(P.population_count_inplace_p, i)]

    def expected(x, y, k):
        return [_lax(p, x) for p in unary] + [_lax(p, y, x) for p in binary] + \
            [lax.population_count(k)]

    reference = jax.jit(expected)(x, y, k)
    for platform in ("ipu", "cpu"):
        for got, want in zip(run(platform, f, x, y, k), reference, strict=True):
            np.testing.assert_allclose(got.array, np.asarray(want), rtol=1e-6)
    with pytest.raises(IpuTileTypeError, match=r"is_finite_inplace\) writes its result into "
                       r"argument 0, which must have the result's shape and dtype"):
        tile_map(P.is_finite_inplace_p, tile_put_sharded(x, TILES))


@pytest.mark.parametrize("platform", ["ipu", "cpu"])
def test_scaled_add_and_sub(platform):
    a, b = np.arange(12, dtype=np.float32).reshape(3, 4), np.ones((3, 4), np.float32)
    s = np.array([[2.0], [3.0], [-1.0]], np.float32)

    def f(a, b, s):
        ta, tb, ts = (tile_put_sharded(v, TILES) for v in (a, b, s))
        return tile_map(scaled_add_p, ta, tb, ts), tile_map(scaled_sub_p, ta, tb, ts)

    added, subtracted = run(platform, f, a, b, s)
    np.testing.assert_array_equal(added.array, a + s * b)
    np.testing.assert_array_equal(subtracted.array, a - s * b)


def test_in_place_results_take_their_operands_memory_and_copy_nothing_in_loops():
    x = np.ones((3, 1024), np.float32)

    def looped(p):
        def f(x):
            a = tile_put_sharded(x, TILES)
            return lax.fori_loop(0, 4, lambda _, v: tile_map(p, v), a)
        return f

    plain, in_place = report(looped(lax.neg_p), x), report(looped(P.neg_inplace_p), x)
    (copy,) = rows(plain, "loop_carry_copy")
    assert rows(in_place, "loop_carry_copy") == []
    assert plain.cycles.total - in_place.cycles.total == copy.cycles > 0
    np.testing.assert_array_equal(run("ipu", looped(P.neg_inplace_p), x).array, x)

    def added(p):
        def f(x):
            a = tile_put_sharded(x, TILES)
            c = tile_constant_replicated(np.ones(1024, np.float32), TILES)
            return tile_map(lax.reduce_sum_p, tile_map(p, a, c), axes=(0,))
        return f

    plain, in_place = report(added(lax.add_p), x), report(added(P.add_inplace_p), x)
    # The sum is written into a's row: one 4,096-byte row fewer at the peak, which moves to
    # the reduction, where its 4-byte result is live too.
    assert plain.memory.per_tile_bytes[5] - in_place.memory.per_tile_bytes[5] == 4096 - 4
    with pytest.raises(IpuTileTypeError, match="writes its result into argument 0"):
        tile_map(P.add_inplace_p, tile_put_sharded(np.ones((3, 1)), TILES),
                 tile_put_sharded(np.ones((3, 4)), TILES))


# ---- fill, copy, identity, rotation ----------------------------------------------------------
def test_fill_copy_identity_and_what_the_model_charges():
    def f():
        filled = tile_fill((256,), 3.5, np.float32, TILES)
        return filled, tile_copy(filled), tile_sharded_identity(np.int32, TILES)

    for platform in ("ipu", "cpu"):
        filled, copied, identity = run(platform, f)
        np.testing.assert_array_equal(filled.array, np.full((3, 256), 3.5, np.float32))
        np.testing.assert_array_equal(copied.array, filled.array)
        np.testing.assert_array_equal(identity.array, np.eye(3, dtype=np.int32))
        assert identity.tiles == TILES
    fill, copy, *_ = (o for o in report(f).ops if o.kind == "tile_map")
    # 1,024 bytes a row: one Fill region, then 8 B a cycle; a copy loads and stores each.
    assert fill.compute_cycles == VERTEX + FILL_REGION + 1024 / 8 == 339
    assert copy.compute_cycles == VERTEX + FILL_REGION + 2 * 1024 / 8 == 467


@pytest.mark.parametrize("platform", ["ipu", "cpu"])
def test_rotation2d(platform):
    c, s = np.cos(0.3), np.sin(0.3)
    cs = np.tile(np.array([c, s], np.float32), (3, 1))
    x0, x1 = np.arange(12, dtype=np.float32).reshape(3, 4), np.ones((3, 4), np.float32)

    def f(cs, x0, x1):
        return tile_map(rotation2d_p, *(tile_put_sharded(v, TILES) for v in (cs, x0, x1)))

    r0, r1 = run(platform, f, cs, x0, x1)
    np.testing.assert_allclose(r0.array, np.float32(c) * x0 - np.float32(s) * x1, rtol=1e-6)
    np.testing.assert_allclose(r1.array, np.float32(s) * x0 + np.float32(c) * x1, rtol=1e-6)


# ---- random ---------------------------------------------------------------------------------
def test_random_distributions_seeds_and_costs():
    def draws():
        return (tile_random_uniform(TILES, 1000, np.float32, offset=1.0, scale=2.0),
                tile_random_uniform(TILES, 1001, np.int32, offset=10, scale=256),
                tile_random_normal(TILES, 10000, np.float16, mean=1.0, stddev=2.0))

    for platform in ("ipu", "cpu"):
        uniform, integers, normal = run(platform, draws)
        assert uniform.shape == (3, 1000) and uniform.dtype == np.float32
        # poprand spreads [offset - scale / 2, offset + scale / 2)
        assert uniform.array.min() >= 0.0 and uniform.array.max() < 2.0
        assert abs(uniform.array.mean() - 1.0) < 0.05
        assert integers.array.min() >= 10 and integers.array.max() < 266
        assert len(np.unique(integers.array)) > 200
        values = normal.array.astype(np.float32)
        assert abs(values.mean() - 1.0) < 0.05 and abs(values.std() - 2.0) < 0.05
        assert not np.array_equal(uniform.array[0], uniform.array[1])  # each tile its own
    u, i, n = (o for o in report(draws).ops if o.kind == "tile_map")
    # poprand's estimates: 4 + set-up per worker (22 fp32, 24 fp16) x 6, then 4 a 64-bit
    # vector; integers 6 a pair and 2 for an odd one.
    assert u.compute_cycles == 4 + 22 * 6 + 4 * 500 == 2136
    assert i.compute_cycles == 4 + 22 * 6 + 6 * 500 + 2 == 3138
    assert n.compute_cycles == 4 + 24 * 6 + 4 * 2500 == 10148

    seeds = np.random.default_rng(1).integers(0, 2**32, (3, 6, 4), dtype=np.uint32)
    set_seeds = jax.jit(lambda s: tile_set_hw_seeds(tile_put_sharded(s, TILES)))
    draw = jax.jit(lambda: tile_random_uniform(TILES, 16, np.float32))
    get = jax.jit(lambda: tile_get_hw_seeds(TILES))
    set_seeds(seeds)
    np.testing.assert_array_equal(np.asarray(get().array), seeds)
    first = np.asarray(draw().array)
    moved = np.asarray(get().array)
    assert not np.array_equal(moved, seeds)  # drawing advanced the states
    set_seeds(seeds)
    np.testing.assert_array_equal(np.asarray(draw().array), first)
    s, g = (o for o in report(lambda s: (tile_set_hw_seeds(tile_put_sharded(s, TILES)),
                                         tile_get_hw_seeds(TILES)), seeds).ops
            if o.kind == "tile_map")
    assert (s.compute_cycles, g.compute_cycles) == (14 + 10 * 6, 14 + 7 * 6)
    with pytest.raises(IpuTileTypeError, match="dtype .* is not one of float32, float16"):
        tile_random_normal(TILES, 4, np.int32)
    with pytest.raises(IpuTileTypeError, match=r"uint32 of shape \(tiles, 6, 4\)"):
        tile_set_hw_seeds(tile_put_sharded(np.zeros((3, 4), np.uint32), TILES))


# ---- tile_map's parameters -------------------------------------------------------------------
def test_parameters_jax_fills_in_and_lists_are_accepted():
    x = np.arange(24, dtype=np.float32).reshape(3, 8) - 7
    b = x > 0

    def f(x, b):
        a, m = tile_put_sharded(x, TILES), tile_put_sharded(b, TILES)
        return (tile_map(lax.reduce_and_p, m, axes=(0,)), tile_map(lax.reduce_or_p, m, axes=(0,)),
                tile_map(lax.reduce_xor_p, m, axes=(0,)),
                tile_map(lax.reshape_p, a, new_sizes=(2, 4)),
                tile_map(lax.convert_element_type_p, a, new_dtype=np.int32),
                tile_map(lax.iota_p, dtype=np.int32, shape=(5,), dimension=0, tiles=TILES),
                tile_map(lax.broadcast_in_dim_p, a, shape=(2, 8), broadcast_dimensions=(1,)),
                tile_map(lax.dot_general_p, a, a, dimension_numbers=(([0], [0]), ([], []))))

    def want(x, b):
        return (b.all(1), b.any(1), np.logical_xor.reduce(b, 1), x.reshape(3, 2, 4),
                x.astype(np.int32), np.tile(np.arange(5, dtype=np.int32), (3, 1)),
                np.broadcast_to(x[:, None], (3, 2, 8)), (x * x).sum(1))

    for platform in ("ipu", "cpu"):
        for got, expected in zip(run(platform, f, x, b), want(x, b), strict=True):
            np.testing.assert_array_equal(got.array, expected)


# ---- tiles with several rows, squeeze, device_array, None -----------------------------------
def test_a_tile_holding_several_rows():
    tiles = (4, 4, 9)
    x = np.linspace(-2, 2, 3 * 512, dtype=np.float32).reshape(3, 512)

    def f(x):
        a = tile_put_sharded(x, tiles)
        both = TileShardedArray(jnp.concatenate([a.array, a.array]), (*a.tiles, *a.tiles))
        return tile_map(lax.exp_p, a), tile_gather(both, (5, 0, 1), tiles)

    for platform in ("ipu", "cpu"):
        e, g = run(platform, f, x)
        np.testing.assert_allclose(e.array, np.exp(x), rtol=1e-6)
        np.testing.assert_array_equal(g.array, x[[2, 0, 1]])
    rep = report(f, x)
    (exp,) = rows(rep, "tile_map")
    one_row = exp.compute_cycles / 2  # tile 4 runs the vertex for each of its two rows
    assert rep.tiles["compute_cycles"][4] == 2 * rep.tiles["compute_cycles"][9] == 2 * one_row
    assert "2 rows on the busiest tile" in exp.note
    per_tile = rep.memory.per_tile_bytes
    assert per_tile[4] - per_tile[9] >= 2 * 2048 - 2048  # its two rows (and their results)


def test_squeeze_device_array_and_mapping_nothing():
    a = tile_put_sharded(np.ones((3, 1, 4, 1), np.float32), TILES)
    assert a.squeeze().shape == (3, 4) and a.squeeze().tiles == TILES
    one = tile_put_sharded(np.ones((1, 1, 2), np.float32), (7,))
    assert one.squeeze().shape == (1, 2)  # the tile axis stays
    assert a.device_array is a.array
    assert tile_map(None, a) is a
    assert tile_map(None, a, one) == (a, one)


# ---- cycle counts inside loops -----------------------------------------------------------------
def _counted(fn, x):
    ipu = jax.devices("ipu")[0]
    compiled = jax.jit(fn).lower(jax.device_put(x, ipu)).compile()
    return compiled, cycles_of(compiled(jax.device_put(x, ipu)))[..., 0]


def test_cycle_counts_inside_a_loop_read_each_trip():
    x = np.ones((3, 256), np.float32)

    def f(x):
        def body(v, _):
            v, count = ipu_cycle_count(tile_map(lax.exp_p, v))
            return v, count.array

        return lax.scan(body, tile_put_sharded(x, TILES), None, length=4)[1]

    compiled, counts = _counted(f, x)
    ops = jax_ipu.report(compiled).ops
    (head,) = (i for i, o in enumerate(ops) if o.kind == "while")
    trip = sum(o.cycles for o in ops[head + 1:]) / 4  # the body's rows (and the cond's)
    # The put (446), the loop's sync (90), the first trip's exp (190 + 22 vectors a worker x 6
    # x 8 cycles, and its sync: 1,336) and the read itself (45); then a trip more each time.
    assert counts.tolist() == [1917 + k * trip for k in range(4)]
    assert 446 + 90 + 1336 + 45 == 1917 and trip == 2706
    # A second run reads the same counts.
    np.testing.assert_array_equal(_counted(f, x)[1], counts)


def test_cycle_counts_inside_nested_loops():
    x = np.ones((3, 256), np.float32)

    def f(x):
        def inner(v, _):
            v, count = ipu_cycle_count(tile_map(lax.exp_p, v))
            return v, count.array

        def outer(v, _):
            return lax.scan(inner, v, None, length=3)

        return lax.scan(outer, tile_put_sharded(x, TILES), None, length=2)[1]

    compiled, counts = _counted(f, x)
    (entry,) = jax_ipu.report(compiled).tiles["counters"].values()
    inner_trip, outer_trip = entry["strides"]
    assert entry["trips"] == [3, 2] and outer_trip > 3 * inner_trip > 0
    expected = entry["cycles"] + np.arange(2)[:, None] * outer_trip + \
        np.arange(3)[None, :] * inner_trip
    np.testing.assert_array_equal(counts, expected)


def test_device_attributes_tessellate_reads():
    device = jax.devices("ipu")[0]
    assert device.tile_clock_frequency == 1_330_000_000  # ipu2's clock
    assert device.num_worker_contexts == 6
    assert device.target_type == "IPU_MODEL"


def test_tile_constant_sharded_with_repeated_tiles():
    c = tile_constant_sharded(np.arange(4, dtype=np.int32), (1, 1, 2, 2))
    out = run("ipu", lambda: tile_map(lax.add_p, c, tile_put_replicated(np.int32(1),
                                                                         (1, 1, 2, 2))))
    np.testing.assert_array_equal(out.array, np.arange(4) + 1)
