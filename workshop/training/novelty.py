"""Derive the embedded forecaster's novelty table (models/weights/novelty.npz) from the pairs it trained on.

The table says how far a pair lies from the training rows (models/embedded/novelty.py reads it).
Rows: every `--every`-th synthetic corpus pair, plus one editor copy of it (workshop/training/copies.py,
the copies cycling, as the weights trained on all of them), and every CUDA-L1 pair of the given GPUs.
Each feature is standardised by the training rows' median and spread; a pair is its two sides and
the shared context, read both ways round; the distance of a pair is that to the nearest of a few
hundred k-means centres in a PCA basis, plus what the basis does not span. Novelty is the distance
over the 99th percentile of the training rows' own distances: ≤ 1 for 99% of what the model saw.

How much novelty widens the spread (sd² + (k·max(0, novelty − 1))²) is fitted, not chosen. A table
built from the synthetic corpus rows alone makes CUDA-L1 (other authors, real but noisy labels) the
source it did not see. Binned by that novelty, the shipped model's mean squared error is fitted by
least squares to c + k²·novelty² over the bins of both sources, each source weighted the same:
the growth of error from the corpus's novelty to CUDA-L1's. (Within CUDA-L1 alone the error does
not grow with novelty: the weights trained on CUDA-L1 too, at a quarter weight, and their learned
spread already covers its in-sample errors; so k is rather too small than too large.) The shipped
table is then rebuilt from every row, both sources, with that k. The bins, the fit and where
forecasts can no longer reach 0.9 or 0.8 confidence after the shipped calibration are in its meta.

    python -m workshop.training.novelty --pairs PAIRS.jsonl --cuda-l1 h100,a100,l40,h20,3090 \\
        --cache /tmp/novelty --out models/weights/novelty.npz
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import multiprocessing
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.models.embedded.backend import WEIGHTS_PATH, TimeModel
from kernelcast.models.embedded.features import FEATURE_NAMES, pair_features
from kernelcast.models.embedded.novelty import FAMILIAR, NOVELTY_PATH, NoveltyTable, nearest_distances, pair_vectors
from kernelcast.models.embedded.spread import MIN_SD
from kernelcast.models.service.calibration import SHIPPED_PATH, CalibrationTable
from kernelcast.wire import DEFAULT_CONFIDENCE_THRESHOLD, LabelledPair, normal_bin_probabilities
from workshop.training import CLIP_LOG2, cuda_l1
from workshop.training.copies import COPIES, RESPELLED, as_editor_sends, respelled

# Cluster centres and PCA components of the table: ~50 KB as float32, well under a millisecond a pair.
CENTRES = 256
COMPONENTS = 24
# Novelty bins of the k fit, as quantiles of the held-out source's novelty.
FIT_BINS = 20
# Floor of a feature's spread: a feature constant over the training rows would make any other value infinitely far.
MIN_SCALE = 0.25


def _copy_of(pair: LabelledPair, index: int) -> LabelledPair | None:
    """One editor copy of `pair`, the index picking which (copies that would not differ are skipped)."""
    has_facts = bool(pair.request.reference.facts or pair.request.candidate.facts)
    has_cuda = "cuda" in (pair.request.reference.language, pair.request.candidate.language)
    usable = [copy for copy in COPIES if (copy == RESPELLED and has_cuda) or (copy != RESPELLED and has_facts)]
    if not usable:
        return None
    copy = usable[index % len(usable)]
    return respelled(pair) if copy == RESPELLED else as_editor_sends(pair, copy)


def corpus_pairs(path: Path, every: int) -> list[LabelledPair]:
    """Every `every`-th pair of a LabelledPair JSONL file and one editor copy of each (only those lines are parsed)."""
    pairs: list[LabelledPair] = []
    with open(path, encoding="utf-8") as stream:
        for number, line in enumerate(stream):
            if number % every or not line.strip():
                continue
            pair = LabelledPair.from_json(json.loads(line))
            copy = _copy_of(pair, number // every)
            pairs.extend([pair] if copy is None else [pair, copy])
    return pairs


def _features(pairs: list[LabelledPair]) -> np.ndarray:
    return np.stack([pair_features(pair.request) for pair in pairs])


def featurize(pairs: list[LabelledPair], jobs: int) -> np.ndarray:
    """(N, 2, F) features of `pairs`, in `jobs` processes."""
    chunks = [pairs[start : start + 1000] for start in range(0, len(pairs), 1000)]
    if jobs <= 1:
        return np.concatenate([_features(chunk) for chunk in chunks])
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return np.concatenate(list(pool.map(_features, chunks)))


def load_rows(pairs_path: Path, every: int, gpus: Sequence[str], cuda_l1_dir: Path, cache: Path, jobs: int) -> dict[str, np.ndarray]:
    """Features, labels and source ("corpus" or "cuda-l1") of the rows, kept in `cache` between runs."""
    path = cache / f"rows-every{every}-{'-'.join(gpus)}.npz"
    if path.exists():
        with np.load(path) as data:
            return {name: data[name] for name in data.files}
    started = time.time()
    corpus = corpus_pairs(pairs_path, every)
    held = [pair for gpu in gpus for pair in cuda_l1.load_pairs(gpu, cuda_l1_dir)]
    pairs = corpus + held
    print(f"featurizing {len(corpus)} corpus and {len(held)} CUDA-L1 pairs", file=sys.stderr)
    rows = {
        "features": featurize(pairs, jobs),
        "log2_speedup": np.array([pair.log2_speedup for pair in pairs]),
        "source": np.array(["corpus"] * len(corpus) + ["cuda-l1"] * len(held)),
    }
    cache.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **rows)
    print(f"featurized in {time.time() - started:.0f} s", file=sys.stderr)
    return rows


def fit_table(features: np.ndarray, seed: int, meta: dict[str, Any]) -> NoveltyTable:
    """A table (k = 0) summarising the rows `features` (N, 2, F): standardisation, PCA basis, k-means centres."""
    rng = np.random.default_rng(seed)
    median = np.median(features.reshape(-1, features.shape[-1]), axis=0)
    scale = np.maximum(features.reshape(-1, features.shape[-1]).std(axis=0), MIN_SCALE)
    vectors = pair_vectors(features, median, scale)
    mean = vectors.mean(axis=0)
    _, _, components = np.linalg.svd(vectors[rng.choice(len(vectors), min(len(vectors), 20000), replace=False)] - mean, full_matrices=False)
    basis = components[:COMPONENTS].T
    projected = (vectors - mean) @ basis
    centres = kmeans(projected, CENTRES, rng)
    distances = nearest_distances(vectors, mean, basis, centres)
    pair_distances = 0.5 * (distances[: len(features)] + distances[len(features) :])
    return NoveltyTable(median, scale, mean, basis, centres, float(np.quantile(pair_distances, 0.99)), 0.0, meta)


def kmeans(points: np.ndarray, count: int, rng: np.random.Generator, rounds: int = 20) -> np.ndarray:
    """Lloyd's k-means from `count` distinct random points; an emptied centre takes the farthest point."""
    centres = points[rng.choice(len(points), count, replace=False)].copy()
    for _ in range(rounds):
        squared = (points**2).sum(axis=1)[:, None] - 2.0 * points @ centres.T + (centres**2).sum(axis=1)[None, :]
        nearest = squared.argmin(axis=1)
        for index in range(count):
            members = points[nearest == index]
            centres[index] = members.mean(axis=0) if len(members) else points[squared.min(axis=1).argmax()]
    return centres


