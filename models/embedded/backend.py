"""The embedded forecaster: each side's log time from its work, corrected by a learned residual.

docs/forecast.md "Backends": log2 t̂ = α·(roofline floor of the side) + r(side, context), where
r is a small MLP ensemble trained on measured pairs (workshop/training) and the floor comes
from models/embedded/features.py. The forecast is s = log2 t̂_ref − log2 t̂_cand, antisymmetric by
construction: swap the sides and s flips. Boosted trees on the pair (models/embedded/boosted.py),
antisymmetric too, forecast s directly and are blended in: the two learners err on different
pairs of operations neither saw. Direction trees, which classify which side is faster, move
the regression trees' forecast a bounded step toward the side they favour. The spread comes from trees fitted to how far held-out
forecasts missed (models/embedded/spread.py), or else from each side's learned spread plus the
members' and the two learners' disagreement; then the shared calibration layer calibrates it
on held-out operations. A side that shows no kernel of its own and calls into another package's
(`from fla.ops.delta_rule import chunk_delta_rule`) runs code the forecast never sees: its
forecast is an even mixture with knowing nothing (direction a coin toss), so it defers and the
details name the calls. Pure numpy: no download,
no GPU, a few milliseconds a pair.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.kernels_runtime.source.host_launch import few_value_programs, repeated_grids
from kernelcast.models.embedded.boosted import BoostedTrees, toward_direction
from kernelcast.models.embedded.features import (
    FEATURE_NAMES,
    FLOOR_INDEX,
    host_shift,
    kernels_out_of_sight,
    pair_features,
    templates_out_of_sight,
    without_launches,
)
from kernelcast.models.embedded.kernelbench_prior import (
    MEMBERS_FILE,
    PRIOR_PATH,
    TREES_FILE,
    WEIGHTS_ONLY_KINDS,
    KernelBenchPrior,
    reading_languages,
)
from kernelcast.models.embedded.novelty import NOVELTY_PATH, NoveltyTable
from kernelcast.models.embedded.pair_kinds import SOLUTION_KINDS
from kernelcast.models.embedded.spread import forecast_columns, learned_sd
from kernelcast.models.prediction import BackendStatus, RawPrediction
from kernelcast.wire import (
    ASSUMED_CANDIDATE_CONFIG,
    ASSUMED_CANDIDATE_GRID,
    ASSUMED_CANDIDATE_LAUNCH,
    ASSUMED_CANDIDATE_LOOPS,
    ASSUMED_REFERENCE_CONFIG,
    ASSUMED_REFERENCE_GRID,
    ASSUMED_REFERENCE_LAUNCH,
    ASSUMED_REFERENCE_LOOPS,
    ForecastRequest,
    normal_bin_probabilities,
)

WEIGHTS_PATH = Path(__file__).parents[1] / "weights" / "embedded.npz"
# The code between a request and the weights: a change in any of it changes the forecast
# of the same request, so it is part of the backend's version (and of the cache keys).
READER_MODULES = (
    "kernelcast.wire",
    "kernelcast.kernels_runtime.hardware",
    "kernelcast.kernels_runtime.source.cuda_text",
    "kernelcast.kernels_runtime.source.triton_text",
    "kernelcast.kernels_runtime.source.launch_spec",
    "kernelcast.kernels_runtime.source.host_launch",
    "kernelcast.kernels_runtime.source.access_pattern",
    "kernelcast.kernels_runtime.source.loop_trips",
    "kernelcast.kernels_runtime.source.alternatives",
    "kernelcast.kernels_runtime.source.timed_path",
    "kernelcast.kernels_runtime.source.model_layers",
    "kernelcast.kernels_runtime.source.host_values",
    "kernelcast.kernels_runtime.source.expressions",
    "kernelcast.kernels_runtime.source.python_ast",
    "kernelcast.models.prediction",
    "kernelcast.models.embedded.features",
    "kernelcast.models.embedded.boosted",
    "kernelcast.models.embedded.spread",
    "kernelcast.models.embedded.novelty",
    "kernelcast.models.embedded.pair_kinds",
    "kernelcast.models.embedded.kernelbench_prior",
    __name__,
)


def source_digest(paths: Iterable[Path]) -> str:
    """Short sha256 of the files' bytes, in order."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()[:10]


