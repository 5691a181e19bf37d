"""Every IPU hardware figure and model constant, named, with its source and grade.

Grades: [P] Graphcore's own (code, docs, saved outputs) or an author's own measurement, [S]
second-hand, [D] derived or assumed here. Sources are publications, named by id in SOURCES."""

from __future__ import annotations

from dataclasses import dataclass

from jax_ipu.dtypes import with_pairs
from jax_ipu.errors import IpuConfigError

KIB = 1024

# The publications the figures below come from (title, where, which table or figure). Ids C-*,
# M-*, H-*, L-*, D-* are hardware measurements; tests/test_calibration.py checks the model
# against each one, and jax_ipu/model/calibration/ holds the data sets a user can check.
SOURCES: dict[str, str] = {
    "G-1": "Graphcore, IPU Programmer's Guide, 'IPU hardware overview' (tiles, memory per "
           "tile, workers, BSP): https://docs.graphcore.ai/projects/ipu-programmers-guide/",
    "G-2": "Graphcore, IPU-M2000 and Bow-2000 datasheets (IPUs per machine, IPU-Link and "
           "GW-Link ports and rates, Streaming Memory): https://www.graphcore.ai/products",
    "G-3": "Graphcore, Poplar and PopLibs API reference, 'poplar/Type.hpp' and "
           "'poplar/QuarterFloat.hpp' (device number formats): "
           "https://docs.graphcore.ai/projects/poplar-api/",
    "G-4": "graphcore/poplibs, lib/poplin/ConvPlan.cpp and lib/poplin/ConvModel.cpp (AMP "
           "unit inputs per cycle, planner sync and exchange constants, availableMemoryProportion "
           "0.6, transform costs), ConvVertexType.cpp (vertex and channel-grouping candidates), "
           "PerformanceEstimation.hpp (AMP, HorizontalMac and reduce vertex estimates) and "
           "codelets/asm/conv_partial_*.S: https://github.com/graphcore/poplibs",
    "G-5": "graphcore/poplibs, lib/popops/DynamicSlice.cpp (embedding planner: slice/update "
           "splits) and lib/popops/PerformanceEstimation.cpp (MultiSlice / MultiUpdateOp vertex "
           "cycles): https://github.com/graphcore/poplibs",
    "G-6": "Graphcore, Poplar and PopLibs User Guide, 'Memory usage' (vertex state, edges, "
           "exchange and control code) and PopVision Graph Analyser docs: "
           "https://docs.graphcore.ai/projects/poplar-user-guide/",
    "G-7": "Graphcore, PopART User Guide, 'Session options: enableOutlining' (on by default: "
           "identical subgraphs are compiled once and called, saving code memory): "
           "https://docs.graphcore.ai/projects/popart-user-guide/",
    "G-8": "graphcore/examples, vision/cnns/pytorch/train/configs.yml, 'resnet50': micro-batch "
           "18 per IPU, precision 16.16, manual recomputation, availableMemoryProportion 0.16, "
           "one IPU per replica on IPU-M2000: https://github.com/graphcore/examples",
    "G-9": "graphcore/examples, nlp/bert/popart/configs: squad_large_128_inf.json (BERT-Large "
           "SQuAD inference, 24 layers on one IPU: layers_per_ipu [24], sequence 128, "
           "micro-batch 1, FLOAT16, default availableMemoryProportion) and squad_large_384.json "
           "(its training, sequence 384, micro-batch 4: layers_per_ipu [2,3,3,3,3,3,3,4], eight "
           "IPUs): https://github.com/graphcore/examples",
    "G-10": "Graphcore's Poplar FFT example, FFTBuilder (markp-gc/poplar_explorer, src/fft/, "
            "copyright Graphcore Ltd 2022): complex tensors as a real and an imaginary FLOAT "
            "tensor; a radix-sized DFT as real matmuls, then radix-2 twiddle-and-butterfly "
            "stages as elementwise ops",
    "G-12": "graphcore/poplibs, lib/poplin/Cholesky.cpp, TriangularSolve.cpp, codelets/"
            "Cholesky.cpp and poplinCycleEstimators.cpp (the routines' blocks and their "
            "vertices' cycle estimates); graphcore/tensorflow, tensorflow/compiler/plugin/"
            "poplar/driver/poplar_executor.h (the XLA backend's block sizes: 128 for Cholesky "
            "and triangular solves) and poplar_compiler.cc (QR left to XLA's QrExpander, "
            "tensorflow/compiler/xla/service/qr_expander.cc, block 128): "
            "https://github.com/graphcore/poplibs, https://github.com/graphcore/tensorflow",
    "C-1": "graphcore-research/tessellate-ipu, notebook 'IPU Peak Flops.ipynb', saved "
           "outputs (Bow, [N,16]@[16,16] fp16 per tile): "
           "https://github.com/graphcore-research/tessellate-ipu",
    "C-2": "graphcore-research/sparsity-benchmarks, analysis notebook, dense fp16 matmul "
           "TFLOP/s plot (values read off, +-7%): "
           "https://github.com/graphcore-research/sparsity-benchmarks",
    "C-3": "graphcore-research/tessellate-ipu, tests (cycle counts in comments: scaled add, "
           "2x2 rotation, Householder update on one Mk2 tile)",
    "C-4": "UCL-RITS/pi_examples, IPU (Poplar) version, README timings on a Bow: "
           "https://github.com/UCL-RITS/pi_examples",
    "C-5": "graphcore/tutorials, tutorials/popvision/lightweight_profiling README (cycle "
           "counter and vertex launch cycles): https://github.com/graphcore/tutorials; and "
           "G-4's planner constants (90 cycles a sync, 100 per exchange)",
    "C-6": "graphcore/tutorials, tutorials/poplar/tut6_matrix_vector (matrix-vector on Mk2, "
           "PopVision execution summary against the IPU Model)",
    "M-1": "T. Louw, S. McIntosh-Smith, 'Using the Graphcore IPU for Traditional HPC "
           "Applications', EasyChair Preprint 4896 (2021), Table I (STREAM on a GC2): "
           "https://easychair.org/publications/preprint/ztfj",
    "H-1": "Graphcore, Command Line Tools, 'gc-hosttraffictest' example output (IPU-M2000): "
           "https://docs.graphcore.ai/projects/command-line-tools/",
    "H-2": "graphcore/examples, vision/efficientdet/tensorflow2/README.md (results to the host "
           "through the M2000 gateway): https://github.com/graphcore/examples",
    "H-3": "graphcore/tutorials, tutorials/popvision/lightweight_profiling README "
           "(StreamCopyBegin / Mid / End cycles of one int32 on Mk2)",
    "H-4": "graphcore/tutorials, tutorials/poplar/tut6_matrix_vector (first-run totals)",
    "H-5": "graphcore/tutorials, tutorials/pytorch/efficient_data_loading README (PopTorch "
           "small CNN, synthetic against real data)",
    "H-6": "graphcore/tutorials, tutorials/popvision/lightweight_profiling README, example 3 "
           "(the two control StreamCopy triplets that start every Engine::run, Mk2); and "
           "graphcore-research/tensorflow-jax-experimental, xla_client/pjrt/"
           "ipu_pjrt_executable.cc (the seed's PJRT client: one MAIN_SEQUENCE run a call, "
           "inputs and outputs streamed in it through callbacks; donated inputs moved by a "
           "HOST_TO_DEVICE run) and driver/poplar_executor.cc (on-device buffers read back by "
           "a DEVICE_TO_HOST run)",
    "D-1": "graphcore/Gradient-Pytorch-Geometric, ipu-speed-advantage: benchmark_util.py "
           "(programs) and precomputed_results/ipu/{gather,scatter_add}.csv (Bow, fp32): "
           "https://github.com/graphcore/Gradient-Pytorch-Geometric",
    "L-1": "Graphcore, Command Line Tools, 'gc-iputraffictest' example output (two IPUs of "
           "an IPU-M2000): https://docs.graphcore.ai/projects/command-line-tools/",
    "L-2": "graphcore/poplibs, multi-IPU test model constants (128 Gibit/s per IPU-Link at "
           "0.85 efficiency, 15 ns per sync hop)",
    "G-11": "graphcore/poplibs, lib/poprand/poprandCycleEstimators.cpp (UniformSupervisor, "
            "NormalSupervisor: supervisor call, set-up per worker, cycles per 64-bit vector): "
            "https://github.com/graphcore/poplibs",
    "C-7": "graphcore-research/tessellate-ipu, tessellate_ipu/core/"
           "tile_interpreter_hw_primitives.py (ipu_cycle_count_overhead: two successive cycle "
           "counts 45 cycles apart, measured) and tessellate_ipu/lax/tile_random.py (its "
           "estimates of Poplar's hardware-seed vertices)",
    "G-13": "Graphcore, C600 PCIe card datasheet, 'Overview' (a PCIe Gen4 card with one Mk2 "
            "IPU with FP8 support; all the card's memory is the IPU's 900 MB of "
            "In-Processor-Memory): https://docs.graphcore.ai/projects/C600-datasheet/; its "
            "peak figures, 280 TFLOP/s FP16.16 and 560 TFLOP/s FP8, as the C600 launch "
            "material states them (e.g. 'Graphcore makes China push with Mk2 AI chip', The "
            "Register / GFM Review, 2022)",
    "S-1": "Second-hand summaries of Graphcore launch material (peak TFLOP/s, aggregate link "
           "and memory bandwidth), e.g. Jia et al., 'Dissecting the Graphcore IPU "
           "Architecture via Microbenchmarking' (Citadel, 2019): arXiv:1912.03413",
}

