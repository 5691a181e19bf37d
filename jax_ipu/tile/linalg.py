"""Linear algebra on tiles: Householder QR and Hessenberg, and the parallel Jacobi eigensolver.

A matrix is held a row (or a pair of columns) per tile and updated by MultiVertex codelets
(codelets/linalg.cpp) whose six workers split each row and hand partial sums to worker 0, the
design of TessellateIPU's linalg; the model costs each vertex by its declared estimate per
tile. The algorithms follow Golub and Van Loan, Matrix Computations, 5.1 and 8.5."""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_ipu.model.targets import (
    LOCAL_BYTES_PER_TILE_CYCLE,
    VERTEX_OVERHEAD_CYCLES,
    WORKER_THREADS_PER_TILE,
)
from jax_ipu.tile import custom
from jax_ipu.tile.array import TileShardedArray
from jax_ipu.tile.custom import declare_vertex
from jax_ipu.tile.maps import tile_map
from jax_ipu.tile.placement import (
    tile_constant_sharded,
    tile_data_barrier,
    tile_gather,
    tile_put_replicated,
    tile_put_sharded,
)
from jax_ipu.tile.validate import chip_tiles, tile_error
from jax_ipu.tile.workers import worker_offsets

CODELETS = Path(__file__).resolve().parent / "codelets" / "linalg.cpp"
F32 = np.dtype(np.float32)
# Each column of the Jacobi solver starts with its index, twice, as float bits (8 bytes, so
# the values stay 64-bit aligned).
INDEX_PREFIX = 2
# Worker 0's serial part of a correction vector: gathering five partial sums, a square root and
# a division, each instruction every 6th cycle (the workers issue in turn); about 60 of them.
SERIAL_WORKER_INSTRUCTIONS = 60
# JacobiSymSchur2 on one tile: TessellateIPU's measured figure for its own (C-3).
SCHUR_CYCLES = 250


def _streamed(nbytes: float) -> float:
    """A vertex that streams `nbytes` through its tile's memory: its launch, then 8 B a cycle."""
    return VERTEX_OVERHEAD_CYCLES + nbytes / LOCAL_BYTES_PER_TILE_CYCLE


def _f32(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, F32)


# ---- the vertices --------------------------------------------------------------------------
@declare_vertex("DotProduct1d", file=CODELETS)
def dot_product1d_p(x, y):
    """x . y as each worker's two partial sums: reduce the (12,) result to get the product."""
    return ({"partials": _f32(2 * WORKER_THREADS_PER_TILE)},
            {"worker_offsets": worker_offsets(x.size)}, {}, _streamed(8 * x.size))


@declare_vertex("QRCorrectionVector", file=CODELETS)
def qr_correction_vector_p(Rcol, sdiag):
    """Householder vector v of column col_idx (an attribute) of R, and 2 / |v|^2."""
    return ({"v": Rcol, "vrescale": _f32(1)}, {}, {},
            _streamed(8 * Rcol.size) + WORKER_THREADS_PER_TILE * SERIAL_WORKER_INSTRUCTIONS)


@declare_vertex("QRHouseholderRowUpdate", file=CODELETS)
def qr_householder_row_update_p(x, v, scale1, scale2):
    """x[start_idx:] -= scale1 scale2 v, in place (start_idx an attribute)."""
    return ({"x": x}, {"worker_offsets": worker_offsets(v.size)}, {}, _streamed(12 * v.size))


@declare_vertex("HessenbergCorrectionVector", file=CODELETS)
def hessenberg_correction_vector_p(Rcol, sdiag, cidx):
    """As qr_correction_vector_p, the column index read from the tile (`cidx`, int32 (1,))."""
    return ({"v": Rcol, "vrescale": _f32(1)}, {}, {},
            _streamed(8 * Rcol.size) + WORKER_THREADS_PER_TILE * SERIAL_WORKER_INSTRUCTIONS)


@declare_vertex("HessenbergHouseholderRowUpdate", file=CODELETS)
def hessenberg_householder_row_update_p(x, v, scale1, scale2, start_idx_):
    """As qr_householder_row_update_p, the start read from the tile (`start_idx_`)."""
    return ({"x": x}, {"worker_offsets": worker_offsets(v.size)}, {}, _streamed(12 * v.size))


@declare_vertex("JacobiSymSchur2", file=CODELETS)
def jacobi_sym_schur2_p(pq, pcol, qcol):
    """(c, s) of the symmetric 2x2 block of rows and columns pq = (p, q)."""
    return {"cs": _f32(2)}, {}, {}, SCHUR_CYCLES


