"""The IPU Model against published hardware measurements: every entry of IPU_CALIBRATION.md.

Each point is an equivalent JAX program (judged, never run) or the model function the runtime
calls; the model must be within 1.5x of the published figure, or the point is xfail(strict)
with its reason. tools/calibration_table.py writes table() into ipu/docs/ipu_model.md."""

from __future__ import annotations

import csv
import functools
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from jax_ipu.model import TO_DEVICE, TO_HOST, call_overhead_cycles, get_target, host_transfer
from jax_ipu.model.collectives import hop, plan_collective
from jax_ipu.model.costs import exchange_cycles
from jax_ipu.model.ir import Op, TensorType
from jax_ipu.model.report import ProgramReport
from tests._lowering import judge, portable_artifact

TOLERANCE = 1.5
DOC = Path(__file__).resolve().parent.parent / "ipu" / "docs" / "ipu_model.md"
BEGIN, END = "<!-- calibration table: begin -->", "<!-- calibration table: end -->"

S = jax.ShapeDtypeStruct
F16, F32 = jnp.float16, jnp.float32


@dataclass(frozen=True)
class Point:
    """One published figure and how the model's figure for the same program is obtained."""

    entry: str  # IPU_CALIBRATION.md entry, e.g. "C-1"
    program: str  # what was measured, as its JAX equivalent
    published: float
    unit: str
    model: Callable[[], float]
    xfail: str = ""  # why no principled rule reaches it; empty when it must pass
    held: bool = False  # held back from fitting: no constant may be set from it


@functools.cache
def _judged(fn: Callable, args: tuple, version: str, tiles: int | None = None
            ) -> ProgramReport:
    """The model's report of jax.jit(fn) on abstract args, with no device run."""
    code = portable_artifact(fn, *args)
    return judge(code, get_target(version, tiles), allow_out_of_memory=True)[1]


def _tflops(report: ProgramReport) -> float:
    return report.flops / report.seconds / 1e12


# --- C-1: one [N,16] @ [16,16] per tile, all tiles, Bow ----------------------------------------
def _per_tile_matmul(x, w):
    return jnp.einsum("tnk,tmk->tnm", x, w)


def _c1(n: int) -> float:
    return _tflops(_judged(_per_tile_matmul, (S((1472, n, 16), F16), S((1472, 16, 16), F16)),
                           "ipu21"))


# --- C-2: dense (m x k) @ (k x n) in fp16 through PopLibs, 1472 tiles at Bow's clock -----------
def _matmul(a, b):
    return a @ b


def _c2(m: int, n: int) -> float:
    return _tflops(_judged(_matmul, (S((m, m), F16), S((m, n), F16)), "ipu21"))


# --- C-3: small vertices on one tile of a Mk2 --------------------------------------------------
def _scaled_add(a, s, b):
    return a + s * b


def _rotation(c, s, x, y):
    return c * x - s * y, s * x + c * y


def _one_tile(fn: Callable, *args) -> float:
    return _judged(fn, args, "ipu2", 1).cycles.total


# --- C-4: scalar code on one worker of each tile, Bow -------------------------------------------
def _pi_unrolled(n: int) -> Callable:
    def f(x, h):
        total = jnp.zeros_like(x)
        for j in range(n):
            xj = x + j * h
            total = total + 4.0 / (1.0 + xj * xj)
        return total
    return f


def _pi_loop(n: int) -> Callable:
    def f(x, h):
        def body(_, carry):
            total, xj = carry
            return total + 4.0 / (1.0 + xj * xj), xj + h
        return jax.lax.fori_loop(0, n, body, (jnp.zeros_like(x), x))[0]
    return f


def _per_iteration(make: Callable[[int], Callable]) -> float:
    """Cycles one more iteration adds on one tile holding one element (fixed costs cancel)."""
    args = (S((1,), F32), S((1,), F32))
    short, long = (_judged(make(n), args, "ipu21", 1).cycles.total for n in (12, 24))
    return (long - short) / 12


# --- C-6 and H-4: tut6, a 10000 x 1000 fp32 matrix times a vector on Mk2 ------------------------
def _tut6() -> ProgramReport:
    return _judged(_matmul, (S((10000, 1000), F32), S((1000,), F32)), "ipu2")


