"""Wall time of the IPU Model alone on a real training step: reading its StableHLO and judging it.

The 12-layer transformer step of bench/compile_time.py is lowered once; its program is then
read and analysed several times (model.analyze: costs, plans, liveness, tile memory), without
XLA:CPU's compile, so the figure moves only with the model's own speed."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np
from jaxlib.mlir.dialects import stablehlo

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compile_time import BATCH, LAYERS, SEQ, VOCAB, init, step  # noqa: E402

from jax_ipu.compiler.program import read_program  # noqa: E402
from jax_ipu.model import analyze, get_target  # noqa: E402

ARTIFACT_VERSION = "1.13.7"  # what jaxlib 0.10.2 hands PJRT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--layers", type=int, default=LAYERS)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    params = init(rng, args.layers)
    momentum = jax.tree.map(np.zeros_like, params)
    tokens = rng.integers(0, VOCAB, (BATCH, SEQ)).astype(np.int32)
    text = jax.jit(step, donate_argnums=(0, 1)).lower(params, momentum, tokens).as_text(
        debug_info=True)
    code = stablehlo.serialize_portable_artifact_str(text, ARTIFACT_VERSION)
    target = get_target("ipu2")
    reads, judges, judges_cpu = [], [], []
    for _ in range(args.rounds):
        start = time.perf_counter()
        program = read_program(code)
        read_at, read_cpu = time.perf_counter(), time.process_time()
        report = analyze(program, target)
        judges.append(time.perf_counter() - read_at)
        judges_cpu.append(time.process_time() - read_cpu)
        reads.append(read_at - start)
    ops = sum(1 for _ in program.walk())
    # the process's CPU time moves less than wall time on a machine shared with other work
    print(f"{args.layers}-layer transformer step ({ops} ops), median of {args.rounds}: "
          f"read {statistics.median(reads):.2f} s, model {statistics.median(judges):.2f} s "
          f"(CPU {statistics.median(judges_cpu):.2f} s; {report.cycles.total:,.0f} cycles "
          "judged)")


if __name__ == "__main__":
    main()