# --- Chips ------------------------------------------------------------------------------------
IPU1_TILES = 1216  # [P] G-1, GC2 / Mk1
IPU2_TILES = 1472  # [P] G-1, GC200 / Mk2
IPU21_TILES = 1472  # [S] S-1, Bow / C600
IPU1_BYTES_PER_TILE = 256 * KIB  # [P] G-1
IPU2_BYTES_PER_TILE = 638_976  # [P] G-1: 624 KiB, as in Poplar's out-of-memory message
IPU21_BYTES_PER_TILE = 638_976  # [S] S-1: 624 KiB
IPU1_CLOCK_HZ = 1.6e9  # [P] M-1
IPU2_CLOCK_HZ = 1.33e9  # [D from P] C-6's cycles against its microseconds
IPU21_CLOCK_HZ = 1.85e9  # [P] D-1 (benchmark_util.py's Bow clock)
# The C600 card's IPU is ipu21's at its own clock: 280 TFLOP/s of FP16.16 [S] G-13 over 1472
# tiles of 128 FLOP a cycle (C-1's rate) is 1.486 GHz, against Bow's 1.85.
C600_PEAK_FP16_FLOPS = 280e12  # [S] G-13
C600_PEAK_FP8_FLOPS = 560e12  # [S] G-13
WORKER_THREADS_PER_TILE = 6  # [P] G-1, all versions; they issue in turn, one instruction a cycle