def _direct(transfer) -> int:
    """A stream copy the program's own buffers feed (Poplar's connectStream, the traffic
    tool): set-up and link, no staging copy from a user's array."""
    return transfer.setup_cycles + transfer.link_cycles


def _tut6_host_cycles() -> int:
    target = get_target("ipu2")
    return sum(_direct(host_transfer(n, target, d)) for n, d in (
        (10000 * 1000 * 4, TO_DEVICE), (1000 * 4, TO_DEVICE), (10000 * 4, TO_HOST)))


def _tut6_total() -> float:
    return _tut6().cycles.total + _tut6_host_cycles() + call_overhead_cycles(get_target("ipu2"))


# --- M-1: STREAM triad over a GC2 ---------------------------------------------------------------
def _triad(dtype) -> float:
    n = 1216 * 4096
    report = _judged(_scaled_add, (S((n,), dtype), S((), dtype), S((n,), dtype)), "ipu1")
    return 3 * n * jnp.dtype(dtype).itemsize / report.seconds / 1e9


# --- H: host link and stream copies on an IPU-M2000 ---------------------------------------------
def _host_rate(nbytes: int, direction: str) -> float:
    target = get_target("ipu2")
    return nbytes / (_direct(host_transfer(nbytes, target, direction)) / target.clock_hz) / 1e9


def _h2_ms() -> float:
    """The README times the results' transfer through the gateway, not their copy into the
    application's arrays: set-up and link."""
    target = get_target("ipu2")
    return _direct(host_transfer(8_800_000, target, TO_HOST)) / target.clock_hz * 1e3


def _h5_items_per_s() -> float:
    """PopTorch, micro-batch 16 of 128x128 fp32, one host-to-device stream copy per device
    iteration: the measured synthetic-data time of an iteration plus the model's copy."""
    target = get_target("ipu2")
    iteration = 16 / 46.7e3 + host_transfer(16 * 128 * 128 * 4, target, TO_DEVICE).total / \
        target.clock_hz
    return 16 / iteration