@declare_vertex("JacobiUpdateFirstStep", file=CODELETS)
def jacobi_update_first_step_p(pcol, qcol):
    """A pair of columns (index-prefixed): its rotation, the columns rotated and its block set."""
    n = pcol.size - INDEX_PREFIX
    return ({"rotset_sorted": jax.ShapeDtypeStruct((2,), np.uint32), "cs": _f32(2),
             "pcol_updated": pcol, "qcol_updated": qcol},
            {"worker_offsets": worker_offsets(n)}, {}, _streamed(16 * n) + SCHUR_CYCLES)


@declare_vertex("JacobiUpdateSecondStep", file=CODELETS)
def jacobi_update_second_step_p(cs_arr, rotset_sorted_arr, rotset_idx_ignored, pcol, qcol):
    """Rows of a pair of columns rotated by every other pair's (c, s)."""
    n = pcol.size - INDEX_PREFIX
    pairs = rotset_sorted_arr.size // 2
    return ({"cs_arr": cs_arr, "pcol_updated": pcol, "qcol_updated": qcol},
            {"worker_offsets": worker_offsets(pairs, vector_size=1, grain_size=1)}, {},
            _streamed(16 * n + 16 * pairs))


@declare_vertex("JacobiUpdateEigenvectors", file=CODELETS)
def jacobi_update_eigenvectors_p(cs, vpcol, vqcol):
    """A pair of the eigenvectors' columns rotated by the pair's (c, s)."""
    n = vpcol.size - INDEX_PREFIX
    return ({"vpcol_out": vpcol, "vqcol_out": vqcol}, {"worker_offsets": worker_offsets(n)}, {},
            _streamed(16 * n))


VERTICES = (dot_product1d_p, qr_correction_vector_p, qr_householder_row_update_p,
            hessenberg_correction_vector_p, hessenberg_householder_row_update_p,
            jacobi_sym_schur2_p, jacobi_update_first_step_p, jacobi_update_second_step_p,
            jacobi_update_eigenvectors_p)
_built = threading.Event()


def _build_all() -> None:
    """Build every vertex of the file as one library (one compiler run) on first use."""
    if _built.is_set():
        return
    row, pair = _f32(8), _f32(8 + INDEX_PREFIX)
    u32, i32 = np.dtype(np.uint32), np.dtype(np.int32)
    one = _f32(1)
    samples = [
        (dot_product1d_p, [row, row], {}),
        (qr_correction_vector_p, [row, row], {"col_idx": 0}),
        (qr_householder_row_update_p, [row, row, one, one], {"start_idx": 0}),
        (hessenberg_correction_vector_p, [row, row, jax.ShapeDtypeStruct((1,), i32)], {}),
        (hessenberg_householder_row_update_p,
         [row, row, one, one, jax.ShapeDtypeStruct((1,), i32)], {}),
        (jacobi_sym_schur2_p, [jax.ShapeDtypeStruct((2,), u32), row, row], {}),
        (jacobi_update_first_step_p, [pair, pair], {}),
        (jacobi_update_second_step_p, [_f32(4, 2), jax.ShapeDtypeStruct((4, 2), u32),
                                       jax.ShapeDtypeStruct((), u32), pair, pair], {}),
        (jacobi_update_eigenvectors_p, [_f32(2), pair, pair], {}),
    ]
    calls = [custom.declared_call(v, avals, params) for v, avals, params in samples]
    custom.prebuild(calls, [avals for _, avals, _ in samples])
    _built.set()


for _vertex in VERTICES:
    _vertex.family = _build_all


# ---- QR ------------------------------------------------------------------------------------
def _square(x: Any, what: str) -> int:
    shape = np.shape(x)
    if len(shape) != 2 or shape[0] != shape[1] or shape[0] < 2 or shape[0] % 2:
        raise tile_error(f"{what}: x must be a square matrix of even size >= 2 (the vertices "
                         f"work on float pairs), got shape {shape}")
    if np.dtype(x.dtype) != F32:
        raise tile_error(f"{what}: x must be float32 (the vertices are), got {x.dtype}")
    return shape[0]


def ipu_qr_shard_inputs(x: Any, xsdiag: Any) -> tuple[TileShardedArray, ...]:
    """Q (the identity) a row per tile on tiles 0..N-1, R^T a row per tile on N..2N-1, and the
    diagonal's signs replicated on R's tiles."""
    n = _square(x, "ipu_qr")
    q_tiles, r_tiles = tuple(range(n)), tuple(range(n, 2 * n))
    q = tile_put_sharded(jnp.eye(n, dtype=x.dtype), q_tiles)
    rt = tile_put_sharded(jnp.transpose(x), r_tiles)
    return q, rt, tile_put_replicated(xsdiag, r_tiles)


