"""ProgramReport: what the IPU Model says about one program, and Poplar's out-of-memory message.

to_dict() is the stable, JSON-serialisable form that profile/ builds reports from."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from jax_ipu.model.targets import Target

SCHEMA_VERSION = 1


@dataclass
class Contributor:
    """A tensor (or code) taking memory on the busiest tile at its peak."""

    name: str  # e.g. "dot_general result", "argument 0 (x)", "vertex code"
    category: str
    bytes_on_tile: int
    total_bytes: int
    location: str  # "file:line (function)" or "<unknown>"


@dataclass
class LivenessPoint:
    step: int
    op: str
    location: str
    bytes: int  # always-live + live temporaries, all tiles


@dataclass
class MemoryReport:
    by_category: dict[str, int]  # bytes over all tiles at the peak step
    always_live_bytes: int
    not_always_live_peak_bytes: int
    peak_bytes: int
    peak_step: int
    code_bytes_per_tile: int  # code and vertex state on the busiest tile
    per_tile_bytes: np.ndarray  # int64[num_tiles]: each tile's own peak
    max_tile: int
    max_tile_bytes: int
    tiles_out_of_memory: list[int]
    top_contributors: list[Contributor]
    liveness: list[LivenessPoint]
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temporary_bytes: int
    # Bytes the program holds in the other memory kinds (pinned_host: Streaming Memory,
    # unpinned_host: host memory), and what of its arguments and outputs live there.
    other_kinds: dict[str, int] = field(default_factory=dict)
    host_argument_bytes: int = 0
    host_output_bytes: int = 0
    streaming_memory_limit: int | None = None  # this IPU's share of its machine's
    # donated parameters whose buffer a loop's state takes over (XLA's aliasing through while)
    loop_aliased_parameters: tuple[int, ...] = ()

    @property
    def streaming_memory_bytes(self) -> int:
        return self.other_kinds.get("pinned_host", 0)

    @property
    def streaming_out_of_memory(self) -> bool:
        limit = self.streaming_memory_limit
        return limit is not None and self.streaming_memory_bytes > limit

    @property
    def out_of_memory(self) -> bool:
        return bool(self.tiles_out_of_memory) or self.streaming_out_of_memory


@dataclass
class OpReport:
    """One row of the per-op table; cycles and flops are totals over `executions`."""

    name: str
    kind: str
    op_class: str
    location: str
    file: str | None
    line: int | None
    shapes: str
    executions: int
    depth: int
    fused: list[str]
    flops: int
    bytes_accessed: int
    compute_cycles: float
    exchange_cycles: float
    sync_cycles: float
    host_cycles: float
    cycles: float
    tiles: int
    note: str
    link_bytes: int = 0  # bytes one IPU sends to other IPUs over IPU-Links or GW-Links
    # moves between memory kinds (Streaming Memory, host memory): their fixed part and bytes
    streaming_setup_cycles: float = 0.0
    streaming_cycles: float = 0.0
    plan: str = ""  # for planned ops (matmul, conv, gather, scatter...): the plan chosen
    runner_up: str = ""  # the best plan of another kind, and why it lost


@dataclass
class CyclesReport:
    total: float  # compute + exchange + sync + host exchange inside the program
    compute: float
    exchange: float
    sync: float
    host_exchange: float
    host_input_cycles_per_call: int  # if every argument came from the host
    # if every result were read back: a run of the device-to-host program and a stream copy each
    host_output_cycles_per_call: int
    unknown_trip_counts: int
    unmodelled_ops: list[str]
    call: int = 0  # what the host adds to every call: one Engine::run's control stream copies
    read_back: int = 0  # the same for each read-back of a result kept on the device
    # moves between memory kinds inside the program (in total): set-ups, and bytes over the
    # gateway (Streaming Memory) or the host link (host memory)
    streaming_setup: float = 0.0
    streaming: float = 0.0


@dataclass
class ProgramReport:
    """The model's judgement of one program on one target."""

    program: str
    target: Target
    memory: MemoryReport
    cycles: CyclesReport
    ops: list[OpReport]
    flops: int
    bytes_accessed: int
    seconds: float
    warnings: list[str] = field(default_factory=list)
    # jax_ipu.tile programs: compute cycles and exchanged bytes per tile, vertices by tile,
    # cycle counters (model/tiles.py tile_view); None for programs without tile ops
    tiles: dict | None = None

    def to_dict(self) -> dict:
        """JSON-serialisable report. Schema (version 1), all sizes in bytes:

        - schema_version: int; program: str (e.g. "jit_f")
        - target: {version, num_tiles, bytes_per_tile, total_bytes, clock_hz,
          fp16_flops_per_tile_cycle, fp32_flops_per_tile_cycle, exchange_bytes_per_tile_cycle,
          sync_cycles, exchange_setup_cycles, vertex_cycles, host_to_device_bytes_per_s,
          device_to_host_bytes_per_s, available_memory_proportion, peak_fp16_flops_per_s,
          peak_fp32_flops_per_s, num_ipus, ipus_per_machine, machine_links_per_ipu,
          pod_links_per_ipu, ...}
        - memory: {fits: bool, by_category: {category: bytes}, always_live_bytes,
          not_always_live_peak_bytes, peak_bytes, peak_step, code_bytes_per_tile,
          per_tile_bytes: [int] * num_tiles, max_tile, max_tile_bytes,
          tiles_out_of_memory: [tile index], num_tiles_out_of_memory,
          top_contributors: [{name, category, bytes_on_tile, total_bytes, location}],
          liveness: [{step, op, location, bytes}], argument_bytes, output_bytes, alias_bytes,
          temporary_bytes, loop_aliased_parameters: [parameter index]}
        - cycles: {total, compute, exchange, sync, host_exchange, host_input_cycles_per_call,
          host_output_cycles_per_call, unknown_trip_counts, unmodelled_ops: [op name], call,
          read_back} (total is the program on the chip; call is what the host adds to each
          call of it, read_back to each read of a result kept on the device, before its copy)
        - ops: [{name, kind, op_class, location, file, line, shapes, executions, depth,
          fused: [kind], flops, bytes_accessed, compute_cycles, exchange_cycles, sync_cycles,
          host_cycles, cycles, tiles, note, link_bytes, plan, runner_up}] in program order
          (region bodies
          follow their op); a collective's link time is in exchange_cycles, and its note names
          the algorithm, group size, steps and slowest link (and, for one that XLA's SPMD
          partitioner inserted into a sharded jax.jit program, says so; such a row follows
          the rows of its source line)
        - flops, bytes_accessed, seconds (total cycles at the target clock), warnings: [str]
        - tiles: null, or for a jax_ipu.tile program {compute_cycles: [per tile],
          exchange_bytes: [per tile], vertices: [{vertex, location, tiles, executions,
          cycles_per_tile}], counters: {site: {cycles, location, problem}}}
        """
        target = asdict(self.target)
        target["supported_dtypes"] = sorted(self.target.supported_dtypes)
        target["total_bytes"] = self.target.total_bytes
        target["peak_fp16_flops_per_s"] = self.target.peak_flops_per_s("float16")
        target["peak_fp32_flops_per_s"] = self.target.peak_flops_per_s("float32")
        memory = asdict(self.memory)
        memory["per_tile_bytes"] = [int(b) for b in self.memory.per_tile_bytes]
        memory["fits"] = not self.memory.out_of_memory
        memory["num_tiles_out_of_memory"] = len(self.memory.tiles_out_of_memory)
        return {
            "schema_version": SCHEMA_VERSION, "program": self.program, "target": target,
            "memory": memory, "cycles": asdict(self.cycles),
            "ops": [asdict(o) for o in self.ops], "flops": int(self.flops),
            "bytes_accessed": int(self.bytes_accessed), "seconds": float(self.seconds),
            "warnings": list(self.warnings), "tiles": self.tiles,
        }