def _silu(x: np.ndarray) -> np.ndarray:
    # x·sigmoid(x) through tanh: exp(−x) overflows for the far-out rows of an unseen kernel.
    return x * 0.5 * (1.0 + np.tanh(0.5 * x))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


@dataclass(frozen=True)
class Prediction:
    """Per pair: mean and sd of s = log2 S, and each side's predicted log2 time (ensemble mean)."""

    mean: np.ndarray
    sd: np.ndarray
    log2_time: np.ndarray  # (N, 2): reference, candidate; only their difference is trained


# The weights learnt from labels clipped to this many octaves either way (workshop/training): a
# speedup past it was taught as the bound itself.
LABEL_BOUND_LOG2 = 3.5


def with_pair_term(side_difference: np.ndarray, pair_term: np.ndarray) -> np.ndarray:
    """The sides' difference moved by the pair term, which may pull a difference wider than the
    trained labels back to their bound but never reverse it.

    Taught with clipped labels, the pair term learnt to pull the sides' wide differences back toward
    the bound, and on code unlike the training rows it overshoots: a naive reference looping 4,096
    times in Python read 9.4 octaves slower than a library's kernel, and the pair term took 12.4
    off (measured: the library 9 octaves faster). Of the 9,318 measured real-world pairs, 57 (fla's
    naive references, LLMKernel's solutions) had a difference past the bound reversed, and all 57
    measured the other way."""
    moved = side_difference + pair_term
    reversed_wide = (np.sign(moved) != np.sign(side_difference)) & (np.abs(side_difference) > LABEL_BOUND_LOG2)
    return np.where(reversed_wide, np.sign(side_difference) * LABEL_BOUND_LOG2, moved)


TREE_PREFIX = "tree_"
DIRECTION_PREFIX = "direction_"
SPREAD_PREFIX = "spread_"
TREE_PREFIXES = (TREE_PREFIX, DIRECTION_PREFIX, SPREAD_PREFIX)
# How each tree set is named in the model id.
TREE_SET_NAMES = {TREE_PREFIX: "trees", DIRECTION_PREFIX: "direction", SPREAD_PREFIX: "spread"}