def _reflect(rows: TileShardedArray, v: Any, scale: Any, start: int) -> TileShardedArray:
    """Each row -= (2 / |v|^2) (row . v) v, over the columns from `start` (v is zero before)."""
    vs = tile_put_replicated(v[start:], rows.tiles)
    scales = tile_put_replicated(scale, rows.tiles)
    partials = tile_map(dot_product1d_p, vs, rows[:, start:])
    dots = tile_map(lax.reduce_sum_p, partials, axes=(0,))
    return tile_map(qr_householder_row_update_p, rows, vs, dots, scales, start_idx=start)


def ipu_qr_iterations(q: TileShardedArray, rt: TileShardedArray,
                      sdiag: TileShardedArray) -> tuple[TileShardedArray, TileShardedArray]:
    """N - 1 Householder reflections: R <- H R (rows of R^T), Q <- Q H (rows of Q)."""
    n = len(q)
    for col in range(n - 1):
        start = (col // 2) * 2  # v is zero before col; start on a float pair
        v, vrescale = tile_map(qr_correction_vector_p, rt[col], sdiag[col], col_idx=col)
        rt = _reflect(rt, v.array[0], vrescale.array[0], start)
        q = _reflect(q, v.array[0], vrescale.array[0], start)
    return q, rt


def ipu_qr(x: Any, xsdiag: Any) -> tuple[TileShardedArray, TileShardedArray]:
    """QR of a square float32 matrix x on tiles: (Q, R^T) as TileShardedArrays (R^T, a row of it
    per tile, is what the reflections update). `xsdiag` are the signs that choose each
    diagonal's sign (np.sign(np.diag(x)) gives R with a positive-leaning diagonal)."""
    return ipu_qr_iterations(*ipu_qr_shard_inputs(x, xsdiag))


# ---- Hessenberg ----------------------------------------------------------------------------
def _row_tiles(n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Q's and R's tiles: a row per tile on disjoint halves of the chip when they fit, else
    both spread over the chip with several rows per tile."""
    chip, _ = chip_tiles()
    if 2 * n <= chip:
        return tuple(range(n)), tuple(range(n, 2 * n))
    per_tile = math.ceil(n / chip)
    tiles = tuple(sorted(i // per_tile for i in range(n)))
    return tiles, tiles


def ipu_hessenberg_shard_inputs(x: Any, xsdiag: Any) -> tuple[TileShardedArray, ...]:
    """Q (the identity) and R (= x) a row per tile, the signs replicated on R's tiles."""
    n = _square(x, "ipu_hessenberg")
    q_tiles, r_tiles = _row_tiles(n)
    q = tile_put_sharded(jnp.eye(n, dtype=x.dtype), q_tiles)
    r = tile_put_sharded(x, r_tiles)
    return q, r, tile_put_replicated(xsdiag, r_tiles)


_COLUMN = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,),
                                     start_index_map=(0,))


def _column(rows: TileShardedArray, index: TileShardedArray) -> TileShardedArray:
    """Element `index` of each row (a gather on each tile)."""
    return tile_map(lax.gather_p, rows, index, dimension_numbers=_COLUMN, slice_sizes=(1,),
                    mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS, unique_indices=False,
                    indices_are_sorted=False, fill_value=None)


def _hessenberg_reflect(rows: TileShardedArray, v: TileShardedArray, scale: TileShardedArray,
                        start: TileShardedArray) -> TileShardedArray:
    partials = tile_map(dot_product1d_p, v, rows)
    dots = tile_map(lax.reduce_sum_p, partials, axes=(0,))
    return tile_map(hessenberg_householder_row_update_p, rows, v, dots, scale, start)


