"""Linear-algebra routines as Graphcore's XLA backend runs them, costed from their blocks.

Cholesky and triangular solves go to PopLibs' poplin routines, QR to XLA's blocked Householder
expander (G-12): each routine is its steps, matmuls by the model's planner, vertices by PopLibs'
own cycle estimates, copies and elementwise passes by the model's exchange and vector rates."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from jax_ipu.model.costs import OpCost, alu_cycles, exchange_cycles, worker_cycles
from jax_ipu.model.ir import Op, TensorType
from jax_ipu.model.mapping import Layouts, tiles_used
from jax_ipu.model.matmul import choose_matmul
from jax_ipu.model.slicing import Slab, plan_dynamic_slice, plan_dynamic_update
from jax_ipu.model.targets import (
    CHOLESKY_BLOCK_SIZE,
    POPLIN_CHOLESKY_CYCLES,
    POPLIN_TRIANGULAR_SOLVE_CYCLES,
    QR_BLOCK_SIZE,
    TRIANGULAR_SOLVE_BLOCK_SIZE,
    TRIANGULAR_SOLVE_MULTIWORKER_COLUMNS,
    TRIANGULAR_SOLVE_MULTIWORKER_CYCLES,
    VECTOR_BYTES,
    Target,
)


@dataclass
class Steps:
    """A routine's BSP steps on its busiest tile, summed: what one OpCost carries."""

    compute: float = 0.0
    exchange: float = 0.0
    syncs: int = 0
    flops: int = 0
    tiles: int = 0
    workspace: int = 0  # bytes a tile holds for the routine at its peak
    compute_steps: int = 0  # compute sets compiled (a loop's body once)
    exchange_steps: int = 0
    parts: dict[str, int] = field(default_factory=dict)  # what ran, and how often

    def add(self, other: Steps, times: int = 1, looped: bool = False,
            code: bool = True) -> Steps:
        """`other` run `times` times; `looped`: as one compiled body (a Poplar Repeat), whose
        code is there once, else unrolled (each run its own compute sets); without `code`,
        its compute sets are ones already counted (a graph function called again)."""
        if times <= 0:
            return self
        self.compute += other.compute * times
        self.exchange += other.exchange * times
        self.syncs += other.syncs * times
        self.flops += other.flops * times
        self.tiles = max(self.tiles, other.tiles)
        self.workspace = max(self.workspace, other.workspace)
        copies = 0 if not code else 1 if looped else times
        self.compute_steps += other.compute_steps * copies
        self.exchange_steps += other.exchange_steps * copies
        for name, n in other.parts.items():
            self.parts[name] = self.parts.get(name, 0) + n * times
        return self

    def count(self, name: str, times: int = 1) -> Steps:
        self.parts[name] = self.parts.get(name, 0) + times
        return self


def _vertex(cycles: float, tiles: int, target: Target, flops: int = 0) -> Steps:
    """One compute set whose busiest tile runs `cycles` of vertex work after its launch."""
    return Steps(compute=target.vertex_cycles + cycles, syncs=1, flops=flops, tiles=tiles,
                 compute_steps=1)


def _exchange(nbytes: float, tiles: int, target: Target) -> Steps:
    """One exchange in which the busiest tile receives `nbytes` (a Poplar Copy program)."""
    if nbytes <= 0:
        return Steps()
    return Steps(exchange=exchange_cycles(nbytes, target), syncs=1, tiles=tiles,
                 exchange_steps=1)


