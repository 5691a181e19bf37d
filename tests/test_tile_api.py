"""jax_ipu.tile's placement, movement and mapped primitives on ipu against cpu, inside jit, scan,
fori_loop, grad and donation, and every bad-input error with the user's line."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jax_ipu.errors import IpuTileError, IpuTileTypeError
from jax_ipu.tile import (
    TileShardedArray,
    tile_constant_replicated,
    tile_constant_sharded,
    tile_data_barrier,
    tile_gather,
    tile_map,
    tile_put_replicated,
    tile_put_sharded,
)

TILES = (0, 2, 5)
RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 8)).astype(np.float32)
Y = RNG.standard_normal((3, 8)).astype(np.float32)
W = RNG.standard_normal(8).astype(np.float32)


def both(fn, *args):
    """fn jitted on ipu and on cpu; their outputs as numpy trees (asserted bit-equal)."""
    outs = []
    for platform in ("ipu", "cpu"):
        device = jax.devices(platform)[0]
        out = jax.jit(fn)(*(jax.device_put(a, device) for a in args))
        outs.append(jax.tree.map(np.asarray, out))
    for a, b in zip(jax.tree.leaves(outs[0]), jax.tree.leaves(outs[1]), strict=True):
        np.testing.assert_array_equal(a, b)
    return outs[0]


def test_put_sharded_and_replicated():
    def f(x, w):
        a, b = tile_put_sharded(x, TILES), tile_put_replicated(w, TILES)
        assert isinstance(a, TileShardedArray) and a.tiles == TILES and b.shape == (3, 8)
        return a, b

    a, b = both(f, X, W)
    assert a.tiles == TILES
    np.testing.assert_array_equal(a.array, X)
    np.testing.assert_array_equal(b.array, np.stack([W] * 3))


def test_constants_sharded_and_replicated():
    data = np.arange(6, dtype=np.float32).reshape(3, 2)

    def f(x):
        return (x, tile_constant_sharded(data, TILES), tile_constant_replicated(data[0], (7, 9)))

    _, c, r = both(f, X)
    np.testing.assert_array_equal(c.array, data)
    np.testing.assert_array_equal(r.array, np.stack([data[0]] * 2))
    assert r.tiles == (7, 9)


def test_gather_moves_rows_and_barrier_keeps_values():
    def f(x, y):
        a = tile_put_sharded(x, TILES)
        g = tile_gather(a, (2, 0, 0, 1), (1, 3, 4, 6))
        b, c = tile_data_barrier(a, tile_put_sharded(y, (7, 8, 9)))
        return g, b, c

    g, b, c = both(f, X, Y)
    np.testing.assert_array_equal(g.array, X[[2, 0, 0, 1]])
    assert g.tiles == (1, 3, 4, 6) and b.tiles == TILES and c.tiles == (7, 8, 9)
    np.testing.assert_array_equal(c.array, Y)


def test_indexing_reshape_and_concatenate():
    def f(x):
        a = tile_put_sharded(x.reshape(3, 2, 4), TILES)
        return a[1], a[:, 1], a.reshape(3, 8), TileShardedArray.concatenate(
            [a[:1], tile_put_sharded(x[:2].reshape(2, 2, 4), (7, 8))])

    one, col, flat, joined = both(f, X)
    assert one.tiles == (2,) and one.shape == (1, 2, 4)
    np.testing.assert_array_equal(col.array, X.reshape(3, 2, 4)[:, 1])
    assert flat.shape == (3, 8) and joined.tiles == (0, 7, 8)


UNARY = [(lax.exp_p, {}), (lax.neg_p, {}), (lax.sqrt_p, {}), (lax.abs_p, {}),
         (lax.tanh_p, {})]
BINARY = [lax.add_p, lax.sub_p, lax.mul_p, lax.div_p, lax.max_p, lax.min_p]
COMPARE = [lax.lt_p, lax.eq_p, lax.ge_p]


@pytest.mark.parametrize("prim,params", UNARY, ids=lambda p: getattr(p, "name", ""))
def test_unary(prim, params):
    x = np.abs(X) + 0.5
    out = both(lambda x: tile_map(prim, tile_put_sharded(x, TILES), **params), x)
    reference = jax.vmap(lambda v: prim.bind(v, **({"accuracy": None} if prim in (
        lax.exp_p, lax.sqrt_p, lax.tanh_p) else {})))(x)
    np.testing.assert_array_equal(out.array, np.asarray(reference))


@pytest.mark.parametrize("prim", BINARY + COMPARE, ids=lambda p: p.name)
def test_binary_and_comparisons(prim):
    out = both(lambda x, y: tile_map(prim, tile_put_sharded(x, TILES), tile_put_sharded(y, TILES)),
               X, Y)
    np.testing.assert_array_equal(out.array, np.asarray(prim.bind(X, Y)))


def test_select():
    def f(x, y):
        a, b = tile_put_sharded(x, TILES), tile_put_sharded(y, TILES)
        return tile_map(lax.select_n_p, tile_map(lax.gt_p, a, b), b, a)

    out = both(f, X, Y)
    np.testing.assert_array_equal(out.array, np.maximum(X, Y))


@pytest.mark.parametrize("prim", [lax.reduce_sum_p, lax.reduce_max_p, lax.reduce_min_p],
                         ids=lambda p: p.name)
def test_reductions(prim):
    out = both(lambda x: tile_map(prim, tile_put_sharded(x, TILES), axes=(0,)), X)
    assert out.shape == (3,)
    np.testing.assert_array_equal(out.array, np.asarray(jax.vmap(
        lambda v: prim.bind(v, axes=(0,), out_sharding=None))(X)))


@pytest.mark.parametrize("prim", [lax.cumsum_p, lax.cummax_p], ids=lambda p: p.name)
def test_cumulative(prim):
    out = both(lambda x: tile_map(prim, tile_put_sharded(x, TILES), axis=0), X)
    np.testing.assert_array_equal(out.array, np.asarray(
        jax.vmap(lambda v: prim.bind(v, axis=0, reverse=False))(X)))


def test_dot_of_small_operands():
    a = RNG.standard_normal((3, 4, 4)).astype(np.float32)
    b = RNG.standard_normal((3, 4, 4)).astype(np.float32)
    out = both(lambda a, b: tile_map(lax.dot_general_p, tile_put_sharded(a, TILES),
                                     tile_put_sharded(b, TILES),
                                     dimension_numbers=(((1,), (0,)), ((), ()))), a, b)
    np.testing.assert_allclose(out.array, np.einsum("tij,tjk->tik", a, b), rtol=1e-5)


def test_sort():
    # sort has several results (one per operand): a tuple, as from lax.sort_p.bind
    (out,) = both(lambda x: tile_map(lax.sort_p, tile_put_sharded(x, TILES)), X)
    np.testing.assert_array_equal(out.array, np.sort(X, axis=1))


def test_random_bits_per_tile():
    keys = np.arange(12, dtype=np.uint32).reshape(3, 4)
    new_keys, bits = both(lambda k: tile_map(lax.rng_bit_generator_p, tile_put_sharded(k, TILES),
                                             shape=(16,)), keys)
    assert bits.shape == (3, 16) and bits.dtype == np.uint32
    assert len({tuple(r) for r in np.asarray(bits.array)}) == 3  # each tile its own stream


def test_no_argument_primitive_needs_tiles():
    out = both(lambda x: (x, tile_map(lax.iota_p, dtype=np.int32, shape=(4,), dimension=0,
                                       sharding=None, tiles=(1, 2)))[1], X)
    np.testing.assert_array_equal(out.array, np.tile(np.arange(4), (2, 1)))


# ---- transformations ---------------------------------------------------------------------
def test_fori_loop_and_scan_carry_tile_arrays():
    def looped(x):
        a = tile_put_sharded(x, TILES)
        a = lax.fori_loop(0, 3, lambda _, v: tile_map(lax.add_p, v, v), a)

        def body(c, _):
            c = tile_gather(c, (1, 2, 0), TILES)
            return c, tile_map(lax.reduce_sum_p, c, axes=(0,)).array
        return lax.scan(body, a, None, length=2)

    carry, sums = both(looped, X)
    assert carry.tiles == TILES
    np.testing.assert_array_equal(carry.array, (X * 8)[[1, 2, 0]][[1, 2, 0]])
    np.testing.assert_allclose(sums[0], (X * 8)[[1, 2, 0]].sum(1), rtol=1e-6)


def test_donated_tile_array():
    ipu = jax.devices("ipu")[0]
    a = jax.jit(lambda x: tile_put_sharded(x, TILES))(jax.device_put(X, ipu))
    step = jax.jit(lambda a: tile_map(lax.mul_p, a, a), donate_argnums=0)
    out = step(a)
    np.testing.assert_array_equal(np.asarray(out.array), X * X)
    assert a.array.is_deleted()


def test_grad_through_tile_ops():
    def loss(x):
        a = tile_put_sharded(x, TILES)
        return tile_map(lax.exp_p, tile_gather(a, (1, 2, 0), TILES)).array.sum()

    for platform in ("ipu", "cpu"):
        g = jax.jit(jax.grad(loss))(jax.device_put(X, jax.devices(platform)[0]))
        np.testing.assert_allclose(np.asarray(g), np.exp(X), rtol=1e-6)


def test_composites_reach_the_program():
    text = jax.jit(lambda x: tile_map(lax.neg_p, tile_put_sharded(x, TILES))).lower(X).as_text()
    assert 'stablehlo.composite "jax_ipu.tile_put"' in text
    assert 'stablehlo.composite "jax_ipu.tile_map"' in text


# ---- errors ------------------------------------------------------------------------------
def _line_of(fn) -> str:
    return f"{__file__}:{fn.__code__.co_firstlineno + 1}"


@pytest.mark.parametrize("tiles,words", [
    ((0, 1), "2 tiles for 3 rows"),
    ((0, 1, 1472), "outside 0..1471"),
    ((0, 1, -1), "outside 0..1471"),
    (3, "got the int 3"),
    ((), "no tiles given"),
    ((0.5, 1, 2), "flat sequence of int"),
])
def test_bad_tiles_are_clear_errors_with_the_users_line(tiles, words):
    def f(x):
        return tile_put_sharded(x, tiles)

    with pytest.raises(IpuTileError) as err:
        jax.jit(f)(X)
    assert words in str(err.value)
    assert _line_of(f) in str(err.value)


def test_tiles_past_a_smaller_configured_chip(monkeypatch):
    from jax_ipu.tile import validate

    monkeypatch.setattr(validate, "chip_tiles", lambda: (4, "ipu2"))
    with pytest.raises(IpuTileError, match="outside 0..3: the ipu2 IPU Model has 4 tiles"):
        tile_put_replicated(W, (1, 4))


def test_plain_array_where_a_tile_array_is_needed():
    def f(x):
        return tile_map(lax.neg_p, x)

    with pytest.raises(IpuTileTypeError, match="argument 0 is a .*not a TileShardedArray") as err:
        jax.jit(f)(X)
    assert _line_of(f) in str(err.value)
    with pytest.raises(IpuTileTypeError, match="not a TileShardedArray"):
        tile_data_barrier(tile_put_sharded(X, TILES), X)


def test_mapped_arguments_on_different_tiles():
    with pytest.raises(IpuTileError, match="lives on other tiles"):
        jax.jit(lambda x: tile_map(lax.add_p, tile_put_sharded(x, TILES),
                                   tile_put_sharded(x, (1, 2, 3))))(X)


def test_other_bad_inputs():
    with pytest.raises(IpuTileError, match=r"indices \[3\] outside 0..2"):
        tile_gather(X, (0, 3), (1, 2))
    with pytest.raises(IpuTileTypeError, match="must be a numpy array"):
        jax.jit(lambda x: tile_constant_sharded(x, TILES))(X)
    with pytest.raises(IpuTileError, match="needs tiles="):
        tile_map(lax.iota_p, dtype=np.int32, shape=(4,), dimension=0, sharding=None)
    with pytest.raises(IpuTileTypeError, match="not a jax primitive"):
        tile_map(jnp.sin, tile_put_sharded(X, TILES))
    with pytest.raises(IpuTileTypeError, match="tile_map\\(add\\) on tile shapes"):
        tile_map(lax.add_p, tile_put_sharded(X, TILES), tile_put_sharded(X[:, :4], TILES))
    with pytest.raises(IpuTileError, match="would change the tile axis"):
        tile_put_sharded(X, TILES).reshape(8, 3)
    with pytest.raises(IpuTileError, match="scalar"):
        tile_put_sharded(np.float32(1), TILES)