def error_bins(novelty: np.ndarray, squared_error: np.ndarray, variance: np.ndarray) -> list[dict[str, float]]:
    """Rows binned by novelty quantile: each bin's mean novelty, size, mean squared error and the model's mean variance."""
    edges = np.unique(np.quantile(novelty, np.linspace(0.0, 1.0, FIT_BINS + 1)))
    which = np.clip(np.searchsorted(edges, novelty, side="right") - 1, 0, len(edges) - 2)
    return [
        {
            "novelty": float(novelty[which == index].mean()),
            "pairs": int((which == index).sum()),
            "mean_squared_error": float(squared_error[which == index].mean()),
            "mean_variance": float(variance[which == index].mean()),
        }
        for index in range(len(edges) - 1)
        if (which == index).any()
    ]


def fit_k(bins: dict[str, list[dict[str, float]]]) -> tuple[float, float]:
    """(k, c) of mean squared error ≈ c + k²·novelty², least squares over every source's bins, each
    bin weighted by its share of its source: every source counts the same, however many pairs it has."""
    rows = [row for source in bins.values() for row in source]
    weight = np.array([row["pairs"] / sum(other["pairs"] for other in source) for source in bins.values() for row in source])
    novelty, error = (np.array([row[key] for row in rows]) for key in ("novelty", "mean_squared_error"))
    design = np.stack([np.ones_like(novelty), novelty**2], axis=1) * np.sqrt(weight)[:, None]
    intercept, k_squared = np.linalg.lstsq(design, error * np.sqrt(weight), rcond=None)[0]
    return math.sqrt(max(float(k_squared), 0.0)), float(intercept)