# --- L: IPU-Links on an IPU-M2000 ---------------------------------------------------------------
def _l1_gb_per_s_each_way() -> float:
    """gc-iputraffictest: two neighbouring IPUs send to each other at once (a collective
    permute of 2.1 GB each way, as the runtime would cost it)."""
    nbytes = 4_190_000_000 // 2
    t = TensorType((nbytes // 4,), "float32")
    op = Op("stablehlo.collective_permute", (t,), (t,), (0,), (1,),
            {"source_target_pairs": [[0, 1], [1, 0]]})
    target = get_target("ipu2")
    return nbytes / (plan_collective(op, target).cycles / target.clock_hz) / 1e9


def _l2_link_gbit_per_s() -> float:
    """One IPU-Link's rate in the model: a hop between machines over the pod links."""
    target = get_target("ipu2")
    pod = hop(0, target.ipus_per_machine, target)
    return pod.bytes_per_cycle * target.clock_hz / target.pod_links_per_ipu * 8 / 2**30


# Shapes each data set's constants may be fitted on; the rest, between and beyond them, are
# held back (tests pin the errors of both parts, tools/calibration_table.py prints them).
C1_FIT = (32, 128, 512)
C2_FIT = ((1024, 64), (1024, 256), (1024, 1024))
C3_FIT = (128, 256)

POINTS: tuple[Point, ...] = (
    *(Point("C-1", f"[{n},16] @ [16,16] fp16 on each of 1472 tiles (einsum, batch per tile), "
            "Bow", p, "TFLOP/s", functools.partial(_c1, n), held=n not in C1_FIT)
      for n, p in ((16, 55.5), (32, 96.7), (64, 152.8), (128, 211.1), (256, 264.0),
                   (512, 299.8), (1024, 322.7), (2048, 334.9))),
    *(Point("C-2", f"({m} x {m}) @ ({m} x {n}) fp16, 1472 tiles at Bow's clock", p, "TFLOP/s",
            functools.partial(_c2, m, n), held=(m, n) not in C2_FIT)
      for m, row in ((1024, (6.0, 20, 46, 89, 120, 153, 180)),
                     (2048, (12.8, 44, 82, 134, 166, 200, 211)))
      for n, p in zip((4, 16, 64, 256, 1024, 2048, 4096), row, strict=True)),
    *(Point("C-3", f"a + s * b, {n} fp32 on one tile, Mk2", p, "cycles",
            functools.partial(_one_tile, _scaled_add, S((n,), F32), S((), F32), S((n,), F32)),
            held=n not in C3_FIT)
      for n, p in ((64, 375), (128, 467), (256, 665), (512, 1043))),
    Point("C-3", "2x2 rotation of two 512-element fp32 rows on one tile, Mk2", 1436, "cycles",
          functools.partial(_one_tile, _rotation, S((), F32), S((), F32), S((512,), F32),
                            S((512,), F32)), held=True),
    Point("C-3", "Householder row update r - s * v, 256 fp32 on one tile, Mk2", 683, "cycles",
          functools.partial(_one_tile, _scaled_add, S((256,), F32), S((), F32),
                            S((256,), F32)), held=True),
    Point("C-4", "sum += 4 / (1 + x * x), unrolled 12x, one element per tile, Bow", 47.5,
          "cycles/iteration", functools.partial(_per_iteration, _pi_unrolled)),
    Point("C-4", "the same loop rolled (lax.fori_loop), one element per tile, Bow", 90,
          "cycles/iteration", functools.partial(_per_iteration, _pi_loop),
          "a JAX loop runs each iteration as compute sets with syncs, as Poplar compiles it "
          "(about 600 cycles by C-3 and C-5: two vertices and their syncs; the counter is "
          "Poplar's Repeat and costs nothing); the published loop runs inside one C++ "
          "vertex, which no JAX program can express", held=True),
    Point("C-5", "x + 1 on one fp32 element on one tile (vertex launch and sync), Mk2", 255,
          "cycles", functools.partial(_one_tile, lambda x: x + 1, S((1,), F32))),
    Point("C-5", "one sync between BSP steps (30-150 measured; midpoint)", 90, "cycles",
          lambda: get_target("ipu2").sync_cycles),
    Point("C-5", "fixed cost of an exchange (PopLibs planner constant): 4 B", 100, "cycles",
          lambda: exchange_cycles(4, get_target("ipu2"))),
    Point("C-6", "tut6: (10000 x 1000) @ 1000 fp32, compute cycles, Mk2", 28_300, "cycles",
          lambda: _tut6().cycles.compute,
          "tut6 runs plain C++ vertices, about 4 cycles a multiply-add on each worker; a JAX "
          "matvec goes through PopLibs' AMP and vector code, which the model follows "
          "(Poplar's own IPU Model says 3,718 for tut6)", held=True),
    Point("M-1", "STREAM triad b + s * c, 4096 fp32 per tile on a GC2 (assembly figure)",
          12_420, "GB/s", functools.partial(_triad, F32)),
    Point("M-1", "STREAM triad b + s * c, 4096 fp16 per tile on a GC2", 7_490, "GB/s",
          functools.partial(_triad, F16),
          "the only fp16 figure is for C++ vertices (fp32 C++ reached 7,261, assembly "
          "12,420); the model prices Poplar's assembly codelets, one 64-bit access a cycle",
          held=True),
    Point("H-1", "host to device, 256 MiB stream copy, IPU-M2000", 7.06, "GB/s",
          functools.partial(_host_rate, 256 << 20, TO_DEVICE)),
    Point("H-1", "device to host, 256 MiB stream copy, IPU-M2000", 2.93, "GB/s",
          functools.partial(_host_rate, 256 << 20, TO_HOST)),
    Point("H-2", "8.8 MB of results back to the host, IPU-M2000", 3.1, "ms", _h2_ms,
          held=True),
    Point("H-2", "the same README's stated rate for those results", 5.5, "GB/s",
          lambda: 8.8e6 / (_h2_ms() / 1e3) / 1e9,
          "the statement contradicts the README's own timing (8.8 MB in 3.1 ms is 2.8 GB/s, "
          "as H-1 measures); the model follows the measurements", held=True),
    Point("H-3", "one host-to-device stream copy of an int32, Mk2 (160-170k)", 165_000,
          "cycles", lambda: host_transfer(4, get_target("ipu2"), TO_DEVICE).total),
    Point("H-4", "tut6 first run, all cycles: transfers, call and program, Mk2", 25_444_984,
          "cycles", _tut6_total,
          "the published run is the first after loading the program, whose first stream "
          "copy alone takes tens of millions of cycles (H-3: 35.2M); the model charges "
          "every call alike and no program load", held=True),
    Point("H-4", "tut6 host exchange (tile average), Mk2", 2_641_488, "cycles",
          _tut6_host_cycles,
          "a per-tile average, not the transfer's duration: 40 MB in that time would be "
          "20 GB/s, three times the host link H-1 measures", held=True),
    Point("H-5", "PopTorch CNN, 16 x 64 KiB fp32 inputs per device iteration, real data", 18.0e3,
          "items/s", _h5_items_per_s),
    Point("L-1", "two neighbouring IPUs of an M2000 exchange 2.1 GB each way", 26.5,
          "GB/s each way", _l1_gb_per_s_each_way),
    Point("L-2", "one IPU-Link in PopLibs' multi-IPU model: 128 Gibit/s x 0.85", 128 * 0.85,
          "Gibit/s", _l2_link_gbit_per_s),
)


# --- D-1: gather and scatter-add over Graphcore's PyG grid (Bow, fp32) --------------------------
DATA = Path(__file__).resolve().parent / "data" / "calibration"
GRID_FILES = {"gather": "pyg_gather_bow_fp32.csv", "scatter-add": "pyg_scatter_add_bow_fp32.csv"}
GRID_COLUMNS = ["num_inputs", "num_features", "num_outputs", "cycles"]
# Fit on these shapes; hold back the rest: 16 and 4096 inputs, 32 and 32768 outputs lie
# beyond them, 256 inputs, 64 features and 512 outputs between.
D1_FIT = ((64, 1024), (16, 256), (128, 2048, 8192))


# D-1's programs ran inside an on-device loop of this many iterations, then a sum of the output;
# the published figure is the program's cycles divided by it (benchmark_util.py, Benchmark).
BENCH_REPEATS = 10


@dataclass(frozen=True)
class GridPoint:
    """One shape of D-1: the op's cycles on a Bow (the loop's share and a final sum in it)."""

    kind: str  # "gather" (jnp.take(x, idx, axis=0)) or "scatter-add" (segment_sum)
    num_inputs: int
    num_features: int
    num_outputs: int
    published: float

    @property
    def held(self) -> bool:
        return not (self.num_inputs in D1_FIT[0] and self.num_features in D1_FIT[1] and
                    self.num_outputs in D1_FIT[2])

    @property
    def op(self) -> tuple[Callable, tuple]:
        """The op alone, as JAX writes PopTorch's: index_select is PopART's Gather, a
        multiSlice of the indices reinterpreted as unsigned with no bounds handling, which
        is jnp.take's mode="clip" (a plain gather: no wrap of negative indices, no fill);
        torch_scatter's sum is a scatter-add into zeros, which is segment_sum."""
        x = S((self.num_inputs, self.num_features), F32)
        if self.kind == "gather":
            return (lambda t, i: jnp.take(t, i, axis=0, mode="clip")), \
                (x, S((self.num_outputs,), jnp.int32))
        n = self.num_outputs
        return (lambda t, i: jax.ops.segment_sum(t, i, num_segments=n)), \
            (x, S((self.num_inputs,), jnp.int32))

    @property
    def program(self) -> tuple[Callable, tuple]:
        """The benchmark as it ran (benchmark_util.py): the op BENCH_REPEATS times in an
        on-device loop carrying the input, the indices and the output, then a sum of the
        output. Its cycles divided by BENCH_REPEATS are the published figure's kind."""
        op, args = self.op
        result = jax.eval_shape(op, *args)

        def bench(t, i):
            def body(_, carry):
                t, i, _ = carry
                return t, i, op(t, i)
            zeros = jnp.zeros(result.shape, result.dtype)
            out = jax.lax.fori_loop(0, BENCH_REPEATS, body, (t, i, zeros))[2]
            return jnp.sum(out)
        return bench, args


def read_grid(kind: str) -> tuple[GridPoint, ...]:
    """The shared shapes of one grid, checked against the columns the publication has."""
    with (DATA / GRID_FILES[kind]).open(newline="") as f:
        rows = list(csv.reader(f))
    if rows[0] != GRID_COLUMNS:
        raise ValueError(f"{GRID_FILES[kind]}: columns {rows[0]}, expected {GRID_COLUMNS}")
    return tuple(GridPoint(kind, int(a), int(b), int(c), float(d)) for a, b, c, d in rows[1:])


GRID: tuple[GridPoint, ...] = read_grid("gather") + read_grid("scatter-add")


@functools.cache
def grid_ratio(point: GridPoint) -> float:
    fn, args = point.program
    return _judged(fn, args, "ipu21").cycles.total / BENCH_REPEATS / point.published


SCATTER_PIECES = ("a table split over columns gets its zeros written piece by piece; the "
                  "model charges each piece Fill2d's estimated set-up, a little above the chip's")
SCATTER_REDUCED = ("many updates into few rows: the updates are split over groups adding into "
                   "float32 partials, which popops' reduction library reduces in stages and "
                   "moves to the table (both modelled); its reduce vertices' cost for each of "
                   "many partials an output is not")


def grid_reason(point: GridPoint) -> str:
    """Why a shape is outside 1.5x (empty when it is within)."""
    r = grid_ratio(point)
    if 1 / TOLERANCE <= r <= TOLERANCE:
        return ""
    if point.kind == "scatter-add" and r > 1:
        return SCATTER_PIECES
    if point.kind == "scatter-add" and point.num_inputs >= 4 * point.num_outputs:
        return SCATTER_REDUCED
    return "not explained"


@functools.cache
def model_figure(point: Point) -> float:
    return float(point.model())


def ratio(point: Point) -> float:
    return model_figure(point) / point.published


def _param(point: Point, i: int):
    marks = [pytest.mark.xfail(strict=True, reason=point.xfail)] if point.xfail else []
    return pytest.param(point, id=f"{point.entry}-{i}", marks=marks)


@pytest.mark.parametrize("point", [_param(p, i) for i, p in enumerate(POINTS)])
def test_model_within_tolerance_of_published(point: Point):
    assert 1 / TOLERANCE <= ratio(point) <= TOLERANCE, \
        f"{point.program}: model {model_figure(point):.4g} vs {point.published:.4g} {point.unit}"


def test_every_calibration_entry_has_a_point():
    entries = {p.entry for p in POINTS}
    assert entries == {"C-1", "C-2", "C-3", "C-4", "C-5", "C-6", "M-1", "H-1", "H-2", "H-3",
                       "H-4", "H-5", "L-1", "L-2"}


def error(ratio_: float) -> float:
    """How far a model figure is from the published one, either way (1.0 is exact)."""
    return max(ratio_, 1 / ratio_)


@dataclass(frozen=True)
class Summary:
    """Errors over a set of points: count, median, share within 1.5x and 2x, worst."""

    points: int
    median: float
    within_1_5: float
    within_2: float
    worst: float

    @classmethod
    def of(cls, ratios: list[float]) -> Summary:
        errors = [error(r) for r in ratios]
        if not errors:
            return cls(0, math.nan, math.nan, math.nan, math.nan)
        return cls(len(errors), statistics.median(errors),
                   sum(e <= 1.5 for e in errors) / len(errors),
                   sum(e <= 2 for e in errors) / len(errors), max(errors))


def dataset(name: str) -> list[tuple[bool, float]]:
    """(held back, model / published) of every point of a data set."""
    if name.startswith("D-1"):
        kind = name.split(" ", 1)[1]
        return [(p.held, grid_ratio(p)) for p in GRID if p.kind == kind]
    prefix = "H-" if name == "H" else name
    return [(p.held, ratio(p)) for p in POINTS if p.entry.startswith(prefix)]


DATASETS = ("C-1", "C-2", "C-3", "H", "D-1 gather", "D-1 scatter-add")


def split_errors(name: str) -> tuple[Summary, Summary]:
    """(fitted part, held-back part) of a data set."""
    points = dataset(name)
    return (Summary.of([r for held, r in points if not held]),
            Summary.of([r for held, r in points if held]))


# Errors the model is held to, per data set: (fitted median, held-back median, held-back share
# within 2x) it must not be worse than. Pinned at this round's figures (ipu_model.md). C-2's
# medians rose (1.04 and 1.15 before) when the AMP's 1x1 vertex began to pay PopLibs' own
# estimate of its worker restarts for each further block of weights (G-4): the wide products
# now read 0.76-0.88 of the chip, and every point is within 1.5x (n = 4 was 1.57 and 2.05).
PINNED = {
    "C-1": (1.03, 1.03, 1.0),
    "C-2": (1.14, 1.21, 1.0),
    "C-3": (1.03, 1.05, 1.0),
    "H": (1.01, 2.6, 0.5),
    "D-1 gather": (1.2, 1.2, 1.0),
    "D-1 scatter-add": (1.2, 1.2, 1.0),
}


def _figure(x: float) -> str:
    if x >= 1000:
        return f"{x:,.0f}"
    digits = max(0, 2 - int(math.floor(math.log10(abs(x))))) if x else 0
    return f"{x:,.{digits}f}"


def table() -> str:
    """The doc's table of every calibration point (markdown), from POINTS and the model."""
    lines = ["| entry | program | published | model | model / published | status |",
             "|---|---|---|---|---|---|"]
    for p in POINTS:
        status = "fails: see below" if p.xfail else "within 1.5x"
        lines.append(f"| {p.entry} | {p.program} | {_figure(p.published)} {p.unit} | "
                     f"{_figure(model_figure(p))} {p.unit} | {ratio(p):.2f} | {status} |")
    lines += ["", "Points outside 1.5x, kept as failing tests "
              "(`xfail(strict=True)` in tests/test_calibration.py):", ""]
    reasons: dict[tuple[str, str], list[str]] = {}
    for p in POINTS:
        if p.xfail:
            reasons.setdefault((p.entry, p.xfail), []).append(p.program)
    for (entry, reason), programs in reasons.items():
        lines.append(f"- {entry}, {'; '.join(programs)}: {reason}.")
    return "\n".join(lines + ["", *dataset_table()])


def _share(x: float) -> str:
    return f"{x:.0%}"


def dataset_table() -> list[str]:
    """Fitted and held-back errors of each data set, and D-1's shapes outside 1.5x."""
    lines = ["Errors by data set (error = the larger of model / published and its inverse), "
             "fitted part against the part held back from fitting (shapes between and beyond "
             "the fitted ones):", "",
             "| data set | fitted: points | median | within 1.5x | within 2x | worst | "
             "held back: points | median | within 1.5x | within 2x | worst |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in DATASETS:
        cells = []
        for part in split_errors(name):
            cells += [str(part.points), f"{part.median:.2f}", _share(part.within_1_5),
                      _share(part.within_2), f"{part.worst:.2f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "D-1 shapes outside 1.5x (num_inputs x num_features -> num_outputs: model / "
              "published), by reason:", ""]
    by_reason: dict[str, list[str]] = {}
    for p in GRID:
        reason = grid_reason(p)
        if reason:
            by_reason.setdefault(f"{p.kind}: {reason}", []).append(
                f"{p.num_inputs}x{p.num_features}->{p.num_outputs}: {grid_ratio(p):.2f}")
    for reason, shapes in by_reason.items():
        lines.append(f"- {reason}. {len(shapes)} shapes: {'; '.join(shapes)}.")
    return lines


def doc_table() -> str:
    """The table as the doc holds it now."""
    text = DOC.read_text()
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip("\n")


def test_doc_table_is_current():
    assert doc_table() == table(), "run: .venv/bin/python tools/calibration_table.py"


@pytest.mark.parametrize("kind", list(GRID_FILES))
def test_grid_data_is_the_published_grid(kind: str):
    points = [p for p in GRID if p.kind == kind]
    assert len(points) == 90
    assert {p.num_inputs for p in points} == {16, 64, 256, 1024, 4096}
    assert {p.num_features for p in points} == {16, 64, 256}
    assert {p.num_outputs for p in points} == {32, 128, 512, 2048, 8192, 32768}
    assert sum(not p.held for p in points) == 12


def test_a_bad_grid_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "DATA", tmp_path)
    (tmp_path / GRID_FILES["gather"]).write_text("rows,cycles\n16,1000\n")
    with pytest.raises(ValueError, match="columns"):
        read_grid("gather")


@pytest.mark.parametrize("name", DATASETS)
def test_fitted_and_held_back_errors_are_pinned(name: str):
    fitted, held = split_errors(name)
    fit_median, held_median, held_within_2 = PINNED[name]
    assert fitted.points and held.points
    assert fitted.median <= fit_median, fitted
    assert held.median <= held_median, held
    assert held.within_2 >= held_within_2, held


def test_every_grid_shape_within_1_5x_or_has_its_reason():
    assert all(grid_reason(p) != "not explained" for p in GRID)
