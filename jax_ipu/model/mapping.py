"""Tile mapping: how a tensor's bytes are spread over tiles, and where each element of a view lives.

Whole 64-bit grains per tile, no tile below a minimum share, a rotating start tile for memory;
views (slices, pads, transposes...) keep their elements on the tiles of the tensor they view."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from jax_ipu.model.ir import Op, TensorType
from jax_ipu.model.targets import MIN_BYTES_PER_TILE, TENSOR_GRAIN_BYTES
from jax_ipu.model.windows import static_window

# Elements whose tiles are looked at one by one; larger values are judged on a fixed sample
# (model/costs.py's elementwise rule, for operands that are views or broadcasts).
EXACT_ELEMENTS = 1 << 17
LINEAR_SAMPLE = 1 << 15
_GOLDEN = (5 ** 0.5 - 1) / 2
# Views stacked on views before the innermost are materialised (Mapped), so that a chain of
# n views costs n bounded steps, never a recursion n deep.
MAX_VIEW_DEPTH = 8


def tiles_used(nbytes: int, num_tiles: int) -> int:
    """How many tiles a linearly mapped tensor of nbytes occupies."""
    if nbytes <= 0:
        return 0
    grains = -(-nbytes // TENSOR_GRAIN_BYTES)
    return max(1, min(num_tiles, grains, nbytes // MIN_BYTES_PER_TILE))


def linear_mapping(nbytes: int, num_tiles: int, start: int = 0) -> np.ndarray:
    """Bytes on each tile (length num_tiles) of a tensor mapped linearly from tile `start`.

    Grains are dealt as evenly as possible; the partial last grain costs a whole one, as
    tile allocations are in whole vectors."""
    out = np.zeros(num_tiles, dtype=np.int64)
    tiles = tiles_used(nbytes, num_tiles)
    if tiles == 0:
        return out
    grains = -(-nbytes // TENSOR_GRAIN_BYTES)
    base, extra = divmod(grains, tiles)
    share = np.full(tiles, base * TENSOR_GRAIN_BYTES, dtype=np.int64)
    share[:extra] += TENSOR_GRAIN_BYTES
    idx = (start + np.arange(tiles)) % num_tiles
    out[idx] = share
    return out


def uniform_share(nbytes: int, tiles: int, num_tiles: int, start: int = 0) -> np.ndarray:
    """Bytes per tile when nbytes are split evenly over `tiles` tiles (e.g. a matmul plan)."""
    out = np.zeros(num_tiles, dtype=np.int64)
    tiles = max(1, min(tiles, num_tiles))
    if nbytes <= 0:
        return out
    idx = (start + np.arange(tiles)) % num_tiles
    out[idx] = -(-nbytes // tiles)
    return out


# --- Where elements live ------------------------------------------------------------------------
_ids = itertools.count(1)
# A key names one stored element: (tensor number << KEY_SHIFT) + its flat index; -1 is a
# constant that every tile holds (the padding value of a pad).
KEY_SHIFT = 40


class Placement:
    """The tile of each element (by flat row-major index) of one value."""

    size: int

    def locate(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(tiles, keys) of the elements at flat indices r; tile -1 for constants."""
        raise NotImplementedError

    def named_tiles(self) -> np.ndarray | None:
        """The tiles the program itself put this value on, a share each (jax_ipu.tile), or
        None when the model chose where it lives."""
        return None