def _map(elems: int, itemsize: int, streams: int, target: Target, alu: int = 1,
         received: float = 0.0) -> Steps:
    """One popops expression over `elems` elements spread linearly over the tiles, reading
    `streams` operands (a load each per 64-bit vector) and storing one, after the busiest
    tile receives `received` bytes of operands laid out elsewhere."""
    tiles = max(1, tiles_used(elems * itemsize, target.num_tiles))
    per_tile = -(-elems // tiles)
    width = max(1, VECTOR_BYTES // itemsize)
    steps = _vertex(worker_cycles(-(-per_tile // width), max(alu, streams + 1), target), tiles,
                    target, flops=elems)
    return steps.add(_exchange(received, tiles, target))


def _reduce(rows: int, length: int, itemsize: int, target: Target) -> Steps:
    """popops' reduction of `rows` vectors of `length` elements spread over the tiles: each
    tile adds its share, float32 partials cross to the tile of their row, which adds them."""
    tiles = max(1, tiles_used(rows * length * itemsize, target.num_tiles))
    width = max(1, VECTOR_BYTES // itemsize)
    per_tile = -(-rows * length // tiles)
    first = _vertex(worker_cycles(-(-per_tile // width), 1, target), tiles, target,
                    flops=rows * length)
    partials = -(-tiles // max(1, rows))  # tiles holding a part of the busiest row
    if partials <= 1:
        return first
    second = _exchange(partials * 4, tiles, target).add(
        _vertex(worker_cycles(-(-partials // width), 1, target), rows, target))
    return first.add(second)


def _matmul(g: int, m: int, n: int, k: int, itemsize: int, target: Target,
            placed: tuple[bool, bool] = (False, False)) -> Steps:
    """A (grouped) matmul through the model's planner. poplin creates its operands for the
    plan and copies the routine's blocks into them, so they arrive rearranged by default."""
    plan = choose_matmul(max(1, g), max(1, m), max(1, n), max(1, k), itemsize, target,
                         placed).chosen
    return Steps(compute=plan.compute_cycles, exchange=plan.exchange_cycles, syncs=plan.syncs,
                 flops=2 * g * m * n * k, tiles=plan.tiles,
                 workspace=plan.temp_bytes_per_tile, compute_steps=plan.compute_steps,
                 exchange_steps=plan.exchange_steps).count("matmul")


def _cubic(coefficients: tuple[float, ...], n: int) -> float:
    a, b, c, d = coefficients
    return a * n ** 3 + b * n ** 2 + c * n + d


def _dtype(itemsize: int) -> str:
    return "float16" if itemsize <= 2 else "float32"


# --- poplin::cholesky ---------------------------------------------------------------------------
def cholesky_vertex_cycles(n: int, itemsize: int) -> float:
    """PopLibs' estimate of its Cholesky vertex on one n x n block (one worker, G-12)."""
    return _cubic(POPLIN_CHOLESKY_CYCLES[_dtype(itemsize)], n)


def inverse_vertex_cycles(n: int, itemsize: int) -> float:
    """The busiest TriangularInverseWithTranspose vertex of an n x n block: one column a
    worker, the first column the longest (n entries, the i-th a dot of i elements). PopLibs'
    own estimate charges every vertex the whole inverse, whatever its columns; the rate a dot
    element and the set-up a step are its Cholesky estimate's, whose loop it shares (G-12)."""
    a, b, _, _ = POPLIN_CHOLESKY_CYCLES[_dtype(itemsize)]
    # a n^3 over n^3 / 6 dot elements, b n^2 over n^2 / 2 steps
    return 6 * a * n * (n - 1) / 2 + 2 * b * n


@functools.lru_cache(maxsize=256)
def cholesky(g: int, n: int, itemsize: int, target: Target,
             block: int = CHOLESKY_BLOCK_SIZE) -> Steps:
    """poplin::cholesky on g matrices of n x n (G-12, lib/poplin/Cholesky.cpp): the input is
    copied into blocks of block x block, each block of all g matrices on one tile; then for
    each diagonal block, on the remaining r x r matrix: the block factorised by one vertex a
    matrix, its triangle inverted (a vertex per 6 columns), A21 := A21 inv(A11)^T and
    A22 -= A21 A21^T as matmuls (operands copied to the plan's layout, results copied back
    into the blocks); finally the upper triangle is zeroed, one copy a row."""
    b = min(block, n)
    nb = -(-n // b)
    block_bytes = g * b * b * itemsize
    blocks_a_tile = -(-nb * nb // target.num_tiles)
    steps = _exchange(blocks_a_tile * block_bytes, min(target.num_tiles, nb * nb), target)
    steps.workspace = blocks_a_tile * block_bytes
    for start in range(0, n, b):
        r = n - start
        d = min(b, r)
        # g one-worker vertices on the block's tile, six at a time
        steps.add(_vertex(-(-g // target.worker_threads) * cholesky_vertex_cycles(d, itemsize),
                          1, target, flops=g * d ** 3 // 3)).count("factorise")
        if r <= b:
            break
        rest = r - b
        steps.add(_vertex(g * inverse_vertex_cycles(b, itemsize), -(-b // 6), target,
                          flops=g * b ** 3 // 3)).count("invert")
        steps.add(_matmul(g, rest, b, b, itemsize, target))
        steps.add(_exchange(block_bytes, -(-rest // b), target))  # result back into A21
        steps.add(_matmul(g, rest, rest, b, itemsize, target))
        # the product added into A22's blocks, where they live (matMulGroupedAcc)
        tiles = min(target.num_tiles, (-(-rest // b)) ** 2)
        width = max(1, VECTOR_BYTES // itemsize)
        steps.add(_exchange(block_bytes, tiles, target)).add(_vertex(
            worker_cycles(-(-g * b * b // width), 3, target), tiles, target,
            flops=g * rest * rest))
    for row in range(n - 1):  # maskOutput: zeros over the row's part above the diagonal
        steps.add(_exchange(g * min(b, n - 1 - row) * itemsize, 1, target), code=False)
    return steps.count("row zeroed", n - 1)


# --- poplin::triangularSolve --------------------------------------------------------------------
def solve_vertex_cycles(n: int, lower: bool, itemsize: int) -> float:
    """PopLibs' estimate of its TriangularSolve vertex (one right-hand side, n unknowns,
    G-12): the multi-worker one when n is a multiple of its 4 columns a worker call."""
    dtype = _dtype(itemsize)
    if n % TRIANGULAR_SOLVE_MULTIWORKER_COLUMNS:
        return _cubic((0.0, *POPLIN_TRIANGULAR_SOLVE_CYCLES[dtype, lower]), n)
    outside, per_iter, worker_outside, worker_iter = TRIANGULAR_SOLVE_MULTIWORKER_CYCLES[
        dtype, lower]
    w = 6
    calls = n // TRIANGULAR_SOLVE_MULTIWORKER_COLUMNS
    elems = 2 if itemsize <= 2 else 1
    average = (n - 4) / (w * elems) / 2
    return (worker_iter * average + worker_outside) * calls * w + per_iter * calls + outside


@functools.lru_cache(maxsize=1024)
def _substitution(g: int, n: int, k: int, itemsize: int, target: Target) -> Steps:
    """poplin's direct solver for right-hand sides padded to the solver's size `k` on an
    n x n block: the first row copied, then each further row a matmul of the row with the
    unknowns found so far, a subtraction from the right-hand side, and a copy into the
    unknowns (unrolled: n - 1 of each). One graph function serves every block."""
    steps = _exchange(g * k * itemsize, 1, target)
    elems = g * k
    for row in range(1, n):
        steps.add(_matmul(g, 1, k, row, itemsize, target))
        steps.add(_map(elems, itemsize, 2, target)).count("substitution")
        steps.add(_exchange(elems * itemsize, 1, target))
    return steps


@functools.lru_cache(maxsize=1024)
def _solve(g: int, an: int, bn: int, k: int, lower: bool, itemsize: int, target: Target,
           block: int) -> Steps:
    """poplin's recursive solve of A X = B for an n x n triangle and bn right-hand sides:
    above the block size A and B are halved, the two halves of X solved in turn with a matmul
    and a subtraction between them; below it, the direct solver. Code is not counted here:
    poplin compiles each matmul shape once and the direct solver once (_solve_code)."""
    if bn <= 0:
        return Steps()
    if an <= block:
        if bn == 1:
            steps = Steps()
            if an % TRIANGULAR_SOLVE_MULTIWORKER_COLUMNS == 0:
                steps.add(_exchange(g * an * itemsize, 1, target))  # b copied to tile 0
            return steps.add(_vertex(g * solve_vertex_cycles(an, lower, itemsize), 1, target,
                                     flops=g * an * an)).count("solver vertex")
        return Steps().add(_substitution(g, an, k, itemsize, target), code=False)
    half, left = (an + 1) // 2, (bn + 1) // 2
    steps = Steps()
    for cols in (left, bn - left):
        if cols <= 0:
            continue
        inner = _solve(g, half, cols, k, lower, itemsize, target, block)
        steps.add(inner, code=False)
        steps.add(_matmul(g, half, cols, half, itemsize, target), code=False)
        steps.add(_map(g * half * cols, itemsize, 2, target), code=False)
        steps.add(inner, code=False)
    return steps


def _solve_code(g: int, an: int, bn: int, k: int, itemsize: int, target: Target,
                block: int) -> tuple[int, int]:
    """(compute sets, exchanges) compiled for _solve: each distinct matmul and subtraction
    shape once, the direct solver once."""
    shapes: set[tuple[int, int]] = set()
    todo = [(an, bn)]
    leaf = False
    while todo:
        n, cols = todo.pop()
        if cols <= 0 or (n, cols) in shapes:
            continue
        shapes.add((n, cols))
        if n <= block:
            leaf = leaf or cols > 1
            continue
        half, left = (n + 1) // 2, (cols + 1) // 2
        todo += [(half, left), (half, cols - left)]
    steps = Steps()
    for n, cols in shapes:
        if n > block:
            half = (n + 1) // 2
            for c in {(cols + 1) // 2, cols - (cols + 1) // 2} - {0}:
                steps.add(_matmul(g, half, c, half, itemsize, target))
                steps.add(_map(g * half * c, itemsize, 2, target))
        elif cols == 1:
            steps.compute_steps += 1
    if leaf:
        steps.add(_substitution(g, min(an, block), k, itemsize, target))
    return steps.compute_steps, steps.exchange_steps


@functools.lru_cache(maxsize=256)
def triangular_solve(g: int, an: int, bn: int, lower: bool, unit_diagonal: bool,
                     itemsize: int, target: Target,
                     block: int = TRIANGULAR_SOLVE_BLOCK_SIZE) -> Steps:
    """poplin::triangularSolve of g systems A X = B, A an x an triangular, bn right-hand
    sides (G-12, lib/poplin/TriangularSolve.cpp): A's triangle copied out row by row (a copy
    of zeros and one of the row, and of a one with a unit diagonal: each a Copy program of
    its own, their exchange code spread over A's tiles), A and B divided by A's diagonal
    unless it is a unit one, A padded with an identity to the block size times a power of
    two, then the recursive solve (_solve)."""
    copies = 3 if unit_diagonal else 2
    steps = Steps()
    for row in range(an):
        steps.add(_exchange(g * max(row, an - row) * itemsize, 1, target), copies, code=False)
    steps.count("triangle row", an)
    if not unit_diagonal:
        steps.add(_exchange(g * an * itemsize, 1, target))
        steps.add(_map(g * an * an, itemsize, 1, target, alu=alu_cycles("divide"),
                       received=g * an * itemsize))
        steps.add(_map(g * an * bn, itemsize, 1, target, alu=alu_cycles("divide")))
    size, k = an, bn
    if an > block:
        size = block
        while size < an:
            size, k = size * 2, (k + 1) // 2
        steps.add(_exchange(g * size * itemsize, 1, target), 3)  # zero pads, ones on diagonal
    steps.add(_solve(g, size, bn, k, lower, itemsize, target, block), code=False)
    compute, exchange = _solve_code(g, size, bn, k, itemsize, target, block)
    steps.compute_steps += compute
    steps.exchange_steps += exchange
    return steps


# --- XLA's QrExpander -----------------------------------------------------------------------------
@functools.lru_cache(maxsize=1024)
def householder_column(g: int, m: int, k: int, itemsize: int, target: Target) -> Steps:
    """One column of XLA's unblocked Householder QR of an m x k panel (its QrBlock loop
    body), each elementwise chain one popops expression as Poplar compiles it: the column
    sliced out at the loop's index, the sum of squares below the pivot (an expression
    reduced as it is read), the reflector's scalars (norm, beta, tau), the reflector v over
    the column, v^T times the masked panel (the mask an expression, then a matmul), then the
    panel updated by the outer product v (v^T A) and its column rewritten, one expression
    (a dot of depth one is a broadcast multiply after XLA's algebraic simplifier, which
    Graphcore's backend runs), and tau written."""
    slab = Slab(k, g * m, 1, itemsize)
    column = plan_dynamic_slice(slab, target).chosen
    steps = Steps(compute=column.compute_cycles, exchange=column.exchange_cycles,
                  syncs=column.syncs, tiles=column.tiles, compute_steps=1, exchange_steps=1)
    steps.add(_reduce(g, m, itemsize, target))
    steps.add(_map(g, itemsize, 2, target, alu=4 * alu_cycles("sqrt")))
    steps.add(_map(g * m, itemsize, 1, target, alu=alu_cycles("divide"),
                   received=g * itemsize))
    steps.add(_map(g * m * k, itemsize, 1, target))
    steps.add(_matmul(g, 1, k, m, itemsize, target))
    steps.add(rank_one_update(g, m, k, itemsize, target))
    return steps.add(_map(g * k, itemsize, 1, target)).count("column")


def rank_one_update(g: int, m: int, k: int, itemsize: int, target: Target) -> Steps:
    """A -= v w^T over an m x k matrix spread linearly by rows, one expression: each tile
    receives the entries of v for its rows and the whole row vector w."""
    tiles = max(1, tiles_used(g * m * k * itemsize, target.num_tiles))
    rows = -(-g * m // tiles)
    return _map(g * m * k, itemsize, 3, target, received=(rows + g * k) * itemsize)


@functools.lru_cache(maxsize=1024)
def _compact_wy(g: int, m: int, k: int, itemsize: int, target: Target) -> Steps:
    """XLA's compact WY form T of a panel's k reflectors (Schreiber and Van Loan): Y^T Y as a
    matmul, masked and scaled by an expression, then a loop of k columns, each a column of it
    sliced out, a matrix-vector product with T and the result written into T."""
    steps = _matmul(g, k, k, m, itemsize, target)
    steps.add(_map(g * k * k, itemsize, 2, target))
    body = Steps()
    sliced = plan_dynamic_slice(Slab(k, g * k, 1, itemsize), target).chosen
    written = plan_dynamic_update(Slab(k, g * k, 1, itemsize), target).chosen
    for plan in (sliced, written):
        body.add(Steps(compute=plan.compute_cycles, exchange=plan.exchange_cycles,
                       syncs=plan.syncs, tiles=plan.tiles, compute_steps=1, exchange_steps=1))
    body.add(_matmul(g, k, 1, k, itemsize, target))
    return steps.add(body, k, looped=True).count("T column", k)


@functools.lru_cache(maxsize=256)
def qr(g: int, m: int, n: int, itemsize: int, target: Target,
       block: int = QR_BLOCK_SIZE) -> Steps:
    """XLA's QrExpander (geqrf) on g matrices of m x n, as Graphcore's backend runs QR (G-12):
    for each panel of `block` columns, the panel's unblocked Householder loop (its columns a
    Poplar Repeat), then, when columns remain to its right, the panel's compact WY form T
    and the trailing update A2 += (Y T^T) (Y^T A2) as three matmuls and an addition."""
    p = min(m, n)
    steps = Steps()
    for i in range(0, p, block):
        k, rows, rest = min(block, p - i), m - i, n - i - min(block, p - i)
        steps.add(householder_column(g, rows, k, itemsize, target), k, looped=True)
        if rest <= 0:
            continue
        steps.add(_compact_wy(g, rows, k, itemsize, target))
        steps.add(_matmul(g, rows, k, k, itemsize, target))
        steps.add(_matmul(g, k, rest, rows, itemsize, target))
        steps.add(_matmul(g, rows, rest, k, itemsize, target))
        steps.add(_map(g * rows * rest, itemsize, 2, target))
    return steps


@functools.lru_cache(maxsize=256)
def householder_product(g: int, m: int, n: int, p: int, itemsize: int, target: Target,
                        block: int = QR_BLOCK_SIZE) -> Steps:
    """XLA's ProductOfElementaryHouseholderReflectors (orgqr) of p reflectors into Q's first n
    columns, g matrices of m rows (G-12): Q starts as the identity (m x m); for each panel of
    `block` reflectors, Y made from the panel (an expression), its compact WY form T, then
    Q2 += (Q2 Y) (Y T^T)^T as matmuls and an addition over Q's columns from the panel on."""
    steps = _map(g * m * m, itemsize, 0, target)
    for i in range(0, p, block):
        k, rows = min(block, p - i), m - i
        steps.add(_map(g * rows * k, itemsize, 1, target))
        steps.add(_compact_wy(g, rows, k, itemsize, target))
        steps.add(_matmul(g, rows, k, k, itemsize, target))
        steps.add(_matmul(g, m, k, rows, itemsize, target))
        steps.add(_matmul(g, m, rows, k, itemsize, target))
        steps.add(_map(g * m * rows, itemsize, 2, target))
    return steps


# --- the cost rule --------------------------------------------------------------------------------
def _batch(t: TensorType) -> int:
    return math.prod(t.shape[:-2]) if len(t.shape) > 2 else 1


def _routine(op: Op, target: Target) -> tuple[Steps, str]:
    """The steps of a marked routine and the name the report gives it."""
    # the matrix is the last operand, or the one before the right-hand sides or the taus
    two = op.kind in ("linalg_triangular_solve", "linalg_householder_product")
    a = op.operands[-2] if two else op.operands[-1]
    g, isz = _batch(a), a.itemsize
    m, n = (a.shape[-2], a.shape[-1]) if len(a.shape) >= 2 else (1, 1)
    flags = op.attributes
    if op.kind == "linalg_cholesky":
        block = min(CHOLESKY_BLOCK_SIZE, n)
        return cholesky(g, n, isz, target), f"poplin::cholesky, block {block}"
    if op.kind == "linalg_triangular_solve":
        b = op.operands[-1]
        left = bool(flags.get("left_side", True))
        bn = b.shape[-1] if left else b.shape[-2]
        # op(A) X = B with A lower is a lower solve unless A is transposed; a right-side
        # solve is the transposed left one (poplin transposes A and B and flips `lower`)
        lower = bool(flags.get("lower", True)) != bool(flags.get("transpose_a", False))
        lower = lower if left else not lower
        steps = triangular_solve(g, n, max(1, bn), lower, bool(flags.get("unit_diagonal")),
                                 isz, target)
        block = TRIANGULAR_SOLVE_BLOCK_SIZE
        return steps, f"poplin::triangularSolve, block {block}"
    if op.kind == "linalg_qr":
        return qr(g, m, n, isz, target), f"XLA QrExpander (blocked Householder), block " \
            f"{QR_BLOCK_SIZE}"
    taus = op.operands[-1]
    out = op.results[0] if op.results else a
    return householder_product(g, m, out.shape[-1], taus.shape[-1] if taus.shape else 0,
                               isz, target), \
        f"XLA QrExpander's product of Householder reflectors, block {QR_BLOCK_SIZE}"


def routine(op: Op, fused: list[Op], target: Target, layouts: Layouts) -> OpCost:
    """A library routine the lowering marked (compiler/lowering/linalg.py), costed as the
    routine Poplar runs: its steps summed on their busiest tiles. An empty matrix is no work."""
    if any(t.size == 0 for t in (*op.operands, *op.results)):
        return OpCost(note="library routine on an empty matrix: nothing to do")
    steps, name = _routine(op, target)
    parts = ", ".join(f"{n} {what}{'' if n == 1 else 's'}"
                      for what, n in sorted(steps.parts.items()))
    total = steps.compute + steps.exchange + steps.syncs * target.sync_cycles
    return OpCost(
        flops=steps.flops, bytes_accessed=sum(t.nbytes for t in (*op.operands, *op.results)),
        compute_cycles=steps.compute, exchange_cycles=steps.exchange, syncs=steps.syncs,
        tiles=max(1, steps.tiles), workspace_bytes_per_tile=steps.workspace,
        compute_steps=steps.compute_steps, exchange_steps=steps.exchange_steps,
        plan=f"{name}: {total:,.0f} cycles", note=f"library routine {name}: {parts}")


OP_CLASSES = {"linalg_cholesky": "library", "linalg_triangular_solve": "library",
              "linalg_qr": "library", "linalg_householder_product": "library"}
RULES = {"library": routine}