# Multiply-unit (AMP) throughput per tile per cycle; peak = tiles x this x clock.
IPU1_FP16_FLOPS_PER_TILE_CYCLE = 64  # [D] from 124.5 TFLOP/s [S] S-1
IPU1_FP32_FLOPS_PER_TILE_CYCLE = 16  # [D] from 31.1 TFLOP/s [S] S-1
IPU2_FP16_FLOPS_PER_TILE_CYCLE = 128  # [D] 64 MAC, from 250 TFLOP/s [S] S-1; C-1 measures 64
IPU2_FP32_FLOPS_PER_TILE_CYCLE = 32  # [D] 16 MAC, from 62.5 TFLOP/s [S] S-1
IPU21_FP16_FLOPS_PER_TILE_CYCLE = 128  # [P] C-1: 64 fp16 MAC per cycle per tile on Bow
IPU21_FP32_FLOPS_PER_TILE_CYCLE = 32  # [D] not published; assumed as ipu2 (same tile design)
# fp8 (QUARTER) on ipu21's AMP: twice the fp16 rate, as the C600's peaks (560 against 280
# TFLOP/s, G-13) and PopLibs' AMP vertices (16 units of 8 quarter inputs a cycle against 4
# half inputs, G-4: "32 QUARTER inputs" in 4 cycles) both say. Chips without fp8 have none.
IPU21_FP8_FLOPS_PER_TILE_CYCLE = 2 * IPU21_FP16_FLOPS_PER_TILE_CYCLE  # [D from S, P] G-13, G-4
C600_CLOCK_HZ = C600_PEAK_FP16_FLOPS / (IPU21_TILES * IPU21_FP16_FLOPS_PER_TILE_CYCLE)  # [D] G-13
# Each AMP unit is loaded this many input elements a cycle (PopLibs' convInputLoadElems,
# TileConstants.hpp's CONV_UNIT_INPUT_LOAD_ELEMS_*) [P, G-4]; a unit holds its pipeline depth
# times this many weights (below), and a block of input channels must be a multiple of it.
AMP_FP16_INPUTS_PER_CYCLE = 4  # [P]
AMP_FP32_INPUTS_PER_CYCLE = 2  # [P]
AMP_FP8_INPUTS_PER_CYCLE = 8  # [P] G-4: ConvVertexType.cpp's 8-element quarter loads
# The units are a pipeline 4 deep: each holds 4 x (its inputs a cycle) weights, 16 fp16 or 8
# fp32 (PopLibs' weightsPerConvUnit, its pipeline depth times its input load, G-4). C-1's
# [N,16] @ [16,16] in fp16 fills them and takes 4 cycles a row, plus about 50 cycles beyond a
# vertex launch and sync, which loading 16 x 16 weights at one 64-bit load a cycle (64 cycles)
# accounts for [D from P, C-1]. Was 16 deep for fp32 too.
AMP_PIPELINE_DEPTH = 4  # [D from P] C-1, G-4
# A row of inputs (one output element) streams through the units' block of weights in 4
# cycles for fp16 and fp8 and in 8 for fp32: PopLibs' AMP worker loops (G-4, lib/poplin/
# PerformanceEstimation.hpp, getConvPartialnx1WorkerCycles and getConvPartial1x1Supervisor-
# InnerLoopCycleEstimateHalfFloat: "coreCycles = floatActivations ? 8 : 4"; codelets/asm/
# conv_partial_nx1_float_float_16.S: "46 + (num_field_elems - 3) * 8"). An fp32 row loads 8
# inputs and 16 partial sums and stores 16: 8 cycles. The units a tile has follow from its
# multiply-accumulates a cycle [D from P]: 16 x 8 / 8 = 16 fp32 units on ipu2 and ipu21
# (PopLibs' f32sisov2amp vertices, conv_partial_1x1_float_float_16.S), 8 on ipu1
# (f32sisoamp); 16 fp16 units (8 on ipu1). Was 4 cycles a row for fp32 (8 units on ipu2),
# twice as fast as PopLibs' estimate on thin products.
AMP_ROW_CYCLES = 4  # [P] G-4: fp16 and fp8
AMP_FP32_ROW_CYCLES = 8  # [P] G-4
# PopLibs' AMP configurations of 8 units (ConvVertexType.cpp: "On IPU2 we need to enable 8
# engines config as well"): output channels are padded to 8 when there are no more, else to
# the tile's units [P] G-4.
AMP_MIN_UNITS = 8  # [P] G-4
# Each further pass of PopLibs' AMP vertex (ConvPartialnx1) over a block of weights (another
# kernel position, input-channel group or output-channel group) runs its supervisor's inner
# loop again and restarts its workers (G-4, lib/poplin/PerformanceEstimation.hpp,
# getConvPartialnx1SupervisorInnerLoopCycleEstimateHalfFloat): 12 + 3 supervisor cycles plus
# the weights' loads for their height (below), and per worker 17 to start and 3 + 34 for a
# worklist entry beyond the 4 cycles of each of its first 3 rows (3 + 45 and 8 for fp32): 42
# worker cycles, six workers in turn. The first pass's are in the vertex launch (C-1 measures
# one pass).
AMP_PASS_SUPERVISOR_CYCLES = 15  # [P] G-4
AMP_PASS_WORKER_CYCLES = 42  # [P] G-4
# Fewer input channels than a unit's weights: the unit holds a block of g channels at
# weights / g kernel rows (PopLibs' convUnitWeightHeight, ConvModel.cpp's
# getConvUnitWeightHeight), and the nx1 vertex's supervisor loads the weights of such a block
# in more cycles: 15 for one row, 46 for two, 60 for four, else 20 a row
# (getConvPartialnx1SupervisorInnerLoopCycleEstimateHalfFloat) [P] G-4.
AMP_WEIGHT_HEIGHT_LOAD_CYCLES = {1: 15, 2: 46, 4: 60}  # [P] G-4
AMP_WEIGHT_ROW_LOAD_CYCLES = 20  # [P] G-4: other heights
# PopLibs' 1x1 AMP vertex (a matmul, or a kernel folded whole into its channels) restarts its
# workers for each further block of weights too (G-4, lib/poplin/PerformanceEstimation.hpp,
# getConvPartial1x1SupervisorOuterLoopCycleEstimateHalfFloat): per block (an output-channel
# group of an input-channel group) 19 + 6 supervisor cycles, and per worker 38 - 7 beyond the 4
# cycles of each row, less its first three (46 beyond 8 a row, less three, for fp32): 19; per
# further input-channel group 15 more supervisor cycles and 3 a worker (its retained state).
# Was left out, which made the thinnest products (C-2, n = 4) about twice too fast [P] G-4.
AMP_1X1_PASS_SUPERVISOR_CYCLES = 25  # [P] G-4
AMP_1X1_PASS_WORKER_CYCLES = 19  # [P] G-4
AMP_1X1_INPUT_GROUP_SUPERVISOR_CYCLES = 15  # [P] G-4
AMP_1X1_INPUT_GROUP_WORKER_CYCLES = 3  # [P] G-4
# PopLibs' HorizontalMac vertex (convolutions without the AMP; G-4, PerformanceEstimation.hpp,
# getConvPartialHorizontalMacCycleEstimate and getDenseDotProductCycles): per output element,
# output channel and kernel position 7 cycles, and a dense dot product over the channels of 7
# (loop set-up and wind-down, the sum with the previous partials, a branch) plus one a 64-bit
# vector; six workers in turn [P] G-4. Was one 64-bit vector of products a cycle, 8 times
# faster than PopLibs' estimate for 4 fp32 channels.
HMAC_OUTPUT_CYCLES = 7  # [P] G-4
HMAC_DOT_CYCLES = 7  # [P] G-4
# poplin's planner charges a convolution's rearrangements (an input widened by folding kernel
# dimensions into its channels; an output whose channels were padded to the units' groups) as
# a copy at the smaller of memcpy's rate and one element a cycle, scaled by 4/5, and an
# exchange of the same bytes (G-4, ConvModel.cpp, addTransformCycleEstimate and
# getScaleFactorForTransform) [P]; memcpy's rate is taken as the local memory's [D].
TRANSFORM_COPY_SCALE = (5, 4)  # [P] G-4
# poplin reduces a matmul's or convolution's partial sums in two stages from 16 partials an
# output, in three from 125 (ConvReducePlan.cpp's getNumReduceStages, "chosen based on
# benchmarking"), each stage an exchange and an add of its groups [P] G-4.
REDUCE_TWO_STAGES_DEPTH = 16  # [P] G-4
REDUCE_THREE_STAGES_DEPTH = 125  # [P] G-4