def novelty_capping(k: float, confidence: float) -> float | None:
    """The least novelty (to 0.1) past which a forecast of |log2 S| = CLIP_LOG2 with the smallest learned
    spread has calibrated confidence below `confidence` on every GPU class; None if none up to 100."""
    table = CalibrationTable(SHIPPED_PATH, local=Path("/nonexistent/no-local-learning.json"))
    classes = sorted({key.split("/")[1] for key in json.loads(SHIPPED_PATH.read_text()) if key.startswith("embedded/")})
    for novelty in np.arange(FAMILIAR, 100.0, 0.1):
        sd = math.hypot(MIN_SD, k * (novelty - FAMILIAR))
        rows = [
            table.calibrate("embedded", gpu, normal_bin_probabilities(mean, sd))[0] for gpu in classes for mean in (-CLIP_LOG2, CLIP_LOG2)
        ]
        if all(max(sum(row[len(row) // 2 :]), sum(row[: len(row) // 2])) / sum(row) < confidence for row in rows):
            return round(float(novelty), 1)
    return None


def forecasts(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The shipped model's mean and sd of log2 S (before novelty), in batches."""
    model = TimeModel.load()
    parts = [model.predict(features[start : start + 4096]) for start in range(0, len(features), 4096)]
    return np.concatenate([part.mean for part in parts]), np.concatenate([part.sd for part in parts])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workshop.training.novelty", description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=Path, required=True, help="the synthetic corpus's LabelledPair JSONL file")
    parser.add_argument("--every", type=int, default=7, help="take every n-th corpus pair (featurizing one takes ~3 ms)")
    parser.add_argument("--cuda-l1", default="h100,a100,l40,h20,3090", help="CUDA-L1 GPUs, as the shipped weights trained on")
    parser.add_argument("--cuda-l1-dir", type=Path, default=cuda_l1.DEFAULT_DIR)
    parser.add_argument("--cache", type=Path, required=True, help="folder to keep the featurized rows in")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=NOVELTY_PATH)
    args = parser.parse_args(argv)
    gpus = [gpu for gpu in args.cuda_l1.split(",") if gpu]
    rows = load_rows(args.pairs, args.every, gpus, args.cuda_l1_dir, args.cache, args.jobs)
    features, corpus = rows["features"], rows["source"] == "corpus"
    mean, sd = forecasts(features)
    squared_error = (np.clip(rows["log2_speedup"], -CLIP_LOG2, CLIP_LOG2) - mean) ** 2

    held_out = fit_table(features[corpus], args.seed, {})
    novelty = held_out.scores(features)
    bins = {
        source: error_bins(novelty[chosen], squared_error[chosen], sd[chosen] ** 2)
        for source, chosen in (("corpus", corpus), ("cuda-l1", ~corpus))
    }
    k, intercept = fit_k(bins)
    meta = {
        "features": list(FEATURE_NAMES),
        "derived_from": {
            "corpus": f"every {args.every}th pair of {args.pairs.name} and one editor copy of each: {int(corpus.sum())} rows",
            "cuda_l1": f"all pairs of {', '.join(gpus)}: {int((~corpus).sum())} rows",
            "weights": WEIGHTS_PATH.name,
        },
        "k_fit": {
            "novelty": "against a table of the corpus rows alone: cuda-l1 is the source it did not see",
            "model": "mean squared error = intercept + k^2 novelty^2, over both sources' bins, each source weighted the same",
            "intercept": intercept,
            "bins": bins,
        },
        # Past these, every forecast within the training labels' range (|log2 S| <= CLIP_LOG2), after
        # the shipped calibration, has confidence below 0.8 (it defers at the default threshold) and 0.9.
        "defers_past": novelty_capping(k, DEFAULT_CONFIDENCE_THRESHOLD),
        "below_90_past": novelty_capping(k, 0.9),
    }
    table = replace(fit_table(features, args.seed, meta), k=k)
    table.save(args.out)
    shipped = table.scores(features)
    print(
        json.dumps(
            {
                "k": round(k, 4),
                "typical_distance": round(table.typical_distance, 3),
                "bytes": args.out.stat().st_size,
                "held_out_novelty_quantiles_cuda_l1_corpus": [
                    np.quantile(novelty[m], [0.5, 0.9, 0.99]).round(2).tolist() for m in (~corpus, corpus)
                ],
                "largest_abs_mean_log2": round(float(np.abs(mean).max()), 2),
                "shipped_novelty_quantiles": {
                    source: np.quantile(shipped[rows["source"] == source], [0.5, 0.9, 0.99]).round(2).tolist()
                    for source in ("corpus", "cuda-l1")
                },
                "intercept": round(intercept, 4),
                "defers_past": table.meta["defers_past"],
                "below_90_past": table.meta["below_90_past"],
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