def ipu_hessenberg_body(i: Any, carry: tuple[TileShardedArray, ...]) -> tuple[TileShardedArray,
                                                                               ...]:
    """Reflection i: v zeroes column i of R below its subdiagonal; R <- H R H, Q <- Q H."""
    q, r, sdiag = carry
    index = tile_put_replicated(jnp.reshape(i, (1, 1)).astype(np.uint32), r.tiles)
    rcol = _column(r, index)
    signs = _column(sdiag, index)
    here = (r.tiles[0],)  # the correction vector's tile
    col = tile_put_replicated(jnp.reshape(i + 1, (1,)).astype(np.int32), here)
    v, vrescale = tile_map(hessenberg_correction_vector_p,
                           tile_put_replicated(rcol.array.reshape(-1), here),
                           tile_put_replicated(signs.array.reshape(-1), here), col)
    vq, vr = tile_put_replicated(v.array[0], q.tiles), tile_put_replicated(v.array[0], r.tiles)
    sq = tile_put_replicated(vrescale.array[0], q.tiles)
    sr = tile_put_replicated(vrescale.array[0], r.tiles)
    zero_q = tile_put_replicated(np.zeros(1, np.int32), q.tiles)
    zero_r = tile_put_replicated(np.zeros(1, np.int32), r.tiles)
    # H R: the columns of R, as rows of R^T; Q H beside it, on Q's own tiles
    rt = _hessenberg_reflect(tile_put_sharded(r.array.T, r.tiles), vr, sr, zero_r)
    q = _hessenberg_reflect(q, vq, sq, zero_q)
    rt, q = tile_data_barrier(rt, q)
    # (H R) H: the rows of H R
    r = _hessenberg_reflect(tile_put_sharded(rt.array.T, r.tiles), vr, sr, zero_r)
    return q, r, sdiag


def ipu_hessenberg_iterations(q: TileShardedArray, r: TileShardedArray,
                              sdiag: TileShardedArray) -> tuple[TileShardedArray,
                                                                TileShardedArray]:
    """The N - 2 reflections, as one fori_loop."""
    q, r, _ = lax.fori_loop(0, len(q) - 2, ipu_hessenberg_body, (q, r, sdiag))
    return q, r


def ipu_hessenberg(x: Any) -> tuple[TileShardedArray, TileShardedArray]:
    """Hessenberg decomposition of a square float32 matrix on tiles: (Q, H) as
    TileShardedArrays, a row per tile, with x = Q H Q^T and H zero below its subdiagonal."""
    return ipu_hessenberg_iterations(
        *ipu_hessenberg_shard_inputs(x, jnp.sign(jnp.diag(x))))


# ---- Jacobi eigensolver --------------------------------------------------------------------
def jacobi_initial_rotation_set(n: int) -> np.ndarray:
    """The first round's pairs (n/2, 2): (0, 1), (2, 3), ..."""
    return np.arange(n, dtype=np.uint32).reshape(-1, 2)


def jacobi_next_rotation_set(rotset: np.ndarray) -> np.ndarray:
    """The next round of the round-robin: p columns move a place right, q columns a place left,
    the first p fixed (so every pair meets once in n - 1 rounds)."""
    p, q = rotset[:, 0], rotset[:, 1]
    new_p = np.concatenate([p[:1], q[:1], p[1:-1]])
    new_q = np.concatenate([q[1:], p[-1:]])
    return np.stack([new_p, new_q], axis=1)


def jacobi_sort_rotation_set(rotset: np.ndarray) -> np.ndarray:
    """Each pair with p < q."""
    return np.sort(rotset, axis=1)


