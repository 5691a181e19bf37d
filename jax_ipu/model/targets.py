"""Every IPU hardware figure and model constant, named, with its source and grade.

Grades as in IPU_FACTS.md: [P] Graphcore's own, [S] second-hand, [D] derived or assumed here."""

from __future__ import annotations

from dataclasses import dataclass

from jax_ipu.errors import IpuConfigError

KIB = 1024

# --- Chips ------------------------------------------------------------------------------------
IPU1_TILES = 1216  # [P] GC2 / Mk1
IPU2_TILES = 1472  # [P] GC200 / Mk2
IPU21_TILES = 1472  # [S] Bow / C600
IPU1_BYTES_PER_TILE = 256 * KIB  # [P]
IPU2_BYTES_PER_TILE = 638_976  # [P] 624 KiB, as in Poplar's OOM message
IPU21_BYTES_PER_TILE = 638_976  # [S] 624 KiB
IPU1_CLOCK_HZ = 1.6e9  # [P]
IPU2_CLOCK_HZ = 1.33e9  # [D from P]
IPU21_CLOCK_HZ = 1.85e9  # [S] Bow
WORKER_THREADS_PER_TILE = 6  # [P] all versions

# Multiply-unit (AMP) throughput per tile per cycle; peak = tiles x this x clock.
IPU1_FP16_FLOPS_PER_TILE_CYCLE = 64  # [D] from 124.5 TFLOP/s [S]
IPU1_FP32_FLOPS_PER_TILE_CYCLE = 16  # [D] from 31.1 TFLOP/s [S]
IPU2_FP16_FLOPS_PER_TILE_CYCLE = 128  # [D] 64 MAC, from 250 TFLOP/s [S]
IPU2_FP32_FLOPS_PER_TILE_CYCLE = 32  # [D] 16 MAC, from 62.5 TFLOP/s [S]
IPU21_FP16_FLOPS_PER_TILE_CYCLE = 128  # [D] from 350 TFLOP/s at 1.85 GHz [S]
IPU21_FP32_FLOPS_PER_TILE_CYCLE = 32  # [D] not published; assumed as ipu2 (same tile design)

# Local SRAM bandwidth, bytes per tile per cycle.
IPU1_LOCAL_BYTES_PER_TILE_CYCLE = 45e12 / (IPU1_TILES * IPU1_CLOCK_HZ)  # [D] 45 TB/s [S]
IPU2_LOCAL_BYTES_PER_TILE_CYCLE = 47.5e12 / (IPU2_TILES * IPU2_CLOCK_HZ)  # [D] 47.5 TB/s [S]

# On-chip exchange: ~8 TB/s any pattern on ipu2 [S] -> 4 B/cycle/tile [D]; assumed for all.
EXCHANGE_BYTES_PER_TILE_CYCLE = 4  # [D]
# Cycles for one on-chip sync between BSP steps. Poplar's Model assumes ~0; the published
# hardware run spent ~120x the Model's sync, so a few hundred cycles per step is assumed.
SYNC_CYCLES_PER_STEP = 200  # [D] assumption, calibrate on hardware

# Host link and IPU-Links (bytes per second).
IPU1_HOST_BYTES_PER_S = 32e9  # [D] PCIe Gen4 x16 assumed, one direction
IPU2_HOST_BYTES_PER_S = 32e9  # [D] half of 64 GB/s PCIe Gen4 x16 [S], one direction
IPU21_HOST_BYTES_PER_S = 32e9  # [D] PCIe Gen4 [P], as ipu2
HOST_TRANSFER_LATENCY_CYCLES = 5_000  # [D] per transfer: sync with host + stream setup
IPU1_LINKS = 3  # [S] between the 2 chips of a card
IPU1_LINK_BYTES_PER_S = 64e9  # [S] per link
IPU2_LINKS = 10  # [S] 320 GB/s in total
IPU2_LINK_BYTES_PER_S = 32e9  # [D] 320 GB/s / 10 links [S]
IPU21_LINKS = 10  # [D] as ipu2
IPU21_LINK_BYTES_PER_S = 64e9  # [P] 512 Gbps per link
# Link figures are taken as each direction of a full-duplex link [D].

