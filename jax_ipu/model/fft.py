"""FFTs on tiles: per dimension, a DFT on the multiply units (AMP), then radix-2 butterfly stages.

stablehlo.fft is costed as a tiled FFT runs on the chip (ipu/docs/ipu_model.md, "FFT"): a planner
picks the radix of the DFT done as a matmul; each butterfly stage runs on the tiles that hold the
data, with an exchange when its pairs lie on different tiles. Pure: no jax."""

from __future__ import annotations

import math
from dataclasses import dataclass

from jax_ipu.dtypes import itemsize
from jax_ipu.model.complex_ops import FloatWork
from jax_ipu.model.costs import OpCost, exchange_cycles, worker_cycles
from jax_ipu.model.ir import Op
from jax_ipu.model.mapping import Layouts, tiles_used
from jax_ipu.model.matmul import choose_matmul
from jax_ipu.model.plans import Choice, Plan, choose
from jax_ipu.model.targets import Target

OP_CLASSES = {"fft": "fft"}
POINT_BYTES = itemsize("complex64")
PART_BYTES = itemsize("float32")
# A radix-2 butterfly (a, b) -> (a + w b, a - w b), as Graphcore's Poplar FFT runs its stages
# (G-10) [D from P]: the twiddle product w b (4 multiplies, 2 adds), then an add and a subtract
# of complex values, one value a 64-bit vector.
BUTTERFLY = FloatWork(6 + 2 + 2)
BUTTERFLY_LOADS = 3  # a, b and the twiddle w
BUTTERFLY_STORES = 2
REAL_TYPES = ("RFFT", "IRFFT")


@dataclass(frozen=True)
class Pass:
    """One dimension's transforms: `lines` transforms of `length` complex points each; `split`:
    a real transform packed as `length` complex points, which one more stage unpacks."""

    lines: int
    length: int
    split: bool = False

    @property
    def points(self) -> int:
        return self.lines * self.length


def radices(n: int) -> list[tuple[int, int]]:
    """(DFT radix, butterfly stages) of each way to split a length: n = R * 2^stages, R the
    odd part of n times a power of two (R = 1: butterflies alone, for a power of two)."""
    odd, twos = n, 0
    while odd > 1 and odd % 2 == 0:
        odd, twos = odd // 2, twos + 1
    return [(odd << j, twos - j) for j in range(twos + 1)]


def butterfly_cycles(target: Target) -> float:
    """Worker cycles of one butterfly: its ALU work or its loads and stores, the larger."""
    accesses = (BUTTERFLY_LOADS + BUTTERFLY_STORES) * math.ceil(
        POINT_BYTES / target.local_bytes_per_tile_cycle)
    return max(BUTTERFLY.cycles(1), accesses)


