"""The IPU Model's memory verdicts on Graphcore's published one-IPU configurations.

ResNet-50 (graphcore/examples, vision/cnns/pytorch/train/configs.yml, `resnet50`; G-8): micro-
batch 18 of 224x224 images per IPU, fp16 weights, activations and partials ("16.16"), SGD
with momentum and gradient accumulation, recomputation from checkpoints at the residual adds,
availableMemoryProportion 0.16, one IPU per replica of an IPU-M2000 (Mk2). It runs there, so
the model must judge that it fits. Graphcore gives no out-of-memory configuration; the
published recomputation and micro-batch are what made it fit, so without recomputation, or
at four times the micro-batch, the model must judge it out of memory.

BERT (graphcore/examples, nlp/bert/popart/configs; G-9): BERT-Large SQuAD inference runs its
24 layers on one IPU (sequence 128, micro-batch 1, fp16, the default proportion), so the
model must judge that it fits; its SQuAD training (sequence 384, micro-batch 4) is published
on eight IPUs, so on one it must not. BERT-Base inference is shown for scale.

Run from the repository root: .venv/bin/python bench/memory_verdicts.py"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import _bert, _resnet50  # noqa: E402

RESNET = (
    ("published: micro-batch 18, recomputation, proportion 0.16", 18, True, 0.16, True),
    ("the same at the default proportion 0.6 (not published)", 18, True, 0.6, None),
    ("no recomputation", 18, False, 0.16, False),
    ("micro-batch 72 (four times the published)", 72, True, 0.16, False),
)
BERT = (
    ("BERT-Large SQuAD inference, sequence 128, micro-batch 1 (published on one IPU)",
     _bert.LARGE, 1, 128, False, True),
    ("BERT-Large SQuAD training, sequence 384, micro-batch 4 (published on eight IPUs)",
     _bert.LARGE, 4, 384, True, False),
    ("BERT-Base SQuAD inference, sequence 128, micro-batch 1 (published on one IPU)",
     _bert.BASE, 1, 128, False, True),
)


def _line(name: str, report, expected: bool | None, start: float) -> str:
    memory, limit = report.memory, report.target.bytes_per_tile
    return (f"  {name}: {'out of memory' if memory.out_of_memory else 'fits'} (busiest tile "
            f"{memory.max_tile_bytes:,} B = {memory.max_tile_bytes / limit:.2f}x a tile, of "
            f"which code {memory.code_bytes_per_tile:,} B; expected: "
            f"{ {True: 'fits', False: 'out of memory', None: '-'}[expected]}; "
            f"{report.seconds * 1e3:.1f} ms a step; judged in "
            f"{time.perf_counter() - start:.1f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.parse_args()
    print("ResNet-50 training on one Mk2 IPU (ipu2):")
    for name, batch, recompute, proportion, expected in RESNET:
        start = time.perf_counter()
        print(_line(name, _resnet50.judged(batch, recompute, proportion), expected, start))
    print("BERT on one Mk2 IPU (ipu2), fp16:")
    for name, model, batch, sequence, training, expected in BERT:
        start = time.perf_counter()
        print(_line(name, _bert.judged(model, batch, sequence, training), expected, start))


if __name__ == "__main__":
    main()
