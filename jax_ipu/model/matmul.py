"""Planner for dot and convolution: split over tiles, on the multiply (AMP) units or not.

A search over (groups, rows, columns, contraction) splits and serial passes, as Poplin's
planner searches; temporaries stay within the target's available memory proportion of each
tile. A convolution also chooses how its kernel positions meet the AMP units, as poplin's
transforms and vertices do (G-4): the kernel's positions in turn (a block of weights holding a
group of channels at one or more kernel rows), the kernel width folded into the channels (a
widened copy of the input), the whole kernel folded (im2col), or PopLibs' HorizontalMac vertex
with no AMP at all."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from jax_ipu.model.plans import Choice, Plan, choose, splits
from jax_ipu.model.targets import (
    ACCUMULATOR_BYTES,
    AMP_1X1_INPUT_GROUP_SUPERVISOR_CYCLES,
    AMP_1X1_INPUT_GROUP_WORKER_CYCLES,
    AMP_1X1_PASS_SUPERVISOR_CYCLES,
    AMP_1X1_PASS_WORKER_CYCLES,
    AMP_MIN_UNITS,
    AMP_PASS_SUPERVISOR_CYCLES,
    AMP_PASS_WORKER_CYCLES,
    AMP_WEIGHT_HEIGHT_LOAD_CYCLES,
    AMP_WEIGHT_ROW_LOAD_CYCLES,
    HMAC_DOT_CYCLES,
    HMAC_OUTPUT_CYCLES,
    MIN_BYTES_PER_TILE,
    REDUCE_THREE_STAGES_DEPTH,
    REDUCE_TWO_STAGES_DEPTH,
    TRANSFORM_COPY_SCALE,
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
    width: int = 1  # kernel positions in a row of the kernel (positions / width rows)
    conv: bool = False  # a convolution: its padded output channels are rearranged

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
    amp: bool = True  # on the AMP units; else the HorizontalMac vertex
    messages: int = 2  # exchange instructions a tile runs per exchange step

    @property
    def tiles(self) -> int:
        return math.prod(self.splits)

    def cycles(self, target: Target) -> float:
        return self.compute_cycles + self.exchange_cycles + self.syncs * target.sync_cycles


def amp_cycles(g: int, m: int, n: int, blocks: int, itemsize: int, target: Target,
               kernel: bool = False, height: int = 1) -> int:
    """Cycles of the multiply units for g products of m rows and n columns on one tile whose
    contraction is `blocks` blocks of weights (each target.amp_block_inputs deep: 16 fp16,
    8 fp32); `kernel`: the blocks span kernel positions, `height` kernel rows each (PopLibs'
    ConvPartialnx1 vertex, not its 1x1 one).

    The units hold a block of weights, one output channel each and a block deep, loaded at
    the local memory rate; then every row of the other operand streams through in the
    target's row cycles (4, fp32 8). So channels are padded to whole units and the
    contraction to whole blocks, and thin products pay a weight load per block (C-1: 331 +
    4 N cycles for [N,16] @ [16,16] in fp16). Each pass after the first (a block of another
    kernel position or channel group) also runs the vertex's supervisor loop again and
    restarts its workers (G-4): the nx1 vertex also loads a block of several kernel rows in
    more cycles and zeroes its float32 partial sums first. The cheaper of m or n serves as
    the channels."""
    units, inputs = target.amp_shape(itemsize)
    depth = target.amp_block_inputs(itemsize)
    load = math.ceil(units * depth * itemsize / target.local_bytes_per_tile_cycle)
    stream = target.amp_row_cycles(itemsize)
    workers = target.worker_threads
    if kernel:
        restart = AMP_PASS_SUPERVISOR_CYCLES + workers * AMP_PASS_WORKER_CYCLES + \
            AMP_WEIGHT_HEIGHT_LOAD_CYCLES.get(height, AMP_WEIGHT_ROW_LOAD_CYCLES * height)
        group_restart = 0
    else:
        restart = AMP_1X1_PASS_SUPERVISOR_CYCLES + workers * AMP_1X1_PASS_WORKER_CYCLES
        group_restart = AMP_1X1_INPUT_GROUP_SUPERVISOR_CYCLES + \
            workers * AMP_1X1_INPUT_GROUP_WORKER_CYCLES

    def cycles(channels: int, rows: int) -> int:
        groups = -(-channels // units)
        passes = g * groups * blocks
        zero = math.ceil(g * rows * padded_channels(channels, units) * ACCUMULATOR_BYTES /
                         target.local_bytes_per_tile_cycle) if kernel else 0
        return passes * (load + rows * stream) + (passes - 1) * restart + \
            g * (blocks - 1) * group_restart + zero
    return min(cycles(n, m), cycles(m, n))


def padded_channels(channels: int, units: int) -> int:
    """Output channels as the AMP's partial sums hold them: padded to its 8-unit configuration
    when there are no more than 8, else to whole groups of the tile's units (G-4)."""
    if channels <= AMP_MIN_UNITS < units:
        return AMP_MIN_UNITS
    return -(-channels // units) * units


def mac_cycles(g: int, m: int, n: int, k: int, itemsize: int, target: Target,
               positions: int = 1) -> int:
    """Cycles of PopLibs' HorizontalMac vertex (no AMP; G-4): per output element, output
    channel and kernel position 7 cycles and a dense dot product over the channels (7, and
    one a 64-bit vector of them), six workers in turn."""
    per_vector = max(1, VECTOR_BYTES // itemsize)
    channels = -(-k // max(1, positions))
    dot = HMAC_DOT_CYCLES + -(-channels // per_vector)
    return g * m * n * positions * (HMAC_OUTPUT_CYCLES + dot)


def _blocks(p: Product, kt: int, pk: int, target: Target) -> tuple[int, int]:
    """(AMP blocks, kernel rows a block holds) of a tile's share kt of the contraction: whole
    kernel positions when K is split no finer than them, each padded to whole blocks. With
    fewer channels than a block, a block holds g channels of block / g kernel rows (PopLibs'
    convUnitWeightHeight; g a multiple of the units' input load dividing the block): the
    grouping of fewest passes, on fewest rows."""
    depth = target.amp_block_inputs(p.itemsize)
    if pk > p.positions:
        return -(-kt // depth), 1
    positions = -(-p.positions // pk)
    # a tile's kernel positions as rows of the kernel's width (fewer than a row: one each)
    rows, width = (-(-positions // p.width), p.width) if positions >= p.width else \
        (positions, 1)
    load = target.amp_shape(p.itemsize)[1]
    heights = {group: depth // group if rows > 1 else 1
               for group in range(load, depth + 1, load) if depth % group == 0}
    return min((-(-rows // height) * width * -(-p.depth // group), height)
               for group, height in heights.items())


def transform_copy_cycles(nbytes: float, itemsize: int, target: Target) -> int:
    """poplin's estimate of copying a tile's share of a rearranged operand (G-4): at the
    smaller of the local memory's rate and one element a cycle, scaled by 4/5."""
    rate = min(target.local_bytes_per_tile_cycle, itemsize)
    scale, per = TRANSFORM_COPY_SCALE
    return math.ceil(nbytes * scale / (rate * per))


def _cost(p: Product, splits_: tuple[int, int, int, int], placed: tuple[bool, bool],
          target: Target, least: bool, amp: bool) -> MatmulPlan | None:
    """The plan for these splits whose temporaries fit the target's available memory
    proportion of a tile (None if none does), or with `least`, in as little as it can."""
    pg, pm, pn, pk = splits_
    gt, mt, nt, kt = (-(-p.g // pg), -(-p.m // pm), -(-p.n // pn), -(-p.k // pk))
    # float32 partial sums stay in the AMP's accumulators for one pass over the whole of K;
    # a K split or serial passes keep them in tile memory between passes
    acc = gt * mt * nt * ACCUMULATOR_BYTES
    # A tile must hold its share of both operands (a block is spread over the tiles sharing
    # it) and its block of the result, whatever the memory proportion allows for
    # temporaries: a plan on too few tiles is no plan
    stored = gt * (mt * -(-p.left_k // pk) / pn + nt * kt / pm + mt * nt) * p.itemsize
    if stored > target.bytes_per_tile:
        return None
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
        blocks, height = _blocks(p, kt, pk, target)
        work = amp_cycles(gt, mt, nt, -(-blocks // serial), p.itemsize, target,
                          p.positions > 1 or height > 1, height)
    else:
        work = mac_cycles(gt, mt, nt, -(-kt // serial), p.itemsize, target,
                          -(-p.positions // min(pk, p.positions)))
    compute = serial * (target.vertex_cycles + work)
    exchange = serial * (target.exchange_setup_cycles + math.ceil(received / xbw)) \
        if received else 0
    syncs = serial * (2 if received else 1)
    if p.fold > 1:
        # the tile's block of the widened input is copied before its exchange (poplin's
        # expandDims: its input rearrangement, G-4)
        widened = gt * mt * -(-p.left_k // pk) * p.itemsize
        compute += target.vertex_cycles + transform_copy_cycles(widened, p.itemsize, target)
        syncs += 1
    units = target.amp_shape(p.itemsize)[0]
    padded = padded_channels(nt, units) if amp else nt
    if p.conv and padded != nt:
        # channels padded to the units' groups: the float32 partial sums hold the padded
        # channels, and the output is copied out of them and exchanged to its layout
        # (poplin's rearrangeOutput, G-4)
        out = gt * mt * padded * p.itemsize
        compute += target.vertex_cycles + transform_copy_cycles(out, p.itemsize, target)
        exchange += target.exchange_setup_cycles + math.ceil(out / xbw)
        syncs += 2
        partials = max(partials, gt * mt * padded * ACCUMULATOR_BYTES)
    if pk > 1:
        # reduce-scatter of the float32 partials across the pk tiles sharing an output block,
        # in poplin's stages: each gathers the partials of its groups and adds them
        if pk < REDUCE_TWO_STAGES_DEPTH:  # one stage (most candidates: kept inline)
            moved = acc * (pk - 1) / pk
            exchange += target.exchange_setup_cycles + math.ceil(moved / xbw)
            compute += target.vertex_cycles + \
                math.ceil(moved / target.local_bytes_per_tile_cycle)
            syncs += 2
        else:
            reduce = reduce_partials(acc, pk, target)
            compute, exchange = compute + reduce[0], exchange + reduce[1]
            syncs += reduce[2]
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


@functools.lru_cache(maxsize=256)
def reduce_stage_depths(depth: int) -> tuple[int, ...]:
    """The partials left after each intermediate stage of poplin's reduction of `depth`
    partials an output (G-4, ConvReducePlan.cpp): one stage below 16 partials, two below
    125, else three; each stage's depth the power of the depth that leaves the fewest
    messages a tile (rounded down or up, whichever costs less)."""
    stages = 1 if depth < REDUCE_TWO_STAGES_DEPTH else \
        2 if depth < REDUCE_THREE_STAGES_DEPTH else 3

    def plan(d: int, n: int) -> tuple[tuple[int, ...], float]:
        if n == 1:
            return (), float(d)
        down = int(d ** ((n - 1) / n))
        best: tuple[tuple[int, ...], float] | None = None
        for nxt in (down, down + 1):
            rest, cost = plan(nxt, n - 1)
            cost += d / max(1, nxt)
            if best is None or cost < best[1]:
                best = ((nxt, *rest), cost)
        assert best is not None
        return best
    return plan(depth, stages)[0]


@functools.lru_cache(maxsize=256)
def _stages(depth: int) -> tuple[tuple[int, int], ...]:
    """(partials before, after) of each stage of reducing `depth` partials an output."""
    depths = (depth, *reduce_stage_depths(depth), 1)
    return tuple(zip(depths, depths[1:], strict=False))


def reduce_partials(acc: int, depth: int, target: Target) -> tuple[int, int, int]:
    """(compute, exchange, syncs) of reducing `depth` tiles' float32 partials of `acc` bytes
    each: per stage of poplin's plan (reduce_stage_depths), a tile receives the partials its
    groups lack and adds them."""
    compute = exchange = syncs = 0
    for before, after in _stages(depth):
        moved = acc * (before - after) / before
        exchange += target.exchange_setup_cycles + \
            math.ceil(moved / target.exchange_bytes_per_tile_cycle)
        compute += target.vertex_cycles + math.ceil(moved / target.local_bytes_per_tile_cycle)
        syncs += 2
    return compute, exchange, syncs


def _search(p: Product, placed: tuple[bool, bool], target: Target, amp: bool = True,
            least: bool = False) -> MatmulPlan | None:
    """The fastest plan that fits, or with `least` the one needing least memory."""
    best: MatmulPlan | None = None
    best_key: tuple[float, ...] = ()
    for plan in _candidates(p, placed, target, amp, least):
        cycles = plan.cycles(target)
        key = (plan.workspace_bytes_per_tile, cycles) if least else (cycles,)
        if best is None or key < best_key:
            best, best_key = plan, key
    return best


def _candidates(p: Product, placed: tuple[bool, bool], target: Target, amp: bool,
                least: bool) -> Iterator[MatmulPlan]:
    """Every split of the product's batch, rows, columns and depth over the tiles that has
    a plan (one whose temporaries fit, or with `least` the least memory it can take)."""
    t = target.num_tiles
    for pg in splits(p.g, t):
        for pm in splits(p.m, t // pg):
            for pn in splits(p.n, t // (pg * pm)):
                for pk in splits(p.k, t // (pg * pm * pn)):
                    plan = _cost(p, (pg, pm, pn, pk), placed, target, least, amp)
                    if plan is not None:
                        yield plan


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
    plan = _search(p, placed, target, amp) or _search(p, placed, target, amp, least=True) or \
        _search(p, placed, replace(target, bytes_per_tile=2 ** 62), amp, least=True)
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
    return _within_memory(lambda t: [_as_plan("AMP", plan)
                                     for plan in _variants(p, placed, t, True)], target)


def _within_memory(candidates: Callable[[Target], list[Plan]], target: Target) -> Choice:
    """Poplin's choice (G-4, ConvPlan.cpp): the cheapest plan whose temporaries fit the
    memory proportion; when none does, the planner tries again allowing twice the
    temporaries, and again, up to twice a tile's memory, then with no bound at all (the
    chosen plan then says it does not fit)."""
    choice = choose(candidates(target), target)
    proportion = target.available_memory_proportion
    while not choice.fits and proportion < 2:
        proportion = min(2.0, 2 * proportion)
        relaxed = replace(target, available_memory_proportion=proportion)
        choice = choose(candidates(relaxed), relaxed)
        if choice.fits:
            return replace(choice, fits=False)
    if not choice.fits:
        unbounded = replace(target, available_memory_proportion=math.inf)
        choice = replace(choose(candidates(unbounded), unbounded), fits=False)
    return choice


def _variants(p: Product, placed: tuple[bool, bool], target: Target, amp: bool
              ) -> list[MatmulPlan]:
    """The best plan of each kind for this product: without a K split, with one, and the
    least memory one (which may run in serial passes)."""
    found: dict[str, MatmulPlan] = {}
    for plan in _candidates(p, placed, target, amp, least=False):
        kind = _family("", plan)
        if kind not in found or plan.cycles(target) < found[kind].cycles(target):
            found[kind] = plan
    # the least memory one; when no split holds its blocks in a tile, the one of the most
    # tiles (the memory model then reports the program out of memory)
    least = _search(p, placed, target, amp, least=True) or \
        _search(p, placed, replace(target, bytes_per_tile=2 ** 62), amp, least=True)
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
    """The plan of a convolution: the AMP on the kernel's positions in turn (PopLibs' nx1
    vertex: a block of weights holds a group of channels at one or more kernel rows), on the
    kernel width folded into the channels, or on the whole kernel folded (im2col, the 1x1
    vertex); or PopLibs' HorizontalMac vertex, no AMP. Folding copies the input that many
    times wider into tile memory, so a low memory proportion rules it out; output channels
    padded to the units' groups leave float32 partial sums to copy the output out of."""
    k = kernel.positions * kernel.channels
    folds = {1: "AMP, kernel positions in turn"}
    if kernel.width > 1:
        folds[kernel.width] = "AMP on channels widened by the kernel width"
    if kernel.positions > kernel.width:
        folds[kernel.positions] = "AMP on the whole kernel folded into channels (im2col)"
    mac = Product(g, m, n, k, itemsize, kernel.positions, kernel.channels, width=kernel.width,
                  conv=True)

    def candidates(t: Target) -> list[Plan]:
        plans = []
        for fold, method in folds.items():
            p = Product(g, m, n, k, itemsize, kernel.positions // fold,
                        kernel.channels * fold, fold, kernel.width if fold == 1 else 1,
                        conv=True)
            plans += [_as_plan(method, plan, p.positions) for plan in _variants(p, placed, t, True)]
        return plans + [_as_plan("HorizontalMac, no AMP", plan)
                        for plan in _variants(mac, placed, t, False)]
    return _within_memory(candidates, target)
