"""The IPU Model's memory verdicts on Graphcore's published one-IPU training configurations.

ResNet-50 (graphcore/examples, vision/cnns/pytorch/train/configs.yml, `resnet50`; G-8): micro-
batch 18 of 224x224 images per IPU, fp16 weights, activations and partials ("16.16"), SGD
with momentum and gradient accumulation, recomputation from checkpoints at the residual adds,
availableMemoryProportion 0.16, one IPU per replica of an IPU-M2000 (Mk2). It runs there, so
the model must judge that it fits. Graphcore gives no out-of-memory configuration; the
published recomputation and micro-batch are what made it fit, so without recomputation, or
at four times the micro-batch, the model must judge it out of memory.

Run from the repository root: .venv/bin/python bench/memory_verdicts.py"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests._resnet50 import judged  # noqa: E402

CASES = (
    ("published: micro-batch 18, recomputation, proportion 0.16", 18, True, 0.16, True),
    ("the same at the default proportion 0.6 (not published)", 18, True, 0.6, None),
    ("no recomputation", 18, False, 0.16, False),
    ("micro-batch 72 (four times the published)", 72, True, 0.16, False),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.parse_args()
    print("ResNet-50 training on one Mk2 IPU (ipu2):")
    for name, batch, recompute, proportion, expected in CASES:
        start = time.perf_counter()
        report = judged(batch, recompute, proportion)
        memory, limit = report.memory, report.target.bytes_per_tile
        print(f"  {name}: {'out of memory' if memory.out_of_memory else 'fits'} (busiest "
              f"tile {memory.max_tile_bytes:,} B = {memory.max_tile_bytes / limit:.2f}x a "
              f"tile, of which code {memory.code_bytes_per_tile:,} B; expected: "
              f"{ {True: 'fits', False: 'out of memory', None: '-'}[expected]}; "
              f"{report.seconds * 1e3:.1f} ms a step; judged in "
              f"{time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