class TimeModel:
    """An ensemble of per-side MLPs, stored as stacked arrays (member first) in one .npz, and
    optionally boosted trees (arrays named tree_*) blended in with meta["tree_weight"], the
    direction trees (direction_*) that move the trees' forecast by up to meta["direction_step"],
    and the spread trees (spread_*) that set the blend's sd."""

    def __init__(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        if tuple(meta.get("features", ())) != FEATURE_NAMES:
            raise ValueError("weights were trained on other features; retrain with workshop/training/train.py")
        self.arrays = {name: np.asarray(value, dtype=np.float64) for name, value in arrays.items() if not name.startswith(TREE_PREFIXES)}
        self.trees, self.direction, self.spread = (
            BoostedTrees.from_arrays(arrays, prefix) if prefix + "roots" in arrays else None for prefix in TREE_PREFIXES
        )
        if (self.spread is not None or self.direction is not None) and self.trees is None:
            raise ValueError("direction and spread trees act on the blend of the MLP and the trees; these weights have no trees")
        self.meta = meta

    def _tree_sets(self) -> dict[str, BoostedTrees]:
        """The tree sets these weights hold, by the prefix of their arrays."""
        sets = zip(TREE_PREFIXES, (self.trees, self.direction, self.spread))
        return {prefix: trees for prefix, trees in sets if trees is not None}

    def _tree_arrays(self) -> dict[str, np.ndarray]:
        return {name: value for prefix, trees in self._tree_sets().items() for name, value in trees.to_arrays(prefix).items()}

    def with_trees(self, trees: BoostedTrees, weight: float, settings: dict[str, Any]) -> TimeModel:
        """This MLP ensemble blended with `trees`, which get `weight` of the forecast."""
        return TimeModel({**self.arrays, **trees.to_arrays(TREE_PREFIX)}, {**self.meta, "tree_weight": weight, "tree_settings": settings})

    def with_direction(self, trees: BoostedTrees, step: float, settings: dict[str, Any]) -> TimeModel:
        """This blend with the regression trees' forecast moved by up to `step` octaves toward the side `trees` favour."""
        return TimeModel(
            {**self.arrays, **self._tree_arrays(), **trees.to_arrays(DIRECTION_PREFIX)},
            {**self.meta, "direction_step": step, "direction_settings": settings},
        )

    def with_spread(self, trees: BoostedTrees, settings: dict[str, Any]) -> TimeModel:
        """This blend with its sd from `trees` (models/embedded/spread.py)."""
        return TimeModel(
            {**self.arrays, **self._tree_arrays(), **trees.to_arrays(SPREAD_PREFIX)}, {**self.meta, "spread_settings": settings}
        )

    @classmethod
    def load(cls, path: Path = WEIGHTS_PATH) -> TimeModel:
        with np.load(path) as data:
            arrays = {name: data[name] for name in data.files if name != "meta"}
            meta = json.loads(str(data["meta"]))
        return cls(arrays, meta)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {name: value.astype(np.float32) for name, value in self.arrays.items()}
        # Thresholds stay float64: a float32 one could send a row down the other branch.
        arrays.update(self._tree_arrays())
        with open(path, "wb") as stream:
            np.savez_compressed(stream, meta=np.array(json.dumps(self.meta, sort_keys=True)), **arrays)

    @property
    def model_id(self) -> str:
        digest = hashlib.sha256()
        for name in sorted(self.arrays):
            digest.update(self.arrays[name].astype(np.float32).tobytes())
        for _name, value in sorted(self._tree_arrays().items()):
            digest.update(value.tobytes())
        parts = ["mlp", *(TREE_SET_NAMES[prefix] for prefix in self._tree_sets())]
        return f"time-{'-'.join(parts)}-{digest.hexdigest()[:10]}"

    def side_outputs(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(members, N) log2 time and sd of each row of features (N, F)."""
        a = self.arrays
        z = (rows - a["mu"]) / a["sd"]
        # Each member's layers as batched matrix products (BLAS: ~5× faster than einsum's loops).
        h = _silu(z @ a["w1"] + a["b1"][:, None, :])
        h = _silu(h @ a["w2"] + a["b2"][:, None, :])
        out = h @ a["w3"] + a["b3"][:, None, :]
        log2_time = a["alpha"][:, None] * rows[None, :, FLOOR_INDEX] + out[..., 0]
        return log2_time, _softplus(out[..., 1])

    def pair_term(self, features: np.ndarray) -> np.ndarray:
        """(members, N) antisymmetric pair-level correction h(ref, cand) − h(cand, ref)."""
        a = self.arrays
        z = (features - a["mu"]) / a["sd"]

        def h(x: np.ndarray) -> np.ndarray:
            x = _silu(x @ a["p1"] + a["pb1"][:, None, :])
            x = _silu(x @ a["p2"] + a["pb2"][:, None, :])
            return (x @ a["p3"] + a["pb3"][:, None, :])[..., 0]

        return h(z.reshape(len(z), -1)) - h(z[:, ::-1].reshape(len(z), -1))

    def predict(self, features: np.ndarray) -> Prediction:
        """features: (N, 2, F) rows of (reference, candidate) from features.pair_features."""
        n = len(features)
        log2_time, side_sd = self.side_outputs(features.reshape(2 * n, -1))
        log2_time, side_sd = log2_time.reshape(-1, n, 2), side_sd.reshape(-1, n, 2)
        means = log2_time[..., 0] - log2_time[..., 1]
        if "p1" in self.arrays:
            means = with_pair_term(means, self.pair_term(features))
        variances = self.arrays["sigma0"][:, None] ** 2 + (side_sd**2).sum(axis=-1)
        mlp = Prediction(means.mean(axis=0), np.sqrt(variances.mean(axis=0) + means.var(axis=0)), log2_time.mean(axis=0))
        if self.trees is None:
            return mlp
        trees_mean = self.trees.predict(features)
        if self.direction is not None:
            trees_mean = toward_direction(trees_mean, self.direction.predict(features), float(self.meta["direction_step"]))
        blended = blend(mlp, trees_mean, float(self.meta["tree_weight"]))
        if self.spread is None:
            return blended
        forecasts = forecast_columns(mlp.mean, mlp.sd, trees_mean, blended.mean, blended.sd)
        return replace(blended, sd=learned_sd(self.spread, features, forecasts))


def weights_forecast(model: TimeModel, requests: Sequence[ForecastRequest], features: np.ndarray) -> Prediction:
    """The weights' forecast of `features` (N, 2, F), row i read from requests[i], each side's time
    lengthened by the host work the weights never saw (features.host_shift)."""
    prediction = model.predict(features)
    shifts = np.stack([host_shift(request, rows) for request, rows in zip(requests, features)])
    return replace(prediction, mean=prediction.mean + shifts[:, 0] - shifts[:, 1], log2_time=prediction.log2_time + shifts)


def blend(mlp: Prediction, trees_mean: np.ndarray, weight: float) -> Prediction:
    """The MLP's forecast mixed with the trees' (`weight` of it theirs): the mixture's mean, and
    its variance, which grows with the distance between the two; each side's time takes half the shift."""
    gap = trees_mean - mlp.mean
    variance = mlp.sd**2 + weight * (1.0 - weight) * gap**2
    return Prediction(mlp.mean + weight * gap, np.sqrt(variance), mlp.log2_time + weight * gap[:, None] * np.array([0.5, -0.5]))


class EmbeddedBackend:
    name = "embedded"

    def __init__(self, path: Path = WEIGHTS_PATH, novelty_path: Path = NOVELTY_PATH, prior_path: Path = PRIOR_PATH) -> None:
        self.model = TimeModel.load(path)
        self.novelty = NoveltyTable.load(novelty_path)
        self.prior = KernelBenchPrior.load(prior_path)
        digests = [novelty_path]
        if self.prior is not None:
            beside = [prior_path.with_name(name) for name in (TREES_FILE, MEMBERS_FILE)]
            digests += [prior_path, *(path for path in beside if path.exists())]
        self.model_id = f"{self.model.model_id}+novelty-{source_digest(digests)}"
        # Same weights read by another feature reader give other forecasts: cached ones must not be served.
        self.version = "2." + source_digest(Path(str(sys.modules[name].__file__)) for name in READER_MODULES)

    def status(self) -> BackendStatus:
        return BackendStatus(True, f"built in: {self.model_id}, no download, no GPU")

    def predict(self, request: ForecastRequest) -> RawPrediction:
        return self.predict_many([request])[0]

    def predict_many(self, requests: Sequence[ForecastRequest]) -> list[RawPrediction]:
        """A pair that a line reads only the other way round (a solution as the reference, its problem
        as the candidate) is read that way round and its forecast mirrored: alone, the weights called
        such a problem slower at 0.99 where the line, read the usual way, stayed unsure."""
        oriented = [self._oriented(request) for request in requests]
        read = self._read_many([request for request, _, _ in oriented], [kind for _, kind, _ in oriented])
        return [_mirrored(prediction) if flip else prediction for prediction, (_, _, flip) in zip(read, oriented)]

    def _oriented(self, request: ForecastRequest) -> tuple[ForecastRequest, str | None, bool]:
        """The pair as it is read, the kind its line reads (None: no line), and whether it was swapped to get one."""
        if self.prior is None:
            return request, None, False
        kind = self.prior.applies(request)
        if kind is None:
            swapped = _swapped(request)
            if (kind_swapped := self.prior.applies(swapped)) is not None:
                return swapped, kind_swapped, True
        return request, kind, False

    def _read_many(self, requests: Sequence[ForecastRequest], prior_applied: Sequence[str | None]) -> list[RawPrediction]:
        guesses = [(index, read) for index, request in enumerate(requests) if (read := _read_without_guesses(request)) is not None]
        guessing = [index for index, _ in guesses]
        features = np.stack([*(pair_features(request) for request in requests), *(read for _, read in guesses)])
        prediction = weights_forecast(self.model, [*requests, *(requests[index] for index in guessing)], features)
        novelty = self.novelty.scores(features)
        widened = self.novelty.widened(prediction.sd, novelty)
        mean, sd = prediction.mean[: len(requests)].copy(), widened[: len(requests)].copy()
        # Where a launch or a loop's trips were guessed, the forecast is an even mixture of the guess and of the reading without it.
        for alternative, index in enumerate(guessing, start=len(requests)):
            mean[index], sd[index] = even_mixture(mean[index], sd[index], prediction.mean[alternative], widened[alternative])
        read = [index for index, kind in enumerate(prior_applied) if kind]
        # Each pair's tree forecast and the members' spread about it, for the pairs a line reads.
        centre, across_sources = mean.copy(), np.zeros(len(requests))
        if self.prior is not None and read:
            read_kinds = [prior_applied[i] for i in read]
            codes = [(requests[i].reference.code, requests[i].candidate.code) for i in read]
            tokens = self.prior.tokens_of(codes)
            centre[read], across_sources[read] = self.prior.read(features[read], mean[read], sd[read], read_kinds, tokens)
        probabilities, few_sources = [], [False] * len(requests)
        for index, kind in enumerate(prior_applied):
            if kind and self.prior is not None:
                at, weights_sd, spread = float(centre[index]), float(sd[index]), float(across_sources[index])
                languages = reading_languages(kind, requests[index])
                few_sources[index] = not self.prior.supported(kind, languages)
                probabilities.append(self.prior.bin_probabilities(kind, at, weights_sd, spread, languages))
                mean[index], sd[index] = self.prior.adjust(kind, at, weights_sd, spread, languages)
            else:
                probabilities.append(normal_bin_probabilities(float(mean[index]), float(sd[index])))
        # Where a side's kernels are out of sight (another package's, or built on CuTe's templates), half the
        # forecast's weight goes to knowing nothing.
        unseen = [_out_of_sight(request) for request in requests]
        knowing_nothing = normal_bin_probabilities(0.0, UNSEEN_SD)
        # The forecast before the mixing: without a prior, the weights' own, which the trees read and learn from.
        read_mean, read_sd = mean.copy(), sd.copy()
        for index, calls in enumerate(unseen):
            if calls:
                probabilities[index] = [0.5 * (read + blind) for read, blind in zip(probabilities[index], knowing_nothing)]
                mean[index], sd[index] = even_mixture(float(mean[index]), float(sd[index]), 0.0, UNSEEN_SD)
        raw = []
        for request, mean_log2, sd_log2, learned, unfamiliar, (reference, candidate), applied, spread, few, bins, calls, read in zip(
            requests,
            mean.tolist(),
            sd.tolist(),
            prediction.sd.tolist(),
            novelty.tolist(),
            prediction.log2_time.tolist(),
            prior_applied,
            across_sources.tolist(),
            few_sources,
            probabilities,
            unseen,
            zip(read_mean.tolist(), read_sd.tolist()),
        ):
            details = {
                "mean_log2": round(mean_log2, 4),
                "spread_log2": round(sd_log2, 4),
                "learned_spread_log2": round(learned, 4),
                "novelty": round(unfamiliar, 3),
                "reference_log2_time": round(reference, 3),
                "candidate_log2_time": round(candidate, 3),
            }
            if applied:
                details["kernelbench_prior"] = applied
                details["trees_read"] = applied not in WEIGHTS_ONLY_KINDS
                details["launches_read"] = applied not in SOLUTION_KINDS
                details["source_spread_log2"] = round(spread, 4)
                details["few_sources_of_kind"] = few
            if calls:
                details["out_of_sight"] = calls
                details["before_out_of_sight"] = {"mean_log2": round(read[0], 4), "spread_log2": round(read[1], 4)}
            details.update(_lengthened_launches(request))
            raw.append(RawPrediction(probabilities=bins, details=details))
        return raw


# Each guess of one side (wire.ASSUMED_INPUTS) and the same guess of the other side.
_ROLE_GUESSES = (
    (ASSUMED_CANDIDATE_LAUNCH, ASSUMED_REFERENCE_LAUNCH),
    (ASSUMED_CANDIDATE_GRID, ASSUMED_REFERENCE_GRID),
    (ASSUMED_CANDIDATE_CONFIG, ASSUMED_REFERENCE_CONFIG),
    (ASSUMED_CANDIDATE_LOOPS, ASSUMED_REFERENCE_LOOPS),
)
_OTHER_SIDES_GUESS = {**dict(_ROLE_GUESSES), **{reference: candidate for candidate, reference in _ROLE_GUESSES}}


def _swapped(request: ForecastRequest) -> ForecastRequest:
    """The pair the other way round, each guess staying with its side."""
    assumed = tuple(_OTHER_SIDES_GUESS.get(words, words) for words in request.assumed)
    return replace(request, reference=request.candidate, candidate=request.reference, assumed=assumed)


def _other_role(role: str) -> str:
    return {"reference": "candidate", "candidate": "reference"}[role]


def _mirrored(prediction: RawPrediction) -> RawPrediction:
    """The forecast of a pair read the other way round, told of the pair as asked: bins reversed, the
    mean negated, and what the details say of each side said of it again."""
    details = dict(prediction.details, read_the_other_way_round=True)
    details["mean_log2"] = -details["mean_log2"]
    details["reference_log2_time"], details["candidate_log2_time"] = details["candidate_log2_time"], details["reference_log2_time"]
    if "out_of_sight" in details:
        calls = (call.split(":", 1) for call in details["out_of_sight"])
        details["out_of_sight"] = [_other_role(role) + ":" + what for role, what in calls]
        before = details["before_out_of_sight"]
        details["before_out_of_sight"] = {**before, "mean_log2": -before["mean_log2"]}
    for reading in ("repeated_grids", "few_value_programs"):
        if reading in details:
            details[reading] = [{**launch, "side": _other_role(launch["side"])} for launch in details[reading]]
    return RawPrediction(probabilities=prediction.probabilities[::-1], details=details)


# The spread of log2 S over the 9,318 measured real-world pairs (workshop/realworld), octaves: what a
# forecast that knows nothing of a side's kernels can say.
UNSEEN_SD = 1.84


def _out_of_sight(request: ForecastRequest) -> list[str]:
    """`side: what` of each call a side makes into kernels its text does not hold (features.kernels_out_of_sight)
    and of each CuTe or CUTLASS header its kernels are built on (features.templates_out_of_sight)."""
    sides = (("reference", request.reference), ("candidate", request.candidate))
    return [
        f"{role}: {unseen}"
        for role, side in sides
        for unseen in (*kernels_out_of_sight(side.code, side.language), *templates_out_of_sight(side.code, side.language))
    ]


def _lengthened_launches(request: ForecastRequest) -> dict[str, list[dict[str, Any]]]:
    """The Triton launches features.host_shift lengthens, by what it read: grids that repeat their work
    (host_launch.repeated_grids) and programs of a few values each (host_launch.few_value_programs). For the
    hover to say why a forecast moved so far."""
    found: dict[str, list[dict[str, Any]]] = {"repeated_grids": [], "few_value_programs": []}
    for role, side in (("reference", request.reference), ("candidate", request.candidate)):
        if side.language != "triton":
            continue
        found["repeated_grids"] += [
            {"side": role, "launch": grid.launch, "copies": grid.copies, "unread_axes": list(grid.unread_axes)}
            for grid in repeated_grids(side.code)
        ]
        found["few_value_programs"] += [
            {"side": role, "launch": launch.launch, "values": launch.values, "programs": launch.programs}
            for launch in few_value_programs(side.code)
        ]
    return {reading: launches for reading, launches in found.items() if launches}


# A side's launch is guessed when another's stands in for it, or when its host code leaves its
# config (block, Triton constexprs and options) to run time or to an autotuner: the forecast then
# also reads the pair without launches. A guessed grid alone is not: the block it is launched with
# is read, and the spread of not knowing the sizes is the weights' own.
ASSUMED_LAUNCHES = {ASSUMED_CANDIDATE_LAUNCH, ASSUMED_REFERENCE_LAUNCH, ASSUMED_CANDIDATE_CONFIG, ASSUMED_REFERENCE_CONFIG}
ASSUMED_LOOPS = {ASSUMED_CANDIDATE_LOOPS, ASSUMED_REFERENCE_LOOPS}


def _read_without_guesses(request: ForecastRequest) -> np.ndarray | None:
    """The pair's features without what was guessed (each side from its code alone where a launch
    was, each host loop once where its trips were), or None where nothing the features read was guessed."""
    assumed = set(request.assumed)
    launches, loops = bool(ASSUMED_LAUNCHES & assumed), bool(ASSUMED_LOOPS & assumed)
    if not (launches or loops):
        return None
    return pair_features(without_launches(request) if launches else request, host_loops=not loops)


def even_mixture(mean_a: float, sd_a: float, mean_b: float, sd_b: float) -> tuple[float, float]:
    """Mean and sd of a half-and-half mixture of two normals: the spread covers both and the distance between them."""
    gap = 0.5 * (mean_a - mean_b)
    return 0.5 * (mean_a + mean_b), float(np.sqrt(0.5 * (sd_a**2 + sd_b**2) + gap**2))


def create(options: dict[str, Any]) -> EmbeddedBackend:
    """The registry's constructor (service/backends.py); the embedded forecaster takes no options."""
    return EmbeddedBackend()
