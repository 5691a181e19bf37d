"""One standalone HTML page per program: summary cards, SVG plots and sortable tables.

Everything is inlined and a Content-Security-Policy forbids any fetch, so it opens offline."""

from __future__ import annotations

from html import escape
from typing import Any

from jax_ipu.profile import plots
from jax_ipu.profile.summary import histogram, render

# Rows of the run table; the execution profile keeps more, the page stays light.
MAX_RUN_ROWS = 50

STYLE = """
body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1300px}
h1{font-size:22px;margin:0 0 4px}h2{margin-top:32px;border-bottom:1px solid #ccc}
.muted{color:#666}.cards{display:flex;gap:12px;flex-wrap:wrap;margin:16px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:20px}.bad{background:#fde2e2;border-color:#e15759}
.plot{width:100%;height:auto;font-size:12px}.plot text{fill:#333}.grid{stroke:#eee}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #eee;padding:3px 6px;text-align:left;vertical-align:top}
th{cursor:pointer;background:#f5f5f5;position:sticky;top:0;white-space:nowrap}
td.n{text-align:right;white-space:nowrap}td.w{min-width:32ch}.scroll{overflow-x:auto}
.key span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:-2px}
pre{background:#f7f7f7;padding:12px;overflow:auto}
"""

# Click a column heading to sort by it (numbers by data-v); click again to reverse.
SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th, col) {
  th.addEventListener("click", function () {
    var body = th.closest("table").tBodies[0];
    var down = th.dataset.dir !== "down";
    th.dataset.dir = down ? "down" : "up";
    var key = function (tr) {
      var td = tr.cells[col];
      return td.dataset.v !== undefined ? parseFloat(td.dataset.v) : td.textContent;
    };
    Array.from(body.rows).sort(function (a, b) {
      var x = key(a), y = key(b);
      var c = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
      return down ? -c : c;
    }).forEach(function (tr) { body.appendChild(tr); });
  });
});
"""


def _cell(value: Any, wide: bool = False) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text = f"{value:,.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:.3g}"
        return f'<td class="n" data-v="{float(value)!r}">{text}</td>'
    opening = '<td class="w">' if wide else "<td>"
    return f"{opening}{escape(str(value))}</td>"


def table(headings: list[str], rows: list[list[Any]], wide: frozenset[int] = frozenset()
          ) -> str:
    """A sortable table; every cell is escaped. Columns `wide` hold sentences: they keep a
    readable width, and the table scrolls sideways rather than squeeze them to a word a line."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headings)
    body = "".join("<tr>" + "".join(_cell(v, k in wide) for k, v in enumerate(row)) + "</tr>"
                   for row in rows)
    return (f'<div class="scroll"><table class="sortable"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def _card(label: str, value: str, bad: bool = False) -> str:
    return f'<div class="card{" bad" if bad else ""}">{escape(label)}<b>{escape(value)}</b></div>'


def _key() -> str:
    return '<p class="key">' + "".join(
        f'<span style="background:{plots.COLOURS[p]}"></span>{p.replace("_", " ")}'
        for p in ("sync", "exchange", "compute", "host_exchange")) + "</p>"


def _memory(graph: dict[str, Any]) -> list[str]:
    mem, target = graph["memory"], graph["target"]
    by_category = sorted(mem["by_category"].items(), key=lambda kv: -kv[1])
    return [
        "<h2>Memory</h2>",
        "<h3>Memory per tile</h3>",
        plots.tile_memory(mem["per_tile_bytes"], target["bytes_per_tile"]),
        "<h3>Tiles by memory used</h3>",
        plots.tile_histogram(histogram(mem["per_tile_bytes"])),
        "<h3>Liveness over the program (all tiles)</h3>",
        plots.liveness(mem["liveness"], mem["always_live_bytes"]),
        "<h3>By category (at the peak step, all tiles)</h3>",
        table(["category", "bytes", "share of peak"],
              [[k, v, f"{v / max(mem['peak_bytes'], 1):.1%}"] for k, v in by_category]),
        f"<h3>Largest contributors on tile {mem['max_tile']}</h3>",
        table(["name", "category", "bytes on tile", "total bytes", "location"],
              [[c["name"], c["category"], c["bytes_on_tile"], c["total_bytes"], c["location"]]
               for c in mem["top_contributors"]]),
    ]


def _tiles(graph: dict[str, Any]) -> list[str]:
    """A jax_ipu.tile program: heat maps of each tile's memory and compute, and its vertices."""
    tiles = graph.get("tiles")
    if not tiles:
        return []
    return [
        "<h2>Tiles (tile-level program)</h2>",
        "<h3>Memory per tile (heat map, tile 0 top left)</h3>",
        plots.tile_heat_map(graph["memory"]["per_tile_bytes"], "B", "memory"),
        "<h3>Compute cycles per tile, over one run</h3>",
        plots.tile_heat_map(tiles["compute_cycles"], "cycles", "compute"),
        "<h3>Mapped vertices</h3>",
        table(["vertex", "tiles", "cycles per tile", "executions", "location"],
              [[v["vertex"], len(v["tiles"]), v["cycles_per_tile"], v["executions"],
                v["location"]] for v in tiles["vertices"]]),
    ]


def _ops(graph: dict[str, Any]) -> list[str]:
    flops = graph["include_flops"]
    headings = ["op", "class", "location", "shapes", "executions", "cycles", "compute",
                "exchange", "sync", "host", "tiles", *(["flops"] if flops else []), "note",
                "plan", "runner-up (why it lost)"]
    ordered = sorted(graph["ops"], key=lambda o: -o["cycles"])
    rows = [[o["name"], o["op_class"], o["location"], o["shapes"], o["executions"], o["cycles"],
             o["compute_cycles"], o["exchange_cycles"], o["sync_cycles"], o["host_cycles"],
             o["tiles"], *([o["flops"]] if flops else []), o["note"], o.get("plan", ""),
             o.get("runner_up", "")] for o in ordered]
    prose = frozenset(k for k, h in enumerate(headings)
                      if h in ("note", "plan", "runner-up (why it lost)"))
    return ["<h2>Ops (ordered by cycles; click a heading to sort)</h2>",
            table(headings, rows, wide=prose)]


def _execution(execution: dict[str, Any]) -> list[str]:
    runs = execution["runs"][:MAX_RUN_ROWS]
    return [
        "<h2>Execution</h2>", _key(),
        "<h3>Cycles per op (costliest first, one run)</h3>",
        plots.op_cycles(execution["ops"]),
        "<h3>BSP trace of one run</h3>",
        plots.bsp_trace(execution["bsp_trace"], execution["per_run"]["cycles"]),
        f"<h3>Runs ({execution['total']['runs']:,}; first {len(runs)} listed)</h3>",
        table(["run", "device", "host start (s)", "host seconds", "device clock (cycles)"],
              [[r["index"], r["device"], r["host_start_s"], r["host_seconds"],
                r["device_clock_cycles"]] for r in runs]),
    ]


def render_html(graph: dict[str, Any] | None, execution: dict[str, Any] | None) -> str:
    """The page for one program; either profile may be absent (its sections are left out)."""
    doc = graph or execution or {}
    title = f"{doc.get('program', '?')} ({doc.get('fingerprint', '')[:12]})"
    cards, sections = [], []
    if graph:
        mem, target = graph["memory"], graph["target"]
        cards += [
            _card("target", f"{target['version']}, {target['num_tiles']:,} tiles"),
            _card("fits in memory", "yes" if mem["fits"] else
                  f"no: {mem['num_tiles_out_of_memory']:,} tiles over", not mem["fits"]),
            _card("peak memory (all tiles)", plots.human(mem["peak_bytes"], "B")),
            _card(f"busiest tile ({mem['max_tile']})",
                  f"{plots.human(mem['max_tile_bytes'], 'B')} of "
                  f"{plots.human(target['bytes_per_tile'], 'B')}"),
        ]
        sections += _memory(graph)
    if execution:
        run = execution["per_run"]
        cards += [
            _card("cycles per run", f"{run['cycles']:,.0f}"),
            _card("time per run (model)", f"{run['microseconds']:,.2f} µs"),
            _card("per call with the host's start and end",
                  f"{run['with_call']['microseconds']:,.2f} µs"),
            _card("runs", f"{execution['total']['runs']:,}"),
        ]
        sections += _execution(execution)
    if graph:
        sections += _tiles(graph)
        # The op table can be long; the plots above stay on the first screen.
        sections += _ops(graph)
    warnings = (graph or {}).get("warnings", [])
    if warnings:
        sections.append("<h2>Warnings</h2><ul>" +
                        "".join(f"<li>{escape(w)}</li>" for w in warnings) + "</ul>")
    sections.append("<h2>Text summary</h2><details><summary>as printed by "
                    "<code>python -m jax_ipu report</code></summary><pre>" +
                    escape(render(graph, execution)) + "</pre></details>")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'\">",
        f"<title>IPU Model report: {escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="muted">IPU Model report by jax-ipu: the model\'s estimate of what this '
        f"program takes on the chip. Fingerprint {escape(doc.get('fingerprint', ''))}</p>",
        f'<div class="cards">{"".join(cards)}</div>', *sections,
        f"<script>{SCRIPT}</script></body></html>",
    ])
