"""A digest of the embedded forecaster's features for every Nth labelled pair, one line a pair.

Run it before and after a change to a reader of kernel text or to the features, then `cmp` the
two files: a refactor must leave every line identical; a fix lists exactly the pairs it moves.

    python -m workshop corpus pairs --out /tmp/pairs.jsonl
    python -m workshop.training.feature_digests /tmp/pairs.jsonl /tmp/before.txt [--every 7]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Sequence

import numpy as np

from kernelcast.models.embedded.features import pair_features
from kernelcast.wire import read_pairs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workshop.training.feature_digests", description=__doc__.split("\n")[0])
    parser.add_argument("pairs", help="a labelled-pairs JSONL file")
    parser.add_argument("out", help="where to write `pair-id digest` lines")
    parser.add_argument("--every", type=int, default=7, help="digest every Nth pair (default 7)")
    args = parser.parse_args(argv)
    with open(args.out, "w") as out:
        for index, pair in enumerate(read_pairs(args.pairs)):
            if index % args.every == 0:
                features = np.asarray(pair_features(pair.request), dtype=np.float64)
                out.write(f"{pair.id} {hashlib.sha256(features.tobytes()).hexdigest()[:16]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
