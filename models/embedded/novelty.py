"""How far a pair lies from what the embedded forecaster trained on, and the spread that follows.

The spread trees (spread.py) learnt how far forecasts missed on operations the model did not see,
but only inside the region the training rows cover: a pair unlike any of them (code written unlike
the corpus, a side without a launch where the corpus always had one) gets the confidence of its
nearest training region. The novelty table, derived from the training rows by
workshop/training/novelty.py and shipped as models/weights/novelty.npz, measures the distance of a
pair's features from those rows: each feature standardised, the two sides and their shared context
read both ways round, the distance to the nearest k-means centre in a PCA basis plus what the basis
does not span, over the 99th percentile of the training rows' own distances. Past 1 the spread
widens, sd² + (k·(novelty − 1))², with k fitted from how the model's error grew with novelty from the
synthetic corpus to CUDA-L1, a source the fitting table had not seen; the table's meta says past which
novelty no forecast reaches 0.9, or 0.8 (it defers). Numpy only, ~0.05 ms a pair.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.models.embedded.features import CONTEXT_NAMES, SIDE_NAMES

NOVELTY_PATH = Path(__file__).parents[1] / "weights" / "novelty.npz"
# The GPU is not a property of the code: the forecast reads it through the roofline and the
# calibration is per GPU class, so a pair is not unfamiliar for running on another GPU.
CODE_CONTEXT = np.array([not name.startswith("hw_") for name in CONTEXT_NAMES])
# A standardised feature counts at most this many spreads: one wild count must not be all of the distance.
MAX_Z = 10.0
# Novelty up to this is where 99% of the training rows lie: the spread is left as the model learnt it.
FAMILIAR = 1.0


def pair_vectors(features: np.ndarray, median: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """(2N, D) standardised (reference, candidate, code context) rows of (N, 2, F) pair features, then the swapped ones."""
    z = np.clip((features - median) / scale, -MAX_Z, MAX_Z)
    sides, context = z[:, :, : len(SIDE_NAMES)], z[:, 0, len(SIDE_NAMES) :][:, CODE_CONTEXT]
    forward = np.concatenate([sides[:, 0], sides[:, 1], context], axis=1)
    backward = np.concatenate([sides[:, 1], sides[:, 0], context], axis=1)
    return np.concatenate([forward, backward])


def nearest_distances(vectors: np.ndarray, mean: np.ndarray, basis: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """(M,) distance of each vector to the nearest centre in the basis, with the part the basis leaves out."""
    centred = vectors - mean
    projected = centred @ basis
    outside = np.maximum((centred**2).sum(axis=1) - (projected**2).sum(axis=1), 0.0)
    to_centres = (projected**2).sum(axis=1)[:, None] - 2.0 * projected @ centres.T + (centres**2).sum(axis=1)[None, :]
    return np.sqrt(np.maximum(to_centres.min(axis=1), 0.0) + outside)


@dataclass(frozen=True)
class NoveltyTable:
    """The shipped summary of the training rows, and k, how far novelty widens the spread (octaves per unit past FAMILIAR)."""

    median: np.ndarray  # (F,) per-feature median of the training rows
    scale: np.ndarray  # (F,) per-feature spread (floored)
    mean: np.ndarray  # (D,) mean pair vector
    basis: np.ndarray  # (D, C) orthonormal PCA components
    centres: np.ndarray  # (K, C) k-means centres in the basis
    typical_distance: float  # 99th percentile of the training rows' distances
    k: float
    meta: dict[str, Any]

    ARRAYS = ("median", "scale", "mean", "basis", "centres")

    def scores(self, features: np.ndarray) -> np.ndarray:
        """(N,) novelty of (N, 2, F) pair features; the same with the sides swapped."""
        vectors = pair_vectors(features, self.median, self.scale)
        distances = nearest_distances(vectors, self.mean, self.basis, self.centres)
        return 0.5 * (distances[: len(features)] + distances[len(features) :]) / self.typical_distance

    def widened(self, sd: np.ndarray, novelty: np.ndarray) -> np.ndarray:
        """The spread with what novelty past FAMILIAR adds to it."""
        return np.sqrt(sd**2 + (self.k * np.maximum(novelty - FAMILIAR, 0.0)) ** 2)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {**self.meta, "typical_distance": self.typical_distance, "k": self.k}
        arrays = {name: getattr(self, name).astype(np.float32) for name in self.ARRAYS}
        with open(path, "wb") as stream:
            np.savez_compressed(stream, meta=np.array(json.dumps(meta, sort_keys=True)), **arrays)

    @classmethod
    def load(cls, path: Path = NOVELTY_PATH) -> NoveltyTable:
        with np.load(path) as data:
            arrays = {name: np.asarray(data[name], dtype=np.float64) for name in cls.ARRAYS}
            meta = json.loads(str(data["meta"]))
        if tuple(meta.get("features", ())) != (*SIDE_NAMES, *CONTEXT_NAMES):
            raise ValueError(f"{path} was derived from other features; rebuild it with workshop/training/novelty.py")
        return cls(**arrays, typical_distance=float(meta["typical_distance"]), k=float(meta["k"]), meta=meta)