# Local memory: one 64-bit load or store issues per cycle per tile. C-3 [P] fits 1.5 cycles
# per element of an fp32 scaled add (two loads and a store per 2 elements); M-1 [P] measures
# 6.4 B/cycle per tile for an assembly STREAM triad on GC2. Was 45 and 47.5 TB/s nominal [S]
# (23.1 and 24.3 B/cycle), which no vertex reaches.
LOCAL_BYTES_PER_TILE_CYCLE = 8  # [D from P] C-3, M-1

# On-chip exchange: ~8 TB/s any pattern on ipu2 [S] -> 4 B/cycle/tile [D]; assumed for all.
EXCHANGE_BYTES_PER_TILE_CYCLE = 4  # [D]
# Fixed costs of one BSP step. PopLibs' planners assume 90 cycles a sync and 100 cycles of
# set-up per exchange [P, C-5]; reading the cycle counter around a sync measures 30-150 [P].
# Was 200 cycles a sync [D] and no exchange set-up.
SYNC_CYCLES_PER_STEP = 90  # [P] C-5
EXCHANGE_SETUP_CYCLES = 100  # [P] C-5
# Launching a vertex on the workers and setting up its loops. C-3's small vertices cost
# about 280 + 1.5 N cycles with one sync around them, C-5 measures about 255 for a launch
# with instrumentation, C-1's AMP vertex about 331 fixed: 280 - 90 (the sync) = 190.
# Was 50 [D].
VERTEX_OVERHEAD_CYCLES = 190  # [D from P] C-3, C-5, C-1

# Host link, measured on an IPU-M2000 by gc-hosttraffictest [P, H-1]: 56.5 Gbit/s to the
# device, 23.5 Gbit/s back. Was 32 GB/s each way [D] (half of PCIe Gen4 x16).
IPU2_HOST_TO_DEVICE_BYTES_PER_S = 7.06e9  # [P] H-1
IPU2_DEVICE_TO_HOST_BYTES_PER_S = 2.93e9  # [P] H-1; H-2's 8.8 MB in 3.1 ms agrees
# No measurement for the others: a Bow-2000 has the M2000's host interface [D]; ipu1 cards
# are assumed no faster [D].
IPU21_HOST_TO_DEVICE_BYTES_PER_S = IPU2_HOST_TO_DEVICE_BYTES_PER_S  # [D]
IPU21_DEVICE_TO_HOST_BYTES_PER_S = IPU2_DEVICE_TO_HOST_BYTES_PER_S  # [D]
# A C600 sits in the host's own PCIe Gen4 slot (G-13); no transfer rate is published: taken as
# the M2000's measured rates [D], which the slot's x16 lanes would not limit.
C600_HOST_TO_DEVICE_BYTES_PER_S = IPU2_HOST_TO_DEVICE_BYTES_PER_S  # [D]
C600_DEVICE_TO_HOST_BYTES_PER_S = IPU2_DEVICE_TO_HOST_BYTES_PER_S  # [D]
IPU1_HOST_TO_DEVICE_BYTES_PER_S = IPU2_HOST_TO_DEVICE_BYTES_PER_S  # [D]
IPU1_DEVICE_TO_HOST_BYTES_PER_S = IPU2_DEVICE_TO_HOST_BYTES_PER_S  # [D]
# One stream copy of an int32 on Mk2 [P, H-3]: StreamCopyBegin 77-88k cycles and
# StreamCopyEnd 80-84k (host handshakes), StreamCopyMid about 1.5k; about 125 us in all.
# Seconds, so that each chip converts at its own clock. Was 5,000 cycles a transfer [D].
HOST_SYNC_S = 82_000 / IPU2_CLOCK_HZ  # [P] H-3: one handshake with the host, ~62 us
STREAM_COPY_MID_S = 1_500 / IPU2_CLOCK_HZ  # [P] H-3: the data phase's fixed part, ~1.1 us
# Around each stream copy the host copies the bytes between the user's array and the stream
# buffer. H-5 [P]: real data adds 546 us a device iteration over synthetic data for 1 MiB of
# input; one stream copy of it takes 124 us of set-up (H-3) and 149 us on the link (H-1),
# leaving 273 us of host-side copying for 1 MiB (PopTorch's data loader included): 3.8 GB/s.
# Fitted on H-5, the only figure that isolates it; held back: H-2 (link only, see the tests).
HOST_STAGING_BYTES_PER_S = 3.84e9  # [D from P] H-5
# Every Engine::run starts with two control stream copies that tell the IPU which program to
# run [P] (H-6: graphcore/tutorials, lightweight profiling, example 3, on Mk2, "always present
# at the beginning of a run"): the first took 155 + 1,513 + 87 cycles (Begin, Mid, End), the
# second 35,183,056 + 1,531 + 205,246 on that first run after loading the program. After the
# first run the second's Begin is taken as a data copy's (H-3: ~82k) [D]; its Mid and End are
# as measured. A call of a program is one run (the seed's PJRT client runs MAIN_SEQUENCE once
# a call, streaming its inputs and outputs inside it); reading back a result kept on the
# device is another (its DEVICE_TO_HOST program), as the seed reads on-device buffers.
# Was two host handshakes a call (164,000 cycles) [D from P] and nothing for a read-back.
RUN_CONTROL_COPIES_CYCLES = (155 + 1_513 + 87, 82_000 + 1_531 + 205_246)  # [P, D] H-6, Mk2
ENGINE_RUN_S = sum(RUN_CONTROL_COPIES_CYCLES) / IPU2_CLOCK_HZ  # [D from P] H-6: ~218 us

