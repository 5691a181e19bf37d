"""Write the calibration table of ipu/docs/ipu_model.md from tests/test_calibration.py.

The points (programs, published figures, reasons for failures) live in the tests only; this
script puts the model's current figures for them into the doc, between its two markers.
Run from the repository root: .venv/bin/python tools/calibration_table.py [--check | --errors]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.test_calibration import (  # noqa: E402
    BEGIN,
    DOC,
    END,
    dataset_table,
    doc_table,
    table,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the doc's table is stale, without writing it")
    parser.add_argument("--errors", action="store_true",
                        help="print the fitted and held-back errors of each data set only")
    args = parser.parse_args()
    if args.errors:
        print("\n".join(dataset_table()))
        return 0
    new = table()
    if args.check:
        stale = doc_table() != new
        print("stale" if stale else "current")
        return int(stale)
    text = DOC.read_text()
    head, tail = text[:text.index(BEGIN) + len(BEGIN)], text[text.index(END):]
    DOC.write_text(f"{head}\n{new}\n{tail}")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
