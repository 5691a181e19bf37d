"""Inline SVG charts for the HTML report: memory by tile, histogram, liveness, cycles, BSP trace.

Drawn in Python so the page needs no plotting library and no network; every label is escaped."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

WIDTH, HEIGHT = 1200, 260
LEFT, RIGHT, TOP, BOTTOM = 80, 20, 20, 40
COLOURS = {"compute": "#4e79a7", "exchange": "#f28e2b", "sync": "#9c9c9c",
           "host_exchange": "#b07aa1", "memory": "#59a14f", "over": "#e15759",
           "limit": "#e15759", "always": "#76b7b2"}
# Ops drawn in the cycles chart and steps in the BSP strip; the tables list every op.
MAX_BARS = 25
MAX_STEPS = 5000


def human(value: float, unit: str = "") -> str:
    """Short form for labels: 1.2 K cycles; bytes in binary units (624 KiB, as Poplar prints)."""
    steps = ((2**30, " Gi"), (2**20, " Mi"), (2**10, " Ki")) if unit == "B" else \
        ((1e9, " G"), (1e6, " M"), (1e3, " K"))
    for div, prefix in steps:
        if abs(value) >= div:
            return f"{value / div:.3g}{prefix}{unit}"
    return f"{value:.4g}{' ' + unit if unit else ''}"


def _frame(body: list[str], label: str, y_max: float, x_label: str, y_unit: str,
           height: int = HEIGHT) -> str:
    plot_h = height - TOP - BOTTOM
    parts = [f'<svg class="plot" viewBox="0 0 {WIDTH} {height}" role="img" '
             f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">']
    for i in range(5):
        y = TOP + plot_h - plot_h * i / 4
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
                     'class="grid"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                     f'{escape(human(y_max * i / 4, y_unit))}</text>')
    parts += body
    parts.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{height - 8}" '
                 f'text-anchor="middle">{escape(x_label)}</text></svg>')
    return "".join(parts)


def tile_memory(per_tile: Sequence[int], limit: int) -> str:
    """One bar per tile; tiles over the limit in red; the limit as a dashed line when in range."""
    n = max(len(per_tile), 1)
    top = max(max(per_tile, default=0) * 1.1, 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    ok, over = [], []
    for i, b in enumerate(per_tile):
        x = LEFT + plot_w * (i + 0.5) / n
        y = TOP + plot_h * (1 - min(b, top) / top)
        (over if b > limit else ok).append(f"M{x:.2f} {TOP + plot_h}V{y:.2f}")
    stroke = max(plot_w / n, 1.0)
    body = [f'<path d="{"".join(d)}" stroke="{COLOURS[c]}" stroke-width="{stroke:.2f}"/>'
            for d, c in ((ok, "memory"), (over, "over")) if d]
    if limit <= top:
        y = TOP + plot_h * (1 - limit / top)
        body.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
                    f'stroke="{COLOURS["limit"]}" stroke-dasharray="6 4"/>')
        body.append(f'<text x="{WIDTH - RIGHT}" y="{y - 4:.1f}" text-anchor="end" '
                    f'fill="{COLOURS["limit"]}">tile memory {escape(human(limit, "B"))}</text>')
    else:
        body.append(f'<text x="{WIDTH - RIGHT}" y="{TOP + 12}" text-anchor="end">tile memory '
                    f'{escape(human(limit, "B"))} is above this scale</text>')
    return _frame(body, "memory per tile", top, f"tile (0 to {n - 1})", "B")


def tile_histogram(bins: Sequence[tuple[int, int, int]]) -> str:
    """How many tiles use each range of bytes."""
    top = max(max((c for _, _, c in bins), default=0), 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    w = plot_w / max(len(bins), 1)
    body = []
    for i, (low, high, count) in enumerate(bins):
        h = plot_h * count / top
        x = LEFT + i * w
        body.append(f'<rect x="{x + 1:.1f}" y="{TOP + plot_h - h:.1f}" width="{w - 2:.1f}" '
                    f'height="{h:.1f}" fill="{COLOURS["memory"]}"><title>{low:,} to {high:,} '
                    f'bytes: {count:,} tiles</title></rect>')
        body.append(f'<text x="{x + w / 2:.1f}" y="{TOP + plot_h + 14}" text-anchor="middle">'
                    f'{low:,}</text>')
    return _frame(body, "tiles per memory range", top, "bytes on the tile (range start)", "")


def liveness(points: Sequence[dict[str, Any]], always_live: int) -> str:
    """Bytes live over all tiles at each program step, with the always-live floor dashed."""
    top = max(max((p["bytes"] for p in points), default=0) * 1.1, 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    n = max(len(points) - 1, 1)

    def xy(i: int, b: float) -> tuple[float, float]:
        return LEFT + plot_w * i / n, TOP + plot_h * (1 - b / top)

    floor = TOP + plot_h * (1 - always_live / top)
    body = [f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{floor:.1f}" y2="{floor:.1f}" '
            f'stroke="{COLOURS["always"]}" stroke-dasharray="6 4"><title>always-live bytes'
            '</title></line>']
    if points:
        path = "L".join("{:.2f} {:.2f}".format(*xy(i, p["bytes"])) for i, p in enumerate(points))
        body.append(f'<path d="M{path}" fill="none" stroke="{COLOURS["compute"]}" '
                    'stroke-width="2"/>')
    for i, p in enumerate(points[:MAX_STEPS]):
        x, y = xy(i, p["bytes"])
        body.append(f'<circle cx="{x:.2f}" cy="{y:.2f}" r="3" fill="{COLOURS["compute"]}">'
                    f'<title>step {p["step"]}: {escape(p["op"])} at {escape(p["location"])}: '
                    f'{p["bytes"]:,} bytes</title></circle>')
    return _frame(body, "liveness", top, "program step", "B")


def op_cycles(ops: Sequence[dict[str, Any]]) -> str:
    """Stacked bars (sync, exchange, compute, host exchange) of the costliest ops."""
    shown = list(ops[:MAX_BARS])
    bar, gap, label_w = 18, 6, 360
    height = TOP + BOTTOM + len(shown) * (bar + gap)
    top = max(max((o["cycles"] for o in shown), default=0), 1)
    plot_w = WIDTH - label_w - RIGHT - 60  # room for the value after the longest bar
    body = []
    for i, op in enumerate(shown):
        y = TOP + i * (bar + gap)
        # Ops of one kind differ by their source line: show "dot_general  mlp.py:3 (loss)".
        where = op["location"].rsplit("/", 1)[-1]
        label = f'{op["name"].split(".", 1)[-1]}  {where}'
        body.append(f'<text x="{label_w - 6}" y="{y + 13}" text-anchor="end">'
                    f'{escape(label[:56])}</text>')
        x = float(label_w)
        for phase in ("sync", "exchange", "compute", "host_exchange"):
            w = plot_w * op[phase] / top
            if w > 0:
                body.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.2f}" height="{bar}" '
                            f'fill="{COLOURS[phase]}"><title>{escape(op["name"])} at '
                            f'{escape(op["location"])}: {phase} {op[phase]:,.0f} cycles'
                            '</title></rect>')
            x += w
        body.append(f'<text x="{x + 4:.1f}" y="{y + 13}">{escape(human(op["cycles"]))}</text>')
    return (f'<svg class="plot" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="cycles '
            f'per op" xmlns="http://www.w3.org/2000/svg">{"".join(body)}</svg>')


def bsp_trace(steps: Sequence[dict[str, Any]], total: float) -> str:
    """The bulk-synchronous timeline of one run: one row per phase kind, x in cycles."""
    rows = ("sync", "exchange", "compute", "host_exchange")
    lane, label_w = 26, 120
    height = TOP + BOTTOM + lane * len(rows)
    plot_w = WIDTH - label_w - RIGHT
    scale = plot_w / max(total, 1)
    body = [f'<text x="{label_w - 6}" y="{TOP + r * lane + 17}" text-anchor="end">'
            f'{phase.replace("_", " ")}</text>' for r, phase in enumerate(rows)]
    for s in steps[:MAX_STEPS]:
        x = s["start"]
        for r, phase in enumerate(rows):
            if s[phase] > 0:
                # A step's phases follow each other in the order of `rows`.
                body.append(f'<rect x="{label_w + x * scale:.2f}" y="{TOP + r * lane}" '
                            f'width="{max(s[phase] * scale, 0.5):.2f}" height="{lane - 4}" '
                            f'fill="{COLOURS[phase]}"><title>step {s["step"]} '
                            f'{escape(s["op"])}: {phase} {s[phase]:,.0f} cycles</title></rect>')
                x += s[phase]
    for i in range(5):
        x = label_w + plot_w * i / 4
        body.append(f'<text x="{x:.1f}" y="{height - 20}" text-anchor="middle">'
                    f'{escape(human(total * i / 4))}</text>')
    body.append(f'<text x="{label_w + plot_w / 2:.1f}" y="{height - 4}" text-anchor="middle">'
                'cycles of one run</text>')
    return (f'<svg class="plot" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="BSP '
            f'trace" xmlns="http://www.w3.org/2000/svg">{"".join(body)}</svg>')


def tile_heat_map(values: Sequence[float], unit: str, colour: str) -> str:
    """One square per tile in rows of 64 (tile 0 top left), darker for more; values in the
    tooltip."""
    n = max(len(values), 1)
    per_row, cell = 64, (WIDTH - LEFT - RIGHT) / 64
    rows = -(-n // per_row)
    height = TOP + BOTTOM + rows * cell
    top = max(max(values, default=0), 1)
    body = []
    for i, v in enumerate(values):
        x, y = LEFT + (i % per_row) * cell, TOP + (i // per_row) * cell
        share = v / top
        body.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{cell - 1:.1f}" '
                    f'height="{cell - 1:.1f}" fill="{COLOURS[colour]}" '
                    f'fill-opacity="{0.06 + 0.94 * share:.3f}"><title>tile {i}: '
                    f'{escape(human(v, unit))}</title></rect>')
    body.append(f'<text x="{LEFT}" y="{height - 8:.0f}">darkest: {escape(human(top, unit))}; '
                f'{n} tiles, {per_row} a row</text>')
    return (f'<svg class="plot" viewBox="0 0 {WIDTH} {height:.0f}" role="img" '
            f'aria-label="{escape(colour)} per tile" xmlns="http://www.w3.org/2000/svg">'
            f'{"".join(body)}</svg>')