# IPU-Links. PopLibs' multi-IPU model: 128 Gibit/s per link at 0.85 efficiency [P, L-2];
# gc-iputraffictest moves 423 Gbit/s both ways between neighbouring IPUs of an M2000 [P, L-1],
# which is two such links each way. Was 32 GB/s per link [D] and 4 links to a neighbour.
IPU_LINK_EFFICIENCY = 0.85  # [P] L-2
IPU1_LINKS = 3  # [S] S-1: between the 2 chips of a card
IPU1_LINK_BYTES_PER_S = 64e9  # [S] per link
IPU2_LINKS = 10  # [S] S-1: 320 GB/s in total
IPU2_LINK_BYTES_PER_S = 128 * 2**30 / 8 * IPU_LINK_EFFICIENCY  # [P] L-2: 14.6 GB/s
IPU21_LINKS = 10  # [D] as ipu2
IPU21_LINK_BYTES_PER_S = 64e9  # [P] G-2: 512 Gbps per link
# Link figures are taken as each direction of a full-duplex link [D].
# Links from an IPU to each ring neighbour in its own machine.
IPU2_LINKS_PER_NEIGHBOUR = 2  # [D from P] L-1
IPU21_LINKS_PER_NEIGHBOUR = IPU2_LINKS_PER_NEIGHBOUR  # [D] a Bow-2000 is wired as an M2000
IPU1_LINKS_PER_NEIGHBOUR = IPU1_LINKS / 2  # [D] a ring of the card's pair: half each way
# --- IPU-PODs: machines of chips, IPU-Links between machines, GW-Links between PODs ----------
# Device ids map onto machines in order: ids 0-3 are the first IPU-M2000, 4-7 the second...
IPU1_IPUS_PER_MACHINE = 2  # [S] a C2 card holds an ipu1 pair
IPU2_IPUS_PER_MACHINE = 4  # [P] G-2: an IPU-M2000 holds 4 GC200
IPU21_IPUS_PER_MACHINE = 4  # [P] G-2: a Bow-2000 holds 4 Bow IPUs
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
IPU2_LINK_DOMAIN_IPUS = 64  # [P] G-2: IPU-POD64
IPU21_LINK_DOMAIN_IPUS = 64  # [P] G-2: Bow Pod64
# A C600 card holds one IPU (G-13): no links inside a "machine"; cards joined by IPU-Link
# cables are taken to have ipu21's two links to another machine, at its rate, in groups of
# the 8 cards a server holds [D]: the datasheet's overview gives no link figures.
C600_IPUS_PER_MACHINE = 1  # [P] G-13
C600_POD_LINKS_PER_IPU = IPU21_POD_LINKS_PER_IPU  # [D]
C600_LINK_DOMAIN_IPUS = 8  # [D]
# GW-Links between PODs: 2 x 100 Gbps per machine [P] (Bow-2000 datasheet; M2000 has 2 GW-Link
# ports [P]); assumed for ipu1's host network too [D].
GW_LINKS_PER_MACHINE = 2  # [P] G-2
GW_LINK_BYTES_PER_S = 100e9 / 8  # [P] G-2: 100 Gbps
# Fixed cost of one step of a collective between IPUs: a global sync over the Sync-Links,
# 15 ns per hop in PopLibs' multi-IPU model [P, L-2], plus each chip's own sync and exchange
# set-up (C-5). Was 1 us a step [D]. Through the gateways, RoCE over 100 GbE: assumed [D].
IPU_LINK_SYNC_S_PER_HOP = 15e-9  # [P] L-2
GW_LINK_STEP_LATENCY_S = 10e-6  # [D] through the gateways (RoCE over 100 GbE)

# --- Streaming Memory: the IPU-Machine's DDR behind its IPU-Gateway (JAX kind pinned_host) ----
# Capacity per machine: "Up to 256GB Streaming Memory" per Bow-2000 [P] (Bow-2000 datasheet,
# overview); "up to 448GB" per IPU-M2000 [S] (the M2000 datasheet, as quoted second-hand);
# DIMM sizes, so binary gigabytes [D]. A C2 PCIe card (ipu1) has none [P]. The model gives each
# IPU of a machine an equal share [D] (the machine's DDR is shared; Poplar places remote
# buffers per IPU).
IPU1_STREAMING_MEMORY_BYTES_PER_MACHINE = 0  # [P] no Streaming Memory on C2 cards
IPU2_STREAMING_MEMORY_BYTES_PER_MACHINE = 448 * 2**30  # [S] IPU-M2000
IPU21_STREAMING_MEMORY_BYTES_PER_MACHINE = 256 * 2**30  # [P] Bow-2000
# "All the memory on the card is contained within the IPU" (C600 datasheet, G-13): none.
C600_STREAMING_MEMORY_BYTES_PER_MACHINE = 0  # [P] G-13
# Each IPU reaches the gateway over PCIe Gen4 x8 [S] (IPU-M2000 block diagram of Graphcore's
# BMC user guide, as reproduced second-hand): 16 GT/s x 8 lanes x 128/130 = 15.75 GB/s each
# way [D]. Graphcore's popxl-addons tutorial [P] puts Streaming Memory "between 3x and 20x
# slower" than IPU-Link transfers: 320 GB/s over all 10 links / 20 = 16 GB/s, which agrees.
# No measurement is published; a Bow-2000 keeps the M2000's gateway [D].
# 16 GT/s x 8 lanes, 128b/130b encoding, in bytes: 15.75 GB/s.
STREAMING_MEMORY_BYTES_PER_S = 16e9 * 8 * (128 / 130) / 8  # [D from S]
# A copy to or from Streaming Memory is a stream copy the gateway serves without the host's
# begin and end handshakes: its data phase's fixed part (H-3, StreamCopyMid ~1.5k cycles [P])
# and the sync that starts it (C-5) [D from P].
STREAMING_COPY_SYNCS = 1  # [D]

# Number formats, from Poplar's device types [P] (G-3): BOOL, CHAR, SIGNED_CHAR, UNSIGNED_CHAR,
# SHORT, UNSIGNED_SHORT, INT, UNSIGNED_INT, LONGLONG, UNSIGNED_LONGLONG, HALF, FLOAT on every
# IPU; no DOUBLE, no complex and no bfloat16 type at all. QUARTER (8-bit float) exists only
# for __IPU_ARCH_VERSION__ >= 21 [P] (poplar/QuarterFloat.hpp) in formats 1.4.3 and 1.5.2 with
# the NaN in the negative-zero code, which are float8_e4m3fnuz and float8_e5m2fnuz [P]
# (Graphcore's IPU21 Tile Vertex ISA, as cited by LLVM review D141863, reviewed by Graphcore).
# The OCP formats float8_e4m3fn and float8_e5m2 encode NaN and infinity differently and are
# refused. Complex data is held as pairs of the real type (dtypes.with_pairs): complex64 as two
# float32, as Graphcore's own Poplar FFT holds it (G-10) [D from P]; complex128 would need
# DOUBLE, which no IPU has.
BASE_DTYPES = with_pairs(frozenset({
    "float32", "float16", "int32", "uint32", "int16", "uint16", "int8", "uint8", "bool",
    "int64", "uint64", "token",
}))
IPU21_EXTRA_DTYPES = frozenset({"float8_e4m3fnuz", "float8_e5m2fnuz"})  # [P] G-3