# --- IPU-PODs: machines of chips, IPU-Links between machines, GW-Links between PODs ----------
# Device ids map onto machines in order: ids 0-3 are the first IPU-M2000, 4-7 the second...
IPU1_IPUS_PER_MACHINE = 2  # [S] a C2 card holds an ipu1 pair
IPU2_IPUS_PER_MACHINE = 4  # [P] an IPU-M2000 holds 4 GC200
IPU21_IPUS_PER_MACHINE = 4  # [P] a Bow-2000 holds 4 Bow IPUs
# An IPU-M2000 has 8 IPU-Link ports to other machines [P] for its 4 IPUs: 2 per IPU [D]; the
# other 8 of an ipu2's 10 links join it to the IPUs of its own machine [D]. Bow-2000 as M2000.
IPU2_POD_LINKS_PER_IPU = 2  # [D] 8 ports [P] / 4 IPUs
IPU2_MACHINE_LINKS_PER_IPU = IPU2_LINKS - IPU2_POD_LINKS_PER_IPU  # [D] 8
IPU21_POD_LINKS_PER_IPU = 2  # [D] as ipu2
IPU21_MACHINE_LINKS_PER_IPU = IPU21_LINKS - IPU21_POD_LINKS_PER_IPU  # [D] 8
IPU1_MACHINE_LINKS_PER_IPU = IPU1_LINKS  # [S] all 3 join the pair on a card
IPU1_POD_LINKS_PER_IPU = 1  # [D] assumption: one cable link from each chip to the next card
# IPUs that IPU-Links alone connect: an IPU-POD64 of 16 machines [P]; ipu1 servers held 8
# C2 cards [S]. Beyond that, traffic leaves through the machine's gateway.
IPU1_LINK_DOMAIN_IPUS = 16  # [S]
IPU2_LINK_DOMAIN_IPUS = 64  # [P] IPU-POD64
IPU21_LINK_DOMAIN_IPUS = 64  # [P] Bow Pod64
# GW-Links between PODs: 2 x 100 Gbps per machine [P] (Bow-2000 datasheet; M2000 has 2 GW-Link
# ports [P]); assumed for ipu1's host network too [D].
GW_LINKS_PER_MACHINE = 2  # [P]
GW_LINK_BYTES_PER_S = 100e9 / 8  # [P] 100 Gbps
# Fixed cost of one step of a collective between IPUs: a sync over Sync-Links plus setting up
# the link exchange. Not published; assumed [D], calibrate on hardware.
IPU_LINK_STEP_LATENCY_S = 1e-6  # [D] within an IPU-Link domain
GW_LINK_STEP_LATENCY_S = 10e-6  # [D] through the gateways (RoCE over 100 GbE)

# Number formats [P]: f64, complex and bf16 absent on ipu1/ipu2; fp8 on ipu21 only [S].
BASE_DTYPES = frozenset({
    "float32", "float16", "int32", "uint32", "int16", "uint16", "int8", "uint8", "bool",
    "int64", "uint64", "token",
})
IPU21_EXTRA_DTYPES = frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2"})  # [S]

# --- Model constants (assumptions of this project, all [D]) -----------------------------------
VECTOR_BYTES = 8  # [P] 64-bit SIMD datapath: 2 x fp32 or 4 x fp16 per instruction
TENSOR_GRAIN_BYTES = 8  # [D] a tile holds whole 64-bit vectors of a linearly mapped tensor
MIN_BYTES_PER_TILE = 128  # [D] small tensors use fewer tiles rather than slivers
VERTEX_OVERHEAD_CYCLES = 50  # [D] launch + loop setup of one vertex on a worker
CONTROL_CODE_BYTES_PER_TILE = 8 * KIB  # [D] program skeleton on every tile
VERTEX_CODE_BYTES_PER_KIND = 1 * KIB  # [D] one codelet per distinct op kind on a tile
VERTEX_STATE_BYTES_PER_OP = 32  # [D] one vertex instance per op per tile it runs on
EXCHANGE_CODE_BYTES_PER_STEP = 64  # [D] per tile per exchange phase
CONTROL_CODE_BYTES_PER_STEP = 16  # [D] per tile per BSP step
ACCUMULATOR_BYTES = 4  # [P] partial sums in float32 ("16.32" / "32.32" precision)
MATMUL_WORKSPACE_FRACTION = 0.5  # [D] share of a tile a matmul plan may use for its blocks
TRANSCENDENTAL_CYCLES_PER_VECTOR = 8  # [D] exp, log, tanh, sin... on one vector
DIVIDE_CYCLES_PER_VECTOR = 4  # [D]
SIMPLE_CYCLES_PER_VECTOR = 1  # [D] add, mul, compare, select, convert...
INDEX_CYCLES_PER_ELEMENT = 4  # [D] gather/scatter address arithmetic per indexed row


@dataclass(frozen=True)
class Target:
    """One IPU version at a chosen number of tiles, as the model sees it."""

    version: str
    num_tiles: int
    bytes_per_tile: int
    clock_hz: float
    fp16_flops_per_tile_cycle: int
    fp32_flops_per_tile_cycle: int
    local_bytes_per_tile_cycle: float
    exchange_bytes_per_tile_cycle: float
    sync_cycles: int
    host_bytes_per_s: float
    host_latency_cycles: int
    ipu_links: int
    ipu_link_bytes_per_s: float
    worker_threads: int
    supported_dtypes: frozenset[str]
    full_chip_tiles: int
    ipus_per_machine: int
    machine_links_per_ipu: int  # IPU-Links to the other IPUs of the same machine
    pod_links_per_ipu: int  # IPU-Links to IPUs of other machines
    link_domain_ipus: int  # IPUs joined by IPU-Links alone (one POD)
    # IPUs the program runs on (replicas x partitions); model.analyze() sets it per program.
    num_ipus: int = 1

    @property
    def total_bytes(self) -> int:
        return self.num_tiles * self.bytes_per_tile

    def flops_per_tile_cycle(self, dtype: str) -> int:
        """Multiply-unit throughput for operands of this dtype (fp16 rate for <=16-bit floats)."""
        if dtype in ("float16", "bfloat16") or dtype.startswith("float8"):
            return self.fp16_flops_per_tile_cycle
        return self.fp32_flops_per_tile_cycle

    def peak_flops_per_s(self, dtype: str = "float16") -> float:
        return self.num_tiles * self.flops_per_tile_cycle(dtype) * self.clock_hz