def format_streaming_out_of_memory(report: ProgramReport) -> str:
    """Why a program's Streaming Memory (JAX kind pinned_host) does not fit, and what to try."""
    mem, target = report.memory, report.target
    have = (f"each {target.version} IPU has {mem.streaming_memory_limit} bytes of it (its share "
            "of its IPU-Machine's)" if mem.streaming_memory_limit else
            f"an {target.version} has none (a PCIe card, C2 or C600, has no Streaming Memory)")
    return "\n".join([
        f"Out of Streaming Memory: program {report.program} holds {mem.streaming_memory_bytes} "
        f"bytes in memory kind pinned_host but {have}.",
        "What to try: keep fewer arrays in pinned_host (offload only the largest state), shard "
        "them over more IPUs, keep some in unpinned_host (host memory, over the host link), or "
        "use jax_ipu_model_version='ipu2' (IPU-M2000) or 'ipu21' (Bow-2000), which have "
        "Streaming Memory.",
    ])


def format_out_of_memory(report: ProgramReport) -> str:
    """Poplar's out-of-memory message, with the largest contributors and what to try."""
    mem, target = report.memory, report.target
    if not mem.tiles_out_of_memory:
        return format_streaming_out_of_memory(report)
    lines = [
        f"Out of memory on tile {mem.max_tile}: {mem.max_tile_bytes} bytes used but tiles only "
        f"have {target.bytes_per_tile} bytes of memory",
        f"{len(mem.tiles_out_of_memory)} tile(s) out of memory "
        f"(program {report.program} on {target.version} with {target.num_tiles} tiles; "
        f"peak {mem.peak_bytes} of {target.total_bytes} bytes)",
        f"Largest contributors on tile {mem.max_tile}:",
    ]
    for c in mem.top_contributors:
        lines.append(f"  {c.bytes_on_tile:>10} bytes  {c.name} [{c.category}] at {c.location}")
    lines += [
        "What to try:",
        "  - keep fewer activations alive per step (smaller batch, jax.checkpoint, or a loop "
        "with lax.scan over micro-batches)",
        "  - store tensors in float16 instead of float32",
        f"  - use more tiles (jax_ipu_model_num_tiles, now {target.num_tiles}) or a larger IPU",
        "  - let matmuls and convolutions plan smaller temporaries, at some cost in cycles: "
        f"lower jax_ipu_available_memory_proportion (now {target.available_memory_proportion:g})",
        "  - donate inputs you no longer need (jax.jit(..., donate_argnums=...)) so results "
        "reuse their memory",
        "  - keep large state that a step reads once (e.g. optimizer state) in Streaming Memory: "
        "a jit in/out sharding with memory_kind='pinned_host', brought in with jax.device_put "
        "inside the step",
    ]
    if mem.streaming_out_of_memory:
        lines += ["", format_streaming_out_of_memory(report)]
    return "\n".join(lines)