def jacobi_initial_pqindices(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The p and q index prefixes of the first round's columns, each index twice: (n/2, 2)."""
    rotset = jacobi_initial_rotation_set(n)
    return np.repeat(rotset[:, :1], 2, axis=1), np.repeat(rotset[:, 1:], 2, axis=1)


def tile_sharded_pq_columns(pcols: Any, qcols: Any,
                            tiles: tuple[int, ...]) -> tuple[TileShardedArray, TileShardedArray]:
    """The p and q columns (n/2, n) with their index prefix, a pair per tile: (n/2, n + 2)."""
    p_index, q_index = jacobi_initial_pqindices(2 * np.shape(pcols)[0])
    prefixed = [jnp.concatenate([jnp.asarray(index.view(np.float32)), jnp.asarray(cols, F32)],
                                axis=1)
                for index, cols in ((p_index, pcols), (q_index, qcols))]
    return tile_put_sharded(prefixed[0], tiles), tile_put_sharded(prefixed[1], tiles)


def tile_rotate_columns(pcols: TileShardedArray,
                        qcols: TileShardedArray) -> tuple[TileShardedArray, TileShardedArray]:
    """The columns moved between tiles for the next round (jacobi_next_rotation_set), by one
    gather from both sets (each tile holding two rows: its p and its q column)."""
    half = len(pcols)
    both = TileShardedArray(jnp.concatenate([pcols.array, qcols.array]),
                            (*pcols.tiles, *qcols.tiles))
    moved = jacobi_next_rotation_set(np.stack([np.arange(half), np.arange(half, 2 * half)], 1))
    return (tile_gather(both, moved[:, 0].tolist(), pcols.tiles),
            tile_gather(both, moved[:, 1].tolist(), qcols.tiles))


def ipu_jacobi_eigh_body(step: Any, carry: tuple[TileShardedArray, ...]) -> tuple[
        TileShardedArray, ...]:
    """One round: columns moved to their new pairs; each pair's rotation (c, s) found and its
    columns rotated (A J); every tile's rows rotated by the others' (J^T A); V J."""
    a_p, a_q, v_p, v_q = carry
    a_tiles, v_tiles = a_p.tiles, v_p.tiles
    a_p, a_q = tile_rotate_columns(a_p, a_q)
    v_p, v_q = tile_rotate_columns(v_p, v_q)
    a_p, a_q, v_p, v_q = tile_data_barrier(a_p, a_q, v_p, v_q)
    own = tile_constant_sharded(np.arange(len(a_tiles), dtype=np.uint32), a_tiles)
    rotset, cs, a_p, a_q = tile_map(jacobi_update_first_step_p, a_p, a_q)
    every_rotset = tile_put_replicated(rotset.array, a_tiles)
    every_cs = tile_put_replicated(cs.array, a_tiles)
    v_cs = tile_put_sharded(cs.array, v_tiles)
    every_cs, every_rotset, v_cs = tile_data_barrier(every_cs, every_rotset, v_cs)
    _, a_p, a_q = tile_map(jacobi_update_second_step_p, every_cs, every_rotset, own, a_p, a_q)
    v_p, v_q = tile_map(jacobi_update_eigenvectors_p, v_cs, v_p, v_q)
    return a_p, a_q, v_p, v_q


def ipu_jacobi_eigh_iteration(sweep: Any, carry: tuple[TileShardedArray, ...]) -> tuple[
        TileShardedArray, ...]:
    """One sweep: n - 1 rounds, after which the columns are back on their first tiles."""
    n = 2 * len(carry[0])
    return lax.fori_loop(1, n, ipu_jacobi_eigh_body, carry)


def ipu_jacobi_eigh(x: Any, num_iters: int = 1) -> tuple[Any, Any]:
    """`num_iters` Jacobi sweeps of a symmetric float32 matrix (n even, n/2 + 1 <= tiles):
    (A, V^T), A nearly diagonal with the eigenvalues, V^T's rows the eigenvectors. A's columns
    are on tiles 1..n/2 (a pair per tile), V's on the next n/2."""
    n = _square(x, "ipu_eigh")
    half = n // 2
    if n < 4:
        raise tile_error(f"ipu_eigh: x must be at least 4x4 (two pairs of columns), got {n}x{n}")
    if n + 1 > chip_tiles()[0]:
        raise tile_error(f"ipu_eigh: a {n}x{n} matrix needs {n + 1} tiles (a pair of columns of "
                         f"A and of V each), more than the chip's {chip_tiles()[0]}")
    a_tiles, v_tiles = tuple(range(1, half + 1)), tuple(range(half + 1, n + 1))
    eye = np.eye(n, dtype=np.float32)
    a_p, a_q = tile_sharded_pq_columns(x[0::2], x[1::2], a_tiles)
    v_p, v_q = tile_sharded_pq_columns(eye[0::2], eye[1::2], v_tiles)
    a_p, a_q, v_p, v_q = lax.fori_loop(0, num_iters, ipu_jacobi_eigh_iteration,
                                       (a_p, a_q, v_p, v_q))

    def assemble(p: TileShardedArray, q: TileShardedArray) -> Any:
        # back on their first tiles: the pairs (0, 1), (2, 3), ... in order
        rows = jnp.stack([p.array[:, INDEX_PREFIX:], q.array[:, INDEX_PREFIX:]], axis=1)
        return rows.reshape(n, n)

    return assemble(a_p, a_q), assemble(v_p, v_q)


def ipu_eigh(x: Any, *, lower: bool = True, symmetrize_input: bool = False,
             sort_eigenvalues: bool = True, num_iters: int = 1) -> tuple[Any, Any]:
    """Eigenvectors (as columns) and eigenvalues of a symmetric float32 matrix, by `num_iters`
    Jacobi sweeps on tiles (a few give float32 accuracy); `lower` is accepted as jnp's, the
    matrix being symmetric; sorted ascending unless sort_eigenvalues=False."""
    if symmetrize_input:
        x = (x + jnp.transpose(x)) / 2
    a, vt = ipu_jacobi_eigh(x, num_iters=num_iters)
    values = jnp.diagonal(a)
    if sort_eigenvalues:
        values, index = lax.sort_key_val(values, lax.iota(np.int32, values.shape[0]))
        vt = vt[index]
    return jnp.transpose(vt), values
