"""Text summaries laid out like Poplar's compile (graph) and execution summaries.

Rendered from the JSON profiles alone, so `python -m jax_ipu report DIR` needs no live program."""

from __future__ import annotations

from typing import Any

HISTOGRAM_BINS = 10
HISTOGRAM_WIDTH = 40
TOP_OPS = 15
TOP_PLANS = 10


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _size(nbytes: float) -> str:
    for div, unit in ((1024**3, "GB"), (1024**2, "MB")):
        if nbytes >= div:
            return f"{nbytes / div:,.1f} {unit}"
    return f"{nbytes / 1024:,.1f} KB"


def _row(label: str, value: str, indent: int = 2, width: int = 38) -> str:
    return f"{' ' * indent}{label + ':':<{width - indent}}{value}"


def histogram(per_tile: list[int], bins: int = HISTOGRAM_BINS) -> list[tuple[int, int, int]]:
    """(low, high, tile count) ranges of bytes from the least to the most used tile; ranges are
    half-open except the last. Starting at the minimum keeps nearly even tiles apart."""
    low, top = min(per_tile, default=0), max(per_tile, default=0)
    width = max(-(-(top - low + 1) // bins), 1)
    counts = [0] * bins
    for b in per_tile:
        counts[min((b - low) // width, bins - 1)] += 1
    return [(low + i * width, low + (i + 1) * width, c) for i, c in enumerate(counts)]


def graph_summary(graph: dict[str, Any]) -> list[str]:
    """Target, graph, memory by category, by tile (histogram) and the largest contributors."""
    t, mem, g = graph["target"], graph["memory"], graph["graph"]
    lines = [
        f"Graph profile: {graph['program']} ({graph['fingerprint'][:12]})", "",
        "Target:",
        _row("IPU version", f"{t['version']} (IPU Model)"),
        _row("Tiles per IPU", _n(t["num_tiles"])),
        _row("Memory per tile", _size(t["bytes_per_tile"])),
        _row("Total memory", _size(t["total_bytes"])),
        _row("Clock speed (approx)", f"{t['clock_hz'] / 1e6:,.1f} MHz"),
        "", "Graph:",
        _row("Number of ops", _n(g["ops"])),
        _row("Number of compute sets", _n(g["compute_sets"])),
        _row("Number of vertices", _n(g["vertices"])),
        _row("Number of variables", _n(g["variables"])),
        "", "Memory Usage:",
        "  Total for all tiles (at the peak step " f"{mem['peak_step']}):",
        _row("Peak", f"{_n(mem['peak_bytes'])} ({_size(mem['peak_bytes'])})", 4),
        _row("Always-live", _n(mem["always_live_bytes"]), 4),
        _row("Not-always-live (peak)", _n(mem["not_always_live_peak_bytes"]), 4),
        "    By category:",
    ]
    for name, nbytes in sorted(mem["by_category"].items(), key=lambda kv: -kv[1]):
        lines.append(_row(name, _n(nbytes), 6))
    per_tile = mem["per_tile_bytes"]
    lines += ["", "  By Tile:", "    Range (bytes)" + " " * 14 + "Histogram" + " " * 33 + "Tiles"]
    hist = histogram(per_tile)
    most = max((c for _, _, c in hist), default=1) or 1
    for low, high, count in hist:
        bar = "*" * (round(HISTOGRAM_WIDTH * count / most) if count else 0)
        lines.append(f"    {low:>10,} - {high:<10,}  {bar:<{HISTOGRAM_WIDTH}}  {count:>6,}")
    lines += [
        _row("Maximum", f"{_n(mem['max_tile_bytes'])} on tile {mem['max_tile']}", 4),
        _row("Minimum", _n(min(per_tile, default=0)), 4),
        _row("Average", _n(sum(per_tile) / max(len(per_tile), 1)), 4),
        _row("Tiles out of memory", _n(mem["num_tiles_out_of_memory"]), 4),
    ]
    kinds = mem.get("other_kinds", {})
    if kinds:
        lines += ["", "  Other memory kinds (not on the tiles):"]
        for kind, label in (("pinned_host", "Streaming Memory (pinned_host)"),
                            ("unpinned_host", "Host memory (unpinned_host)")):
            if kinds.get(kind):
                lines.append(_row(label, f"{_n(kinds[kind])} ({_size(kinds[kind])})", 4))
    lines += [
        "", f"  Largest contributors on tile {mem['max_tile']}:",
    ]
    for c in mem["top_contributors"]:
        lines.append(f"    {c['bytes_on_tile']:>10,}  {c['name']} [{c['category']}] "
                     f"at {c['location']}")
    planned = sorted((o for o in graph["ops"] if o.get("plan")), key=lambda o: -o["cycles"])
    if planned:
        lines += ["", f"  Plans of the costliest planned ops (of {len(planned)}):"]
        for o in planned[:TOP_PLANS]:
            lines.append(f"    {o['cycles']:>12,.0f}  {o['kind']} at {o['location']}")
            lines.append(f"                  plan: {o['plan']}")
            if o.get("runner_up"):
                lines.append(f"                  runner-up: {o['runner_up']}")
    lines += tile_vertices(graph.get("tiles"))
    if "flops" in graph:
        lines += ["", _row("Flop estimate (one run)", _n(graph["flops"]))]
    if graph["warnings"]:
        lines += ["", "Warnings:", *(f"  {w}" for w in graph["warnings"])]
    return lines


def _tile_list(tiles: list[int]) -> str:
    return ", ".join(map(str, tiles)) if len(tiles) <= 8 else \
        f"{', '.join(map(str, tiles[:6]))}, ... {tiles[-1]} ({len(tiles)} tiles)"


def tile_vertices(tiles: dict[str, Any] | None, shown: int = TOP_OPS) -> list[str]:
    """A jax_ipu.tile program's mapped vertices, and the vertices each busy tile runs."""
    if not tiles or not tiles.get("vertices"):
        return []
    lines = ["", "  Tile-mapped vertices:"]
    by_tile: dict[int, list[str]] = {}
    for v in tiles["vertices"]:
        lines.append(f"    {v['vertex']} x{v['executions']:,}: {v['cycles_per_tile']:,.0f} "
                     f"cycles on each of tiles {_tile_list(v['tiles'])} at {v['location']}")
        for t in v["tiles"]:
            by_tile.setdefault(t, []).append(v["vertex"])
    busiest = sorted(by_tile, key=lambda t: -tiles["compute_cycles"][t])[:shown]
    lines.append("  Vertices by tile (busiest first):")
    for t in busiest:
        lines.append(f"    tile {t:>5}: {tiles['compute_cycles'][t]:>12,.0f} cycles  "
                     f"{', '.join(by_tile[t])}")
    return lines


def execution_summary(execution: dict[str, Any]) -> list[str]:
    """Cycles per run and in total, tile averages per phase, and the costliest ops."""
    run, avg, total = execution["per_run"], execution["tile_average_per_run"], execution["total"]
    lines = [
        f"Execution profile: {execution['program']} ({execution['fingerprint'][:12]})", "",
        "Execution:",
        _row("Runs", _n(total["runs"])),
        _row("Total cycles (all runs)",
             f"{_n(total['cycles'])} (approx {total['microseconds']:,.1f} microseconds)"),
        _row("Cycles per run",
             f"{_n(run['cycles'])} (approx {run['microseconds']:,.1f} microseconds)"),
        _row("  compute (busiest tile)", _n(run["compute"])),
        _row("  exchange (busiest tile)", _n(run["exchange"])),
        _row("  sync", _n(run["sync"])),
        _row("  host exchange", _n(run["host_exchange"])),
        _row("  moves between memory kinds", _n(run.get("streaming", 0))),
        _row("Host cycles per call (start, end)", _n(run["call"])),
        _row("Cycles per call with the host's",
             f"{_n(run['with_call']['cycles'])} (approx "
             f"{run['with_call']['microseconds']:,.1f} microseconds)"),
        _row("Tile average compute cycles", _n(avg["compute"])),
        _row("Tile average exchange cycles", _n(avg["exchange"])),
        _row("Tile average sync cycles", _n(avg["sync"])),
        _row("Tile average host exchange cycles", _n(avg["host_exchange"])),
        "", f"  Costliest ops (of {len(execution['ops'])}), cycles per run:",
    ]
    for op in execution["ops"][:TOP_OPS]:
        lines.append(f"    {op['cycles']:>12,.0f}  {op['share']:>6.1%}  x{op['executions']:<6} "
                     f"{op['name']} at {op['location']}")
    return lines


def render(graph: dict[str, Any] | None, execution: dict[str, Any] | None) -> str:
    """The summary text of one program's report folder; either profile may be absent."""
    parts = [graph_summary(graph) if graph else [],
             execution_summary(execution) if execution else []]
    return "\n\n".join("\n".join(p) for p in parts if p) + "\n"