# --- Model constants (assumptions of this project, all [D]) -----------------------------------
VECTOR_BYTES = 8  # [P] G-1: 64-bit SIMD datapath: 2 x fp32 or 4 x fp16 per instruction
TENSOR_GRAIN_BYTES = 8  # [D] a tile holds whole 64-bit vectors of a linearly mapped tensor
MIN_BYTES_PER_TILE = 128  # [D] small tensors use fewer tiles rather than slivers
# Code and vertex state (model/code.py): Poplar's categories, one rule each.
CONTROL_CODE_BYTES_PER_TILE = 8 * KIB  # [D] the tile's program skeleton; no public figure
CONTROL_CODE_BYTES_PER_STEP = 16  # [D] four 32-bit instructions a BSP step (call, sync...)
# One codelet per distinct op kind on a tile: PopLibs' assembly codelets run to 125-215
# instructions of 4 B (G-5: MultiSlice.S 126, dynamicSlice.S 125, conv_partial_nx1 213), plus
# their supervisor and C++ parts.
VERTEX_CODE_BYTES_PER_KIND = 1 * KIB  # [D from P] G-5
POINTER_BYTES = 4  # [P] G-1: 32-bit addresses; a vertex field holds one
VERTEX_DESCRIPTOR_BYTES = 8  # [D from P] a vertex's codelet and state addresses (G-1)
# AMP vertices carry worklists: per kernel position and worker an output offset, a count and
# an input offset, 16 bits each (G-4's ConvPartial vertices).
AMP_WORKLIST_BYTES = 6  # [D from P] G-4
EXCHANGE_CODE_BYTES_PER_INSTRUCTION = 4  # [P] G-5: PopLibs counts 4 B an exchange instruction
EXCHANGE_CODE_BYTES_PER_STEP = 16  # [D] an exchange's sync and set-up, four instructions
ACCUMULATOR_BYTES = 4  # [P] partial sums in float32 ("16.32" / "32.32" precision)
# Share of each tile a matmul or convolution may take for its temporaries: PopLibs'
# availableMemoryProportion, 0.6 by default [P] (G-4; C-2 was measured at 0.6); the flag
# jax_ipu_available_memory_proportion sets it. Was a fixed 0.5 [D].
DEFAULT_AVAILABLE_MEMORY_PROPORTION = 0.6  # [P] G-4
TRANSCENDENTAL_CYCLES_PER_VECTOR = 8  # [D] exp, log, tanh, sin... on one vector
DIVIDE_CYCLES_PER_VECTOR = 4  # [D]
SIMPLE_CYCLES_PER_VECTOR = 1  # [D] add, mul, compare, select, convert...
INDEX_BYTES = 4  # [P] G-5: indices are unsigned int
# Gather and scatter vertices, in worker cycles (one worker issues every 6th cycle), from
# PopLibs' own estimates of its MultiSlice and MultiUpdateOp assembly codelets [P] (G-5):
# a lookup a worker copies costs 19 plus 2 per 64-bit vector (load and store), one it skips 8;
# an update a worker adds costs 11 plus 3 per further 64-bit atom, one it skips 5 (fp32).
MULTISLICE_CYCLES_PER_OFFSET = 19  # [P] G-5
MULTISLICE_CYCLES_PER_VECTOR = 2  # [P] G-5
MULTISLICE_CYCLES_PER_SKIPPED_OFFSET = 8  # [P] G-5
MULTIUPDATE_CYCLES_PER_OFFSET = 11  # [P] G-5
MULTIUPDATE_CYCLES_PER_ATOM = 3  # [P] G-5
MULTIUPDATE_CYCLES_PER_SKIPPED_OFFSET = 5  # [P] G-5
# PopLibs' planners count these vertices' own prologues (30 and 38 worker cycles) and price
# exchanges by bytes alone, with no syncs (G-5): plans are ranked so, while the chip is charged
# a vertex launch, exchange set-up and syncs (C-5).
MULTISLICE_PROLOGUE_CYCLES = 30  # [P] G-5
# PopLibs lays indices out at least this many a tile (createIndicesTensor, G-5).
MIN_INDICES_PER_TILE = 32  # [P] G-5
# popops' own estimates of its elementwise vertices, in worker cycles (G-5,
# popopsCycleEstimators): an unsigned add, multiply or shift 7 an element, and 26 to start a
# BinaryOp1D worker. An unsigned divide is a software routine there (no divide instruction):
# popops estimates 265 an element for its generic loop; the small quotients of a two-stage
# multiSlice's index rewrite (an index over rows per group) take fewer, fitted on D-1's fitted
# shapes (1024 x 256 -> 128: the only one with such a divide) [D].
INT_ALU_WORKER_CYCLES = 7  # [P] G-5
BINARY_OP_WORKER_OVERHEAD = 26  # [P] G-5
INDEX_DIVIDE_WORKER_CYCLES = 112  # [D from P] D-1 fitted (1024 x 256 -> 128); popops: 265
MULTIUPDATE_PROLOGUE_CYCLES = 38  # [P] G-5: 3 + 29 + 6 for a scaled fp32 update
# Writing a constant into one contiguous piece of a tile's memory costs set-up beyond its
# stores: PopLibs' Fill2d estimate, 16 before the loop, 6 after, 1-2 for alignment, less the
# 3 the 2-D loop shares (G-5). A table split over columns is one piece per row on a tile.
FILL_CYCLES_PER_REGION = 21  # [P] G-5
# Reading the tile cycle counters (TessellateIPU's ipu_cycle_count): two successive counts are
# this far apart on a Mk2 (C-7, measured by its authors).
CYCLE_COUNT_READ_CYCLES = 45  # [S] C-7
# poprand's random vertices (G-11): a supervisor call, each worker's set-up (fp32 22, fp16 24),
# then per 64-bit vector of results 4 cycles (generate, convert, scale); uniform integers take
# 6 a pair (a modulo each) and 2 for an odd last one. int32 set-up as fp32.
RANDOM_SUPERVISOR_CYCLES = 4  # [P] G-11
RANDOM_WORKER_SETUP_CYCLES = {"float32": 22, "float16": 24, "int32": 22}  # [P] G-11
RANDOM_CYCLES_PER_VECTOR = 4  # [P] G-11
RANDOM_INT_CYCLES_PER_PAIR = 6  # [P] G-11
# Poplar's runtime vertices that read and write a tile's hardware seeds: (base, per worker),
# as TessellateIPU estimates them (C-7).
HW_SEEDS_GET_CYCLES = (14, 7)  # [S] C-7
HW_SEEDS_SET_CYCLES = (14, 10)  # [S] C-7

# popops' reduction library adds an intermediate stage while more than this many partials an
# output remain and they come from many tiles (reductionFactorThresholdToAddMoreStages, G-5).
REDUCTION_STAGE_DEPTH = 64  # [P] G-5
# popops' Cast vertices read with two 64-bit load ports and write with one (castWorkerCycles,
# G-5): a cast's vector is what two loads of its source and one store of its result hold.
CAST_LOAD_PORTS = 2  # [P] G-5

