"""Planner for dot and convolution: split over tiles, on the multiply (AMP) units or not.

A search over (groups, rows, columns, contraction) splits and serial passes, as Poplin's
planner searches; temporaries stay within the target's available memory proportion of each
tile. A convolution also chooses how its kernel positions meet the AMP units: one kernel
position at a time (input channels padded to the units' depth), the kernel width folded into
the channels (a widened copy of the input), the whole kernel folded (im2col), or vector
multiply-accumulates with no AMP at all (thin channel counts waste it)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from jax_ipu.model.plans import Choice, Plan, choose, splits
from jax_ipu.model.targets import (
    ACCUMULATOR_BYTES,
    AMP_BLOCK_INPUTS,
    MIN_BYTES_PER_TILE,
    VECTOR_BYTES,
    Target,
)


@dataclass(frozen=True)
class Product:
    """G independent (M x K) @ (K x N) products. K is `positions` runs of K / positions
    contiguous elements (a matmul: one run; a convolution: a run of input channels per kernel
    position), and `lhs_k` elements of a left row cross the exchange (K for a matmul; for a
    convolution the channels of one input element, which serves every kernel position)."""

    g: int
    m: int
    n: int
    k: int
    itemsize: int
    positions: int = 1
    lhs_k: int = 0
    fold: int = 1  # kernel positions folded into the channels: a widened copy of the input

    @property
    def depth(self) -> int:
        return -(-self.k // self.positions)

    @property
    def left_k(self) -> int:
        return self.lhs_k or self.k


@dataclass(frozen=True)
class MatmulPlan:
    """One way to spread a Product over tiles."""

    splits: tuple[int, int, int, int]  # tiles over groups, M, N, K
    serial: int  # passes over K on each tile, so that blocks fit in tile memory
    compute_cycles: float
    exchange_cycles: float
    syncs: int
    workspace_bytes_per_tile: int
    amp: bool = True  # on the AMP units; else vector multiply-accumulates
    messages: int = 2  # exchange instructions a tile runs per exchange step

    @property
    def tiles(self) -> int:
        return math.prod(self.splits)

    def cycles(self, target: Target) -> float:
        return self.compute_cycles + self.exchange_cycles + self.syncs * target.sync_cycles


def amp_cycles(g: int, m: int, n: int, blocks: int, itemsize: int, target: Target) -> int:
    """Cycles of the multiply units for g products of m rows and n columns on one tile whose
    contraction is `blocks` blocks of AMP_BLOCK_INPUTS.

    The units hold a block of weights, one output channel each and AMP_BLOCK_INPUTS deep,
    loaded at the local memory rate; then every row of the other operand streams through,
    `inputs` elements a cycle. So channels are padded to whole units and the contraction to
    whole blocks, and thin products pay a weight load per block (C-1: 331 + 4 N cycles for
    [N,16] @ [16,16] in fp16). The cheaper of m or n serves as the channels."""
    units, inputs = target.amp_shape(itemsize)
    load = math.ceil(units * AMP_BLOCK_INPUTS * itemsize / target.local_bytes_per_tile_cycle)
    stream = AMP_BLOCK_INPUTS // inputs  # cycles per row per block

    def cycles(channels: int, rows: int) -> int:
        return g * -(-channels // units) * blocks * (load + rows * stream)
    return min(cycles(n, m), cycles(m, n))


def mac_cycles(g: int, m: int, n: int, k: int, itemsize: int, target: Target) -> int:
    """Cycles of vector multiply-accumulates (no AMP): one 64-bit vector of products a cycle
    on a tile (the six workers issue in turn), over every output and contraction element,
    with each output's contraction padded to whole vectors."""
    per_vector = max(1, VECTOR_BYTES // itemsize)
    return g * m * n * -(-k // per_vector)


def _blocks(p: Product, kt: int, pk: int) -> int:
    """AMP blocks of a tile's share kt of the contraction: whole kernel positions when K is
    split no finer than them, each padded to whole blocks."""
    if pk <= p.positions:
        return -(-p.positions // pk) * -(-p.depth // AMP_BLOCK_INPUTS)
    return -(-kt // AMP_BLOCK_INPUTS)


def _cost(p: Product, splits_: tuple[int, int, int, int], placed: tuple[bool, bool],
          target: Target, least: bool, amp: bool) -> MatmulPlan | None:
    """The plan for these splits whose temporaries fit the target's available memory
    proportion of a tile (None if none does), or with `least`, in as little as it can."""
    pg, pm, pn, pk = splits_
    gt, mt, nt, kt = (-(-p.g // pg), -(-p.m // pm), -(-p.n // pn), -(-p.k // pk))
    # float32 partial sums stay in the AMP's accumulators for one pass over the whole of K;
    # a K split or serial passes keep them in tile memory between passes
    acc = gt * mt * nt * ACCUMULATOR_BYTES
    limit = math.inf if least else \
        target.available_memory_proportion * target.bytes_per_tile
    # Operands laid out for the plan (placed) hold their block once over the tiles that
    # share it: a tile receives the copies others hold (the block shared by pn tiles for the
    # left operand, pm for the right). Others arrive whole, rearranged from their own layout.
    # A folded input is a widened copy made for the plan: all but one of its copies arrive.
    lhs_share = max((1 - 1 / pn) if placed[0] else 1.0, 1 - 1 / p.fold)
    rhs_share = (1 - 1 / pm) if placed[1] else 1.0
    left = gt * mt * -(-p.left_k // pk) * p.itemsize * lhs_share
    right = gt * nt * kt * p.itemsize * rhs_share
    whole = left + right
    partials = acc if pk > 1 or whole > limit else 0
    budget = limit - partials
    if budget < 0 or whole and budget < whole / kt:
        return None
    serial = kt if least and whole else 1 if whole <= budget else \
        -(-kt // max(1, int(budget * kt // whole)))
    partials = acc if pk > 1 or serial > 1 else 0
    xbw = target.exchange_bytes_per_tile_cycle
    received = math.ceil(whole / serial)
    if amp:
        work = amp_cycles(gt, mt, nt, -(-_blocks(p, kt, pk) // serial), p.itemsize, target)
    else:
        work = mac_cycles(gt, mt, nt, -(-kt // serial), p.itemsize, target)
    compute = serial * (target.vertex_cycles + work)
    exchange = serial * (target.exchange_setup_cycles + math.ceil(received / xbw)) \
        if received else 0
    syncs = serial * (2 if received else 1)
    if pk > 1:
        # reduce-scatter of the float32 partials across the pk tiles sharing an output block
        moved = acc * (pk - 1) / pk
        exchange += target.exchange_setup_cycles + math.ceil(moved / xbw)
        compute += target.vertex_cycles + math.ceil(moved / target.local_bytes_per_tile_cycle)
        syncs += 2
    # A tile receives each block from the tiles holding its pieces (the pn or pm sharing it,
    # no more than its 128 B pieces), one instruction each, and multicasts its own piece
    # with one; the partial sums' reduce-scatter sends and receives a piece per tile of its
    # output block (no more pieces than 128 B ones).
    sources = min(pn - 1, -(-left // MIN_BYTES_PER_TILE)) + \
        min(pm - 1, -(-right // MIN_BYTES_PER_TILE)) + 1
    if pk > 1:
        sources += 2 * min(pk - 1, -(-acc // MIN_BYTES_PER_TILE))
    return MatmulPlan(splits_, serial, compute, exchange, syncs, int(received + partials),
                      amp, max(2, int(sources)))


def _search(p: Product, placed: tuple[bool, bool], target: Target, amp: bool = True,
            least: bool = False) -> MatmulPlan | None:
    """The fastest plan that fits, or with `least` the one needing least memory."""
    best: MatmulPlan | None = None
    best_key: tuple[float, ...] = ()
    t = target.num_tiles
    for pg in splits(p.g, t):
        for pm in splits(p.m, t // pg):
            for pn in splits(p.n, t // (pg * pm)):
                for pk in splits(p.k, t // (pg * pm * pn)):
                    plan = _cost(p, (pg, pm, pn, pk), placed, target, least, amp)
                    if plan is None:
                        continue
                    cycles = plan.cycles(target)
                    key = (plan.workspace_bytes_per_tile, cycles) if least else (cycles,)
                    if best is None or key < best_key:
                        best, best_key = plan, key
    return best


@functools.lru_cache(maxsize=1024)
def plan_matmul(g: int, m: int, n: int, k: int, itemsize: int, target: Target,
                placed: tuple[bool, bool] = (True, True)) -> MatmulPlan:
    """The cheapest AMP plan (compute + exchange + sync cycles) on the target's tiles.

    `placed` says whether each operand (left, right) can be laid out for the plan: Poplar
    allocates inputs, constants and what elementwise ops make of them where the matmul wants
    them; results of other ops must be rearranged. Every plan for fewer tiles stays a
    candidate with more tiles, so more tiles never cost more. When no plan's temporaries
    fit in the target's available memory proportion, the plan needing least memory is
    returned and the memory model reports any overflow."""
    return _best(Product(max(g, 1), max(m, 1), max(n, 1), max(k, 1), itemsize), placed,
                 target, True)


def _best(p: Product, placed: tuple[bool, bool], target: Target, amp: bool) -> MatmulPlan:
    plan = _search(p, placed, target, amp) or _search(p, placed, target, amp, least=True)
    assert plan is not None  # with unbounded memory, (1,1,1,1) always fits
    return plan


def _family(method: str, plan: MatmulPlan) -> str:
    parts = [method]
    if plan.splits[3] > 1:
        parts.append("K split with partial sums reduced")
    if plan.serial > 1:
        parts.append(f"K in {plan.serial} serial passes")
    if len(parts) == 1:
        parts.append("rows x columns, K whole")
    return ", ".join(parts)


def _as_plan(method: str, plan: MatmulPlan, positions: int = 1) -> Plan:
    """A search result as a Plan."""
    g, m, n, k = plan.splits
    steps = plan.serial + (k > 1)
    return Plan(_family(method, plan), f"tiles over groups {g}, rows {m}, columns {n}, K {k}",
                plan.compute_cycles, plan.exchange_cycles, plan.syncs, plan.tiles,
                plan.workspace_bytes_per_tile, steps if plan.exchange_cycles else 0, steps,
                messages=plan.messages, kernel_positions=positions)


@functools.lru_cache(maxsize=1024)
def choose_matmul(g: int, m: int, n: int, k: int, itemsize: int, target: Target,
                  placed: tuple[bool, bool] = (True, True)) -> Choice:
    """The plan of a dot, and the best plan of another kind (a K split, serial passes...)."""
    p = Product(max(g, 1), max(m, 1), max(n, 1), max(k, 1), itemsize)
    candidates = [_as_plan("AMP", plan) for plan in _variants(p, placed, target, True)]
    return choose(candidates, target)


def _variants(p: Product, placed: tuple[bool, bool], target: Target, amp: bool
              ) -> list[MatmulPlan]:
    """The best plan of each kind for this product: without a K split, with one, and the
    least memory one (which may run in serial passes)."""
    found: dict[str, MatmulPlan] = {}
    t = target.num_tiles
    for pg in splits(p.g, t):
        for pm in splits(p.m, t // pg):
            for pn in splits(p.n, t // (pg * pm)):
                for pk in splits(p.k, t // (pg * pm * pn)):
                    plan = _cost(p, (pg, pm, pn, pk), placed, target, False, amp)
                    if plan is None:
                        continue
                    kind = _family("", plan)
                    if kind not in found or plan.cycles(target) < found[kind].cycles(target):
                        found[kind] = plan
    least = _search(p, placed, target, amp, least=True)
    if least is not None:
        found.setdefault(_family("", least), least)
    return list(found.values())


@dataclass(frozen=True)
class Kernel:
    """A convolution as the planner sees it: `positions` kernel positions (kh x kw, width
    `width`), `channels` input channels per group."""

    positions: int
    width: int
    channels: int


@functools.lru_cache(maxsize=1024)
def choose_conv(g: int, m: int, n: int, kernel: Kernel, itemsize: int, target: Target,
                placed: tuple[bool, bool] = (True, True)) -> Choice:
    """The plan of a convolution: the AMP on one kernel position at a time (channels padded
    to the units' depth), on the kernel width folded into the channels, or on the whole
    kernel folded (im2col); or vector multiply-accumulates. Folding copies the input that
    many times wider into tile memory, so a low memory proportion rules it out."""
    k = kernel.positions * kernel.channels
    folds = {1: "AMP, one kernel position at a time"}
    if kernel.width > 1:
        folds[kernel.width] = "AMP on channels widened by the kernel width"
    if kernel.positions > kernel.width:
        folds[kernel.positions] = "AMP on the whole kernel folded into channels (im2col)"
    candidates = []
    for fold, method in folds.items():
        p = Product(g, m, n, k, itemsize, kernel.positions // fold, kernel.channels * fold,
                    fold)
        candidates += [_as_plan(method, plan, p.positions)
                       for plan in _variants(p, placed, target, True)]
    mac = Product(g, m, n, k, itemsize, kernel.positions, kernel.channels)
    candidates += [_as_plan("vector multiply-accumulates, no AMP", plan)
                   for plan in _variants(mac, placed, target, False)]
    return choose(candidates, target)