def stage_compute(butterflies: int, tiles: int, target: Target) -> int:
    """Cycles of one butterfly stage: a vertex on each tile, its butterflies shared by the six
    workers."""
    per_tile = -(-butterflies // max(1, tiles))
    return target.vertex_cycles + worker_cycles(per_tile, butterfly_cycles(target), target)


def spans(p: Pass, target: Target) -> tuple[int, int]:
    """(tiles the pass's points are spread over, tiles one transform spans)."""
    tiles = max(1, tiles_used(p.points * POINT_BYTES, target.num_tiles))
    return tiles, max(1, -(-tiles // max(1, p.lines)))


def candidates(p: Pass, target: Target) -> dict[Plan, int]:
    """Every plan of one dimension's transforms, with its DFT radix.

    A radix-R plan multiplies the transforms' R-point columns by the R x R DFT matrix on the
    AMP, as two real matmuls (Re F, Im F) accumulated: one float32 matmul with the contraction
    (R) and the columns twice as long. Then log2(n / R) radix-2 stages of n / 2 butterflies a
    transform. With the data linearly mapped, a transform spanning P tiles holds n / P points
    a tile, so the stages pairing points n / P or more apart, log2(P) of them, first exchange
    the tile's whole share with its partner (binary exchange). A real transform's split stage
    pairs point k with n - k: one more stage of n / 2 butterflies, exchanged when spanning."""
    tiles, span = spans(p, target)
    share = -(-p.points * POINT_BYTES // tiles)
    butterflies = p.points // 2
    one_stage = stage_compute(butterflies, tiles, target)
    moved = exchange_cycles(share, target)
    across = math.ceil(math.log2(span)) if span > 1 else 0
    plans: dict[Plan, int] = {}
    for radix, stages in radices(p.length):
        exchanged = min(stages, across) + (1 if p.split and span > 1 else 0)
        steps = stages + (1 if p.split else 0)
        compute, exchange, used = steps * one_stage, exchanged * moved, tiles
        syncs = steps + exchanged
        twiddles = min(p.length // 2, -(-butterflies // tiles)) * POINT_BYTES
        temp = share + twiddles + (share if exchanged else 0)
        exchange_steps, compute_steps = exchanged, steps
        if radix > 1:
            columns = p.points // radix
            dft = choose_matmul(1, radix, 2 * columns, 2 * radix, PART_BYTES, target,
                                (True, span == 1)).chosen
            compute += dft.compute_cycles
            exchange += dft.exchange_cycles
            syncs += dft.syncs
            used = max(used, dft.tiles)
            # the DFT matrix [Re F, Im F], a constant spread over the matmul's tiles
            matrix = -(-2 * radix * radix * PART_BYTES // dft.tiles)
            temp = max(temp, dft.temp_bytes_per_tile + matrix)
            exchange_steps += dft.exchange_steps
            compute_steps += dft.compute_steps
        family = "butterfly stages" if radix == 1 else f"radix-{radix} DFT on the AMP"
        detail = f"{stages} butterfly stage(s){', a split stage' if p.split else ''}, " \
                 f"{exchanged} across tiles"
        plans[Plan(family, detail, compute, exchange, syncs, used, temp,
                   exchange_steps=exchange_steps, compute_steps=compute_steps)] = radix
    return plans


def plan_pass(p: Pass, target: Target) -> tuple[Choice, int]:
    """The cheapest plan of one dimension's transforms that fits (with the runner-up), and
    its radix."""
    plans = candidates(p, target)
    choice = choose(plans, target)
    return choice, plans[choice.chosen]


def pass_flops(p: Pass, radix: int) -> int:
    """Float operations of a pass with a radix-`radix` DFT: the complex matmul's 8 R^2 a
    column and 10 a butterfly."""
    stages = round(math.log2(p.length // radix)) + (1 if p.split else 0)
    dft = 8 * radix * p.points if radix > 1 else 0
    return dft + BUTTERFLY.flops * (p.points // 2) * stages


def passes(op: Op) -> tuple[list[Pass], int]:
    """The passes of an fft op, innermost dimension first, and its batch of whole transforms."""
    kind = op.attributes.get("fft_type", "FFT")
    lengths = [int(n) for n in op.attributes.get("fft_length") or []]
    real = kind in REAL_TYPES
    spectrum = op.results[0] if kind == "RFFT" else op.operands[0]
    if not lengths or spectrum.size == 0:
        return [], 0
    inner = lengths[-1] // 2 + 1 if real else lengths[-1]
    block = math.prod(lengths[:-1]) * inner
    batch = spectrum.size // max(1, block)
    out = []
    for i in reversed(range(len(lengths))):
        n = lengths[i]
        if real and i == len(lengths) - 1:
            lines = batch * math.prod(lengths[:-1])
            out.append(Pass(lines, n // 2, True) if n % 2 == 0 and n > 1 else Pass(lines, n))
        else:
            out.append(Pass(spectrum.size // max(1, n), n))
    return out, batch


def fft(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """stablehlo.fft (FFT, IFFT, RFFT, IRFFT over its trailing 1 to 3 dimensions): one planned
    pass per dimension, innermost first. A pass over an outer dimension, when a transform
    spans tiles, is a transposition in and one back out: two exchanges of each tile's share,
    as a distributed multidimensional FFT moves its lines onto tiles."""
    todo, batch = passes(op)
    if not todo:
        return OpCost(note="empty FFT")
    cost = OpCost(bytes_accessed=sum(t.nbytes for t in op.operands + op.results))
    described, alternatives = [], []
    for i, p in enumerate(todo):
        choice, radix = plan_pass(p, target)
        plan = choice.chosen
        cost.compute_cycles += plan.compute_cycles
        cost.exchange_cycles += plan.exchange_cycles
        cost.syncs += plan.syncs
        cost.tiles = max(cost.tiles, plan.tiles)
        cost.workspace_bytes_per_tile = max(cost.workspace_bytes_per_tile,
                                            plan.temp_bytes_per_tile)
        cost.exchange_steps += plan.exchange_steps
        cost.compute_steps += plan.compute_steps
        cost.flops += pass_flops(p, radix)
        tiles, _ = spans(p, target)
        if i > 0 and tiles > batch:  # an outer dimension of transforms that span tiles
            share = -(-p.points * POINT_BYTES // tiles)
            cost.exchange_cycles += 2 * exchange_cycles(share, target)
            cost.syncs += 2
            cost.exchange_steps += 2
        where = f"{p.lines} x {p.length}-point" + (" (real, packed)" if p.split else "")
        described.append(f"{where}: {choice.describe(target)}")
        if choice.runner_up is not None:
            alternatives.append(f"{where}: {choice.alternative(target)}")
    cost.plan = "; ".join(described)
    cost.alternative = "; ".join(alternatives)
    return cost


RULES = {"fft": fft}