_CHIPS: dict[str, dict] = {
    "ipu1": dict(
        full_chip_tiles=IPU1_TILES, bytes_per_tile=IPU1_BYTES_PER_TILE, clock_hz=IPU1_CLOCK_HZ,
        fp16_flops_per_tile_cycle=IPU1_FP16_FLOPS_PER_TILE_CYCLE,
        fp32_flops_per_tile_cycle=IPU1_FP32_FLOPS_PER_TILE_CYCLE,
        local_bytes_per_tile_cycle=IPU1_LOCAL_BYTES_PER_TILE_CYCLE,
        host_bytes_per_s=IPU1_HOST_BYTES_PER_S, ipu_links=IPU1_LINKS,
        ipu_link_bytes_per_s=IPU1_LINK_BYTES_PER_S, supported_dtypes=BASE_DTYPES,
        ipus_per_machine=IPU1_IPUS_PER_MACHINE, machine_links_per_ipu=IPU1_MACHINE_LINKS_PER_IPU,
        pod_links_per_ipu=IPU1_POD_LINKS_PER_IPU, link_domain_ipus=IPU1_LINK_DOMAIN_IPUS),
    "ipu2": dict(
        full_chip_tiles=IPU2_TILES, bytes_per_tile=IPU2_BYTES_PER_TILE, clock_hz=IPU2_CLOCK_HZ,
        fp16_flops_per_tile_cycle=IPU2_FP16_FLOPS_PER_TILE_CYCLE,
        fp32_flops_per_tile_cycle=IPU2_FP32_FLOPS_PER_TILE_CYCLE,
        local_bytes_per_tile_cycle=IPU2_LOCAL_BYTES_PER_TILE_CYCLE,
        host_bytes_per_s=IPU2_HOST_BYTES_PER_S, ipu_links=IPU2_LINKS,
        ipu_link_bytes_per_s=IPU2_LINK_BYTES_PER_S, supported_dtypes=BASE_DTYPES,
        ipus_per_machine=IPU2_IPUS_PER_MACHINE, machine_links_per_ipu=IPU2_MACHINE_LINKS_PER_IPU,
        pod_links_per_ipu=IPU2_POD_LINKS_PER_IPU, link_domain_ipus=IPU2_LINK_DOMAIN_IPUS),
    "ipu21": dict(
        full_chip_tiles=IPU21_TILES, bytes_per_tile=IPU21_BYTES_PER_TILE,
        clock_hz=IPU21_CLOCK_HZ,
        fp16_flops_per_tile_cycle=IPU21_FP16_FLOPS_PER_TILE_CYCLE,
        fp32_flops_per_tile_cycle=IPU21_FP32_FLOPS_PER_TILE_CYCLE,
        # ipu21 is an ipu2 tile at a higher clock: same bytes per cycle [D]
        local_bytes_per_tile_cycle=IPU2_LOCAL_BYTES_PER_TILE_CYCLE,
        host_bytes_per_s=IPU21_HOST_BYTES_PER_S, ipu_links=IPU21_LINKS,
        ipu_link_bytes_per_s=IPU21_LINK_BYTES_PER_S,
        supported_dtypes=BASE_DTYPES | IPU21_EXTRA_DTYPES,
        ipus_per_machine=IPU21_IPUS_PER_MACHINE,
        machine_links_per_ipu=IPU21_MACHINE_LINKS_PER_IPU,
        pod_links_per_ipu=IPU21_POD_LINKS_PER_IPU, link_domain_ipus=IPU21_LINK_DOMAIN_IPUS),
}

VERSIONS: tuple[str, ...] = tuple(_CHIPS)


def get_target(version: str, num_tiles: int | None = None) -> Target:
    """The target for an IPU version; num_tiles None means the full chip."""
    if version not in _CHIPS:
        raise IpuConfigError(
            f"unknown IPU version {version!r}; allowed values: {', '.join(VERSIONS)}")
    chip = _CHIPS[version]
    full = chip["full_chip_tiles"]
    tiles = full if num_tiles is None else int(num_tiles)
    if not 1 <= tiles <= full:
        raise IpuConfigError(
            f"num_tiles={num_tiles} is outside 1..{full} for {version}")
    return Target(
        version=version, num_tiles=tiles,
        exchange_bytes_per_tile_cycle=EXCHANGE_BYTES_PER_TILE_CYCLE,
        sync_cycles=SYNC_CYCLES_PER_STEP, host_latency_cycles=HOST_TRANSFER_LATENCY_CYCLES,
        worker_threads=WORKER_THREADS_PER_TILE, **chip)