@dataclass(eq=False)
class Linear(Placement):
    """A tensor of its own, spread in order over the tiles it uses: element r on tile
    r * tiles // size (the linear mapping, counted in elements so that tensors of one shape
    and different dtypes line up, as Poplar maps a result like its operand)."""

    size: int
    tiles: int
    uid: int = 0

    def __post_init__(self) -> None:
        self.uid = self.uid or next(_ids)

    def locate(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        tiles = r * self.tiles // max(1, self.size)
        return tiles, (self.uid << KEY_SHIFT) + r


@dataclass(eq=False)
class View(Placement):
    """Elements that stay where the viewed tensors keep them: index(r) gives, for each result
    element, which base it comes from and its flat index there (-1: a constant).

    `depth` counts the views stacked up to a base that is not a view; make_view() keeps it
    at most MAX_VIEW_DEPTH, so locating an element never recurses further."""

    size: int
    bases: tuple[Placement, ...]
    index: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
    depth: int = 1

    def locate(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        which, idx = self.index(r)
        tiles = np.full(r.shape, -1, dtype=np.int64)
        keys = np.full(r.shape, -1, dtype=np.int64)
        for k, base in enumerate(self.bases):
            sel = (which == k) & (idx >= 0)
            if sel.any():
                tiles[sel], keys[sel] = base.locate(idx[sel])
        return tiles, keys


@dataclass(eq=False)
class Mapped(Placement):
    """A value whose elements sit on tiles given one by one, stored as runs: element r is on
    runs_tile[i] for the last run start runs_start[i] <= r (-1: a constant every tile holds).
    Built from a sample of elements (sample_indices), each standing for those up to the next.

    Keys name the stored elements for distinct counting: a tensor of its own (keys None:
    its uid and flat index), or, for a materialised view, the keys of what it views, one per
    `key_step` elements."""

    size: int
    runs_start: np.ndarray
    runs_tile: np.ndarray
    keys: np.ndarray | None = None
    key_step: int = 1
    uid: int = 0

    def __post_init__(self) -> None:
        self.uid = self.uid or next(_ids)

    @classmethod
    def from_sample(cls, size: int, r: np.ndarray, tiles: np.ndarray,
                    keys: np.ndarray | None = None) -> Mapped:
        """The placement whose element r[i] (and those up to r[i + 1]) is on tiles[i]."""
        if not len(r):
            return cls(size, np.zeros(1, np.int64), np.full(1, -1, np.int64))
        change = np.flatnonzero(np.diff(tiles)) + 1
        starts = np.concatenate(([0], change))
        step = int(r[1] - r[0]) if len(r) > 1 else 1
        return cls(size, r[starts].astype(np.int64), tiles[starts].astype(np.int64), keys,
                   max(1, step))

    @classmethod
    def from_tiles(cls, tiles: np.ndarray) -> Mapped:
        """The placement whose element i is on tiles[i] (a layout given element by element,
        e.g. by a program that places its own tensors)."""
        tiles = np.asarray(tiles, dtype=np.int64)
        return cls.from_sample(len(tiles), np.arange(len(tiles), dtype=np.int64), tiles)

    def locate(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        run = np.searchsorted(self.runs_start, r, side="right") - 1
        tiles = self.runs_tile[np.maximum(run, 0)]
        if self.keys is None:
            keys = (self.uid << KEY_SHIFT) + r
        else:
            keys = self.keys[np.minimum(r // self.key_step, len(self.keys) - 1)]
        return tiles, np.where(tiles < 0, -1, keys)

    def counts(self, num_tiles: int) -> np.ndarray:
        """Elements on each tile (constants, on tile -1, left out)."""
        lengths = np.diff(np.append(self.runs_start, self.size))
        held = self.runs_tile >= 0
        return np.bincount(self.runs_tile[held], weights=lengths[held], minlength=num_tiles)


@dataclass(eq=False)
class Everywhere(Placement):
    """A constant splat: every tile holds its own copy, so reading it moves nothing."""

    size: int

    def locate(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.full(r.shape, -1, dtype=np.int64), np.full(r.shape, -1, dtype=np.int64)


def fresh(t: TensorType, num_tiles: int) -> Linear:
    """Where a newly computed value lives: linearly over the tiles its bytes need."""
    return Linear(t.size, max(1, tiles_used(t.nbytes, num_tiles)))


def materialise(p: Placement) -> Mapped:
    """A placement of its own with the tiles and keys `p` gives each element (sampled as
    sample_indices says), so that nothing viewed through it is looked up again."""
    r, scale, _ = sample_indices(p.size, p)
    tiles, keys = p.locate(r)
    mapped = Mapped.from_sample(p.size, r, tiles)
    mapped.keys, mapped.key_step = keys, max(1, int(scale))
    return mapped


def make_view(size: int, bases: tuple[Placement, ...],
              index: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> Placement:
    """A view of `bases`; a view of views is stacked up to MAX_VIEW_DEPTH deep, then its
    bases are materialised, so long chains of views cost the same per op."""
    depth = 1 + max((b.depth for b in bases if isinstance(b, View)), default=0)
    if depth > MAX_VIEW_DEPTH:
        bases = tuple(materialise(b) if isinstance(b, View) else b for b in bases)
        depth = 1
    return View(size, bases, index, depth)


def _unravel(r: np.ndarray, shape: tuple[int, ...]) -> list[np.ndarray]:
    if not shape:
        return []
    return list(np.unravel_index(r, shape))


def _ravel(idx: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    flat = np.zeros_like(idx[0]) if idx else np.zeros(1, dtype=np.int64)
    for i, n in zip(idx, shape, strict=True):
        flat = flat * n + i
    return flat


def _single(index: Callable[[list[np.ndarray]], tuple[list[np.ndarray], np.ndarray]],
            out: TensorType, src: TensorType
            ) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """An index function over one base, from a map of the result's multi-indices to the
    base's and a mask of the elements that have one (the others are constants)."""
    def fn(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        res = _unravel(r, out.shape)
        idx, valid = index(res)
        flat = _ravel(idx, src.shape) if src.shape else np.zeros_like(r)
        return np.zeros_like(r), np.where(valid, flat, -1)
    return fn


def _all_valid(res: list[np.ndarray]) -> np.ndarray:
    return np.ones(res[0].shape if res else (1,), dtype=bool)


def view_index(op: Op) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None:
    """For an op whose result is a view of its operands (slice, pad, transpose, reverse,
    broadcast, concatenate, reshape), the index function of that view; else None."""
    if not op.results or not op.operands:
        return None
    out, a = op.results[0], op.operands[0]
    attrs, kind = op.attributes, op.kind
    if kind in _SAME_ELEMENTS and out.size == a.size:
        return lambda r: (np.zeros_like(r), r)
    if kind in ("slice", "dynamic_slice"):
        if kind == "slice":
            start, stride = attrs["start_indices"], attrs.get("strides") or [1] * len(a.shape)
        else:  # at constant indices (a static slice): op_class says so before this is asked
            window = static_window(op)
            if window is None:
                return None
            start, stride = window.starts, [1] * len(a.shape)
        return _single(lambda res: ([s + i * st for i, s, st in zip(res, start, stride,
                                                                       strict=True)],
                                    _all_valid(res)), out, a)
    if kind == "reverse":
        dims = set(attrs.get("dimensions") or [])
        return _single(lambda res: ([n - 1 - i if d in dims else i
                                     for d, (i, n) in enumerate(zip(res, a.shape, strict=True))],
                                    _all_valid(res)), out, a)
    if kind == "transpose":
        perm = attrs["permutation"]

        def transposed(res):
            idx = [None] * len(perm)
            for i, p in enumerate(perm):
                idx[p] = res[i]
            return idx, _all_valid(res)
        return _single(transposed, out, a)
    if kind in ("broadcast_in_dim", "broadcast"):
        dims = attrs.get("broadcast_dimensions") or []
        if not a.shape:
            return lambda r: (np.zeros_like(r), np.zeros_like(r))
        return _single(lambda res: ([res[d] if n > 1 else np.zeros_like(res[d])
                                     for d, n in zip(dims, a.shape, strict=True)],
                                    _all_valid(res)), out, a)
    if kind == "pad":
        # the result's shape already says how far the high padding reaches
        low = attrs["edge_padding_low"]
        inner = attrs.get("interior_padding") or [0] * len(low)

        def padded(res):
            idx, valid = [], _all_valid(res)
            for i, lo, step, n in zip(res, low, inner, a.shape, strict=True):
                q, rem = np.divmod(i - lo, step + 1)
                valid &= (rem == 0) & (q >= 0) & (q < n)
                idx.append(np.clip(q, 0, max(0, n - 1)))
            return idx, valid
        return _single(padded, out, a)
    if kind == "concatenate":
        axis = attrs["dimension"]
        offsets = np.cumsum([0] + [t.shape[axis] for t in op.operands])

        def joined(r):
            res = _unravel(r, out.shape)
            which = np.searchsorted(offsets, res[axis], side="right") - 1
            flat = np.zeros_like(r)
            for k, t in enumerate(op.operands):
                sel = which == k
                if sel.any():
                    sub = [i[sel] for i in res]
                    sub[axis] = sub[axis] - offsets[k]
                    flat[sel] = _ravel(sub, t.shape)
            return which, flat
        return joined
    return None


# Views whose elements keep their flat indices: the result is placed as its operand
# (a reduction of size-1 dimensions only is a reshape; a conversion to its own type is nothing).
_SAME_ELEMENTS = frozenset({"reshape", "bitcast_convert", "reduce", "convert"})
# Ops whose k-th result lives where their k-th operand does.
_SAME_AS_OPERANDS = frozenset({"while", "optimization_barrier", "scatter",
                               "dynamic_update_slice"})


def sample_indices(size: int, home: Placement) -> tuple[np.ndarray, float, int]:
    """The result elements judged for a value of `size` elements living as `home` says:
    (flat indices, how many elements each stands for, tiles whose counts are complete).

    A result spread linearly repeats one pattern over its tiles: the whole tiles within
    LINEAR_SAMPLE elements from the first are judged (exactly; -1: all tiles). Otherwise all
    elements up to EXACT_ELEMENTS, beyond that every k-th element (an estimate)."""
    if isinstance(home, Linear) and size > LINEAR_SAMPLE:
        whole = max(1, LINEAR_SAMPLE * home.tiles // size)
        end = -(-whole * size // home.tiles)
        return np.arange(end, dtype=np.int64), 1.0, whole
    if size <= EXACT_ELEMENTS:
        return np.arange(size, dtype=np.int64), 1.0, -1
    step = -(-size // EXACT_ELEMENTS)
    return _moving_sample(size, step), float(step), -1


@functools.lru_cache(maxsize=64)
def _moving_sample(size: int, step: int) -> np.ndarray:
    """One element of each run of `step`, at an offset that moves from run to run (the golden
    ratio's multiples): every step-th element of a transposed view can fall in one column of
    it, and stand for the whole on that column's few tiles. Read-only: it is shared."""
    strata = np.arange(0, size, step, dtype=np.int64)
    offsets = (np.arange(len(strata)) * _GOLDEN % 1.0 * step).astype(np.int64)
    sample = np.minimum(strata + offsets, size - 1)
    sample.flags.writeable = False
    return sample


def distinct_per_tile(tiles: np.ndarray, keys: np.ndarray, n_tiles: int,
                      scale: float) -> np.ndarray:
    """Estimated distinct keys each tile needs, from a sample that stands for `scale` times
    as many elements (keys seen once in the sample stand for unseen ones, Good-Turing)."""
    out = np.zeros(n_tiles, dtype=np.float64)
    if not len(tiles):
        return out
    order = np.lexsort((keys, tiles))
    t, k = tiles[order], keys[order]
    new = np.ones(len(t), dtype=bool)
    new[1:] = (t[1:] != t[:-1]) | (k[1:] != k[:-1])
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, len(t)))
    group_tiles = t[starts]
    distinct = np.bincount(group_tiles, minlength=n_tiles).astype(np.float64)
    once = np.bincount(group_tiles[counts == 1], minlength=n_tiles).astype(np.float64)
    # each tile's share of the sample stands for `scale` times as many elements
    return distinct + once * (scale - 1)


class Layouts:
    """Where each value of a program lives, and whether a matmul could have had it laid out
    for its plan, recorded op by op as the program is costed in order."""

    def __init__(self, num_tiles: int) -> None:
        self.num_tiles = num_tiles
        self._where: dict[int, Placement] = {}
        # values made by ops with a layout of their own (matmuls, reductions...): a matmul
        # reading them must rearrange them; arguments and constants Poplar lays out at will
        self._unplanned: set[int] = set()

    def of(self, vid: int, t: TensorType) -> Placement:
        """The placement of value vid of type t (a linear mapping if nothing says otherwise)."""
        p = self._where.get(vid)
        if p is None or p.size != t.size:
            p = self._where[vid] = fresh(t, self.num_tiles)
        return p

    def planned(self, vid: int) -> bool:
        return vid not in self._unplanned

    def assign(self, vid: int, placement: Placement, planned: bool = False) -> None:
        """Place value vid as given (a layout a program chose itself, e.g. Mapped.from_tiles);
        `planned`: whether a matmul or gather may still lay it out for its plan."""
        self._where[vid] = placement
        if planned:
            self._unplanned.discard(vid)
        else:
            self._unplanned.add(vid)

    def record(self, op: Op, cls: str, placement: Placement | None) -> None:
        """Note where the results of a costed op live. `placement` is the one its cost rule
        chose for an elementwise result; views keep their operands' elements in place."""
        if not op.result_ids:
            return
        operands = list(zip(op.operand_ids, op.operands, strict=False))
        rid, out = op.result_ids[0], op.results[0]
        if op.kind == "constant":
            value = op.attributes.get("value")
            if out.size <= 1 or value is not None and not isinstance(value, list):
                self._where[rid] = Everywhere(out.size)  # a splat
            return
        if op.kind in _SAME_AS_OPERANDS:
            # results that are their operands (loop carries, barriers) or updated in place;
            # a static copy into a constant or a view says where its result lives
            if placement is not None:
                self._where[rid] = placement
                return
            for k, r in enumerate(op.result_ids):
                if k < len(operands) and op.results[k].size == operands[k][1].size:
                    self._where[r] = self.of(*operands[k])
                    if not self.planned(operands[k][0]):
                        self._unplanned.add(r)
            return
        index = view_index(op) if cls in ("view", "broadcast", "free") else None
        if index is not None:
            bases = tuple(self.of(v, t) for v, t in operands[:len(op.operands) if
                                                             op.kind == "concatenate" else 1])
            if all(isinstance(b, Everywhere) for b in bases):
                self._where[rid] = Everywhere(out.size)
            elif op.kind in _SAME_ELEMENTS and bases[0].size == out.size:
                self._where[rid] = bases[0]  # row-major flat indices are unchanged
            else:
                self._where[rid] = make_view(out.size, bases, index)
            if not all(self.planned(v) for v, _ in operands):
                self._unplanned.add(rid)
            return
        if placement is not None:
            self._where[rid] = placement
            streams = [v for v, t in operands if t.size > 1]
            if not all(self.planned(v) for v in streams):
                self._unplanned.add(rid)
            return
        self._unplanned.update(op.result_ids)