# --- Library routines (model/linalg.py) ---------------------------------------------------------
# Graphcore's XLA backend calls poplin::cholesky and poplin::triangularSolve with blockSize 128
# (its default, "XLA default block size") and leaves QR to XLA's QrExpander, block 128 [P] G-12.
CHOLESKY_BLOCK_SIZE = 128  # [P] G-12
TRIANGULAR_SOLVE_BLOCK_SIZE = 128  # [P] G-12
QR_BLOCK_SIZE = 128  # [P] G-12
# PopLibs' estimates of its vertices, in tile cycles [P] G-12 (poplinCycleEstimators.cpp):
# Cholesky on an n x n block, a n^3 + b n^2 + c n + d (one worker: a dot element costs 6a, a
# step of the loop 2b);
POPLIN_CHOLESKY_CYCLES = {"float32": (1.0, 102.0, 101.0, 102.0),
                          "float16": (0.5, 795 / 4, 191 / 2, 426.0)}  # [P] G-12
# TriangularSolve, one right-hand side, b n^2 + c n + d, by dtype and lower;
POPLIN_TRIANGULAR_SOLVE_CYCLES = {
    ("float32", True): (1.5, 180.0, -126.0), ("float32", False): (27 / 4, 327 / 2, 54.0),
    ("float16", True): (0.75, 318.0, -150.0),
    ("float16", False): (135 / 16, 1089 / 4, 12.0)}  # [P] G-12
# and TriangularSolveMultiWorker (n a multiple of its 4 columns a worker call): supervisor
# cycles outside its loop and per call, worker cycles outside their loop and per iteration.
TRIANGULAR_SOLVE_MULTIWORKER_COLUMNS = 4  # [P] G-12
TRIANGULAR_SOLVE_MULTIWORKER_CYCLES = {
    ("float32", True): (21, 9, 74, 11), ("float32", False): (42, 6, 99, 10),
    ("float16", True): (21, 9, 112, 17), ("float16", False): (42, 6, 145, 17)}  # [P] G-12


@dataclass(frozen=True)
class Target:
    """One IPU version at a chosen number of tiles, as the model sees it."""

    version: str
    num_tiles: int
    bytes_per_tile: int
    clock_hz: float
    fp16_flops_per_tile_cycle: int
    fp32_flops_per_tile_cycle: int
    fp8_flops_per_tile_cycle: int
    local_bytes_per_tile_cycle: float
    exchange_bytes_per_tile_cycle: float
    sync_cycles: int
    exchange_setup_cycles: int
    vertex_cycles: int
    host_to_device_bytes_per_s: float
    device_to_host_bytes_per_s: float
    host_sync_s: float
    stream_copy_mid_s: float
    ipu_link_bytes_per_s: float
    worker_threads: int
    supported_dtypes: frozenset[str]
    full_chip_tiles: int
    ipus_per_machine: int
    machine_links_per_ipu: int  # IPU-Links to the other IPUs of the same machine
    links_per_neighbour: float  # IPU-Links to each ring neighbour in the same machine
    pod_links_per_ipu: int  # IPU-Links to IPUs of other machines
    link_domain_ipus: int  # IPUs joined by IPU-Links alone (one POD)
    # Share of each tile a matmul or convolution plan may use for its temporaries.
    available_memory_proportion: float = DEFAULT_AVAILABLE_MEMORY_PROPORTION
    # IPUs the program runs on (replicas x partitions); model.analyze() sets it per program.
    num_ipus: int = 1

    @property
    def total_bytes(self) -> int:
        return self.num_tiles * self.bytes_per_tile

    def flops_per_tile_cycle(self, dtype: str) -> int:
        """Multiply-unit throughput for operands of this dtype: fp8 at its own rate, other
        16-bit floats at the fp16 rate."""
        if dtype.startswith("float8"):
            return self.fp8_flops_per_tile_cycle
        if dtype in ("float16", "bfloat16"):
            return self.fp16_flops_per_tile_cycle
        return self.fp32_flops_per_tile_cycle

    def amp_shape(self, itemsize: int) -> tuple[int, int]:
        """(units, inputs loaded a cycle) of the multiply units for operands of itemsize bytes:
        a product is padded to whole units (its output channels) and whole inputs. The units
        follow from the multiply-accumulates a cycle, a row's cycles and a block's depth."""
        if itemsize == 1 and self.fp8_flops_per_tile_cycle > self.fp16_flops_per_tile_cycle:
            inputs, flops = AMP_FP8_INPUTS_PER_CYCLE, self.fp8_flops_per_tile_cycle
        elif itemsize <= 2:
            inputs, flops = AMP_FP16_INPUTS_PER_CYCLE, self.fp16_flops_per_tile_cycle
        else:
            inputs, flops = AMP_FP32_INPUTS_PER_CYCLE, self.fp32_flops_per_tile_cycle
        depth = AMP_PIPELINE_DEPTH * inputs
        return max(1, flops // 2 * self.amp_row_cycles(itemsize) // depth), inputs

    def amp_row_cycles(self, itemsize: int) -> int:
        """Cycles a row of inputs takes through the units' block of weights (4, fp32 8)."""
        return AMP_FP32_ROW_CYCLES if itemsize >= 4 else AMP_ROW_CYCLES

    def amp_block_inputs(self, itemsize: int) -> int:
        """Inputs of a block of weights the multiply units hold: their pipeline depth times the
        inputs each takes a cycle (16 fp16, 8 fp32)."""
        return AMP_PIPELINE_DEPTH * self.amp_shape(itemsize)[1]

    def peak_flops_per_s(self, dtype: str = "float16") -> float:
        return self.num_tiles * self.flops_per_tile_cycle(dtype) * self.clock_hz


_CHIPS: dict[str, dict] = {
    "ipu1": dict(
        full_chip_tiles=IPU1_TILES, bytes_per_tile=IPU1_BYTES_PER_TILE, clock_hz=IPU1_CLOCK_HZ,
        fp16_flops_per_tile_cycle=IPU1_FP16_FLOPS_PER_TILE_CYCLE,
        fp32_flops_per_tile_cycle=IPU1_FP32_FLOPS_PER_TILE_CYCLE,
        fp8_flops_per_tile_cycle=IPU1_FP16_FLOPS_PER_TILE_CYCLE,
        host_to_device_bytes_per_s=IPU1_HOST_TO_DEVICE_BYTES_PER_S,
        device_to_host_bytes_per_s=IPU1_DEVICE_TO_HOST_BYTES_PER_S,
        ipu_link_bytes_per_s=IPU1_LINK_BYTES_PER_S, supported_dtypes=BASE_DTYPES,
        ipus_per_machine=IPU1_IPUS_PER_MACHINE, machine_links_per_ipu=IPU1_MACHINE_LINKS_PER_IPU,
        links_per_neighbour=IPU1_LINKS_PER_NEIGHBOUR,
        pod_links_per_ipu=IPU1_POD_LINKS_PER_IPU, link_domain_ipus=IPU1_LINK_DOMAIN_IPUS),
    "ipu2": dict(
        full_chip_tiles=IPU2_TILES, bytes_per_tile=IPU2_BYTES_PER_TILE, clock_hz=IPU2_CLOCK_HZ,
        fp16_flops_per_tile_cycle=IPU2_FP16_FLOPS_PER_TILE_CYCLE,
        fp32_flops_per_tile_cycle=IPU2_FP32_FLOPS_PER_TILE_CYCLE,
        fp8_flops_per_tile_cycle=IPU2_FP16_FLOPS_PER_TILE_CYCLE,
        host_to_device_bytes_per_s=IPU2_HOST_TO_DEVICE_BYTES_PER_S,
        device_to_host_bytes_per_s=IPU2_DEVICE_TO_HOST_BYTES_PER_S,
        ipu_link_bytes_per_s=IPU2_LINK_BYTES_PER_S, supported_dtypes=BASE_DTYPES,
        ipus_per_machine=IPU2_IPUS_PER_MACHINE, machine_links_per_ipu=IPU2_MACHINE_LINKS_PER_IPU,
        links_per_neighbour=IPU2_LINKS_PER_NEIGHBOUR,
        pod_links_per_ipu=IPU2_POD_LINKS_PER_IPU, link_domain_ipus=IPU2_LINK_DOMAIN_IPUS),
    "ipu21": dict(
        full_chip_tiles=IPU21_TILES, bytes_per_tile=IPU21_BYTES_PER_TILE,
        clock_hz=IPU21_CLOCK_HZ,
        fp16_flops_per_tile_cycle=IPU21_FP16_FLOPS_PER_TILE_CYCLE,
        fp32_flops_per_tile_cycle=IPU21_FP32_FLOPS_PER_TILE_CYCLE,
        fp8_flops_per_tile_cycle=IPU21_FP8_FLOPS_PER_TILE_CYCLE,
        host_to_device_bytes_per_s=IPU21_HOST_TO_DEVICE_BYTES_PER_S,
        device_to_host_bytes_per_s=IPU21_DEVICE_TO_HOST_BYTES_PER_S,
        ipu_link_bytes_per_s=IPU21_LINK_BYTES_PER_S,
        supported_dtypes=BASE_DTYPES | IPU21_EXTRA_DTYPES,
        ipus_per_machine=IPU21_IPUS_PER_MACHINE,
        machine_links_per_ipu=IPU21_MACHINE_LINKS_PER_IPU,
        links_per_neighbour=IPU21_LINKS_PER_NEIGHBOUR,
        pod_links_per_ipu=IPU21_POD_LINKS_PER_IPU, link_domain_ipus=IPU21_LINK_DOMAIN_IPUS),
    # The C600 PCIe card: ipu21's IPU at its own clock, one to a card, no Streaming Memory.
    "c600": dict(
        full_chip_tiles=IPU21_TILES, bytes_per_tile=IPU21_BYTES_PER_TILE,
        clock_hz=C600_CLOCK_HZ,
        fp16_flops_per_tile_cycle=IPU21_FP16_FLOPS_PER_TILE_CYCLE,
        fp32_flops_per_tile_cycle=IPU21_FP32_FLOPS_PER_TILE_CYCLE,
        fp8_flops_per_tile_cycle=IPU21_FP8_FLOPS_PER_TILE_CYCLE,
        host_to_device_bytes_per_s=C600_HOST_TO_DEVICE_BYTES_PER_S,
        device_to_host_bytes_per_s=C600_DEVICE_TO_HOST_BYTES_PER_S,
        ipu_link_bytes_per_s=IPU21_LINK_BYTES_PER_S,
        supported_dtypes=BASE_DTYPES | IPU21_EXTRA_DTYPES,
        ipus_per_machine=C600_IPUS_PER_MACHINE, machine_links_per_ipu=0,
        links_per_neighbour=0, pod_links_per_ipu=C600_POD_LINKS_PER_IPU,
        link_domain_ipus=C600_LINK_DOMAIN_IPUS),
}

# The versions, their products and full tile counts, as config.py's flags offer them.
VERSIONS: tuple[str, ...] = tuple(_CHIPS)
PRODUCTS = {"ipu1": "GC2", "ipu2": "GC200, M2000", "ipu21": "Bow", "c600": "C600 PCIe card"}  # [P]
FULL_CHIP_TILES = {version: chip["full_chip_tiles"] for version, chip in _CHIPS.items()}


def memory_proportion_ok(proportion: float) -> bool:
    """Whether a share of tile memory is one PopLibs accepts for availableMemoryProportion."""
    return 0 < proportion <= 1


def get_target(version: str, num_tiles: int | None = None,
               available_memory_proportion: float = DEFAULT_AVAILABLE_MEMORY_PROPORTION
               ) -> Target:
    """The target for an IPU version; num_tiles None means the full chip. IpuConfigError,
    naming the flag that sets it, for a version, tile count or proportion the chip has not."""
    if version not in _CHIPS:
        raise IpuConfigError(
            f"jax_ipu_model_version={version!r} is not an IPU version: allowed values are "
            f"{', '.join(map(repr, VERSIONS))}.")
    chip = _CHIPS[version]
    full = chip["full_chip_tiles"]
    tiles = full if num_tiles is None else int(num_tiles)
    if not 1 <= tiles <= full:
        raise IpuConfigError(
            f"jax_ipu_model_num_tiles={num_tiles} is not a tile count of an {version} ({full} "
            f"tiles): allowed values are 0 (full chip) or 1 to {full}.")
    if not memory_proportion_ok(available_memory_proportion):
        raise IpuConfigError(
            f"jax_ipu_available_memory_proportion={available_memory_proportion} is outside "
            "(0, 1]: allowed values are a number greater than 0 and at most 1, e.g. 0.3.")
    return Target(
        version=version, num_tiles=tiles, local_bytes_per_tile_cycle=LOCAL_BYTES_PER_TILE_CYCLE,
        exchange_bytes_per_tile_cycle=EXCHANGE_BYTES_PER_TILE_CYCLE,
        sync_cycles=SYNC_CYCLES_PER_STEP, exchange_setup_cycles=EXCHANGE_SETUP_CYCLES,
        vertex_cycles=VERTEX_OVERHEAD_CYCLES, host_sync_s=HOST_SYNC_S,
        stream_copy_mid_s=STREAM_COPY_MID_S, worker_threads=WORKER_THREADS_PER_TILE,
        available_memory_proportion=float(available_memory_proportion), **chip)
