"""How far the embedded forecast can be trusted on KernelBench solutions, learnt from kernels
that others wrote and we measured.

The weights learnt from generated kernels and from CUDA-L1's winning rewrites. Solutions that
LLMs write (a `ModelNew` with load_inline CUDA or Triton kernels) mostly lose to eager PyTorch,
which calls cuBLAS and cuDNN: measured on the real-world corpus, two in three are slower, while
the weights call five in six faster. Most FlagGems operators measured slower than aten eager,
by most on the smallest tensors, where the weights call them faster.

So six kinds of pair (pair_kinds.py) are forecast in two steps. Trees fitted to every measured
real-world pair read the pair's features, the weights' forecast and the kind of pair, and forecast
log2 S (`boosted.corrected`): what the weights could not learn from generated code. A line per
kind then reads that forecast t, mean' = intercept + slope·t, and the forecast takes the shape of
the line's misses on sources left out of the fit (heavy-tailed: most pairs land near the line, a
few octaves away), widened where the weights' own spread is wider (novelty still widens it) and
where the forecast rests on which sources were measured: trees grown with one source left out
each forecast the pair too, and the jackknife spread of their forecasts adds to the line's. Where
the sources disagree about a pair, the forecast defers; where they agree, it stays as sure.
- a solution against its problem (eager `Model`, or the problem under torch.compile);
- two solutions of one problem against each other. Their order is arbitrary, so that line runs
  through the origin;
- a solution against itself with a line or two edited (a launch's block size, `num_warps`), read
  with its launches, as the weights read them. Measured edits of elementwise solutions lost 30–40%
  with 128 threads a block where the author wrote 256, where the weights, which learnt block sizes
  from smaller generated problems, forecast about 5%; that line runs through the origin too;
- a `ModelNew(Model)` that calls a library's kernel (FlagGems, Liger, ...) against the problem.
  Libraries disagree, and trees grown mostly on LLM-written solutions moved a held-out library's
  forecasts the wrong way, so that line reads the weights' forecast itself (WEIGHTS_ONLY_KINDS)
  and learns only its spread: how far it missed on libraries left out, as wide on either side;
  against the problem under torch.compile a line of its own, read likewise;
- a problem under torch.compile (the candidate) against itself eager: its line reads the weights'
  forecast too, but moves it (intercept and slope), since inductor's kernels beat eager by more
  than the weights say on every source that measured them.
A kind of pair in a candidate language that fewer than SUPPORTING_SOURCES sources measured (LLM-written
Triton solutions came from one source but for a few) has no second author to say how far a new
author's code of that kind lands: its spread widens by how much more such pairs missed, when their
source was left out of the fit, than pairs of a kind and language other sources had measured.
One line serves every candidate language of a kind. Lines fitted on each language apart, where two
sources or more measured it, were judged with each source held out: better calibrated on LLM-written
Triton (direction ECE LLMKernel 0.056 -> 0.016, TritonBench 0.058 -> 0.030) but wider, since with one
Triton source held out the Triton lines rested on the two small others and on flash-linear-attention's
far-apart forms: within one bin fell on LLMKernel 0.69 -> 0.63 and, over the ten sources, 0.674 ->
0.655, and the forecasts sure enough not to defer from 39% of pairs to 35%.
Last, a direction temperature per kind and candidate language (where two sources measured it) makes
the forecast as sure of its direction as the lines' forecasts of sources left out of their fit were
right, after the service's calibration: the bins on each side keep their shape, only how much of
the mass lies on the faster side moves, so a pair's most probable bin rarely changes.
All are judged with each source held out in turn (workshop/training/kernelbench_prior.py): the
trees that forecast a source's pairs never saw that source, nor did the lines.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.models.embedded.boosted import BoostedTrees, forecast_rows_both_ways, read_both_ways
from kernelcast.models.embedded.features import token_counts
from kernelcast.models.embedded.pair_kinds import (
    BETWEEN_SOLUTIONS,
    COMPILED_AGAINST_EAGER,
    LIBRARY_AGAINST_COMPILED,
    LIBRARY_CALL,
    kind_flags,
    pair_kind,
)
from kernelcast.wire import ForecastRequest, normal_bin_probabilities, with_direction_temperature

PRIOR_PATH = Path(__file__).parents[1] / "weights" / "kernelbench_prior.json"
# The trees that move the weights' forecast of these pairs before a line reads it (beside PRIOR_PATH).
TREES_FILE = "kernelbench_trees.npz"
# Trees grown as those were, each with one source left out (beside PRIOR_PATH): member i's arrays are
# prefixed "i/".
MEMBERS_FILE = "kernelbench_members.npz"
# Kinds whose line reads the weights' forecast, not the trees': a library's kernel against its problem
# (eager or compiled).
# With each library held out, the trees (grown mostly on LLM-written solutions) moved the weights'
# forecast the wrong way more often than the right (helion 0.72 -> 0.56, Liger 0.76 -> 0.72). And a
# problem under torch.compile against itself eager, whose line learns only how sure to be.
WEIGHTS_ONLY_KINDS = (LIBRARY_CALL, LIBRARY_AGAINST_COMPILED, COMPILED_AGAINST_EAGER)
# Kinds whose two sides could be given either way round (two solutions of one problem): the
# forecast of the pair swapped must be the mirror image, so their lines' misses count both ways. The
# shipped solution-vs-solution misses leaned 0.01 octaves faster, which put two solutions that read
# alike at P(faster) 0.504 whichever was the candidate. A launch edit is not such a kind: the edited
# side is the candidate, and edits lost more often than their line said.
ORDER_FREE_KINDS = (BETWEEN_SOLUTIONS,)
# A kind of pair in one candidate language is supported when this many sources measured it, each at
# least SUPPORT_PAIRS pairs: then how far a new source lands was seen at least once.
SUPPORTING_SOURCES = 2
SUPPORT_PAIRS = 20


def reading_languages(kind: str, request: ForecastRequest) -> tuple[str, ...]:
    """The candidate languages whose support and direction temperature a pair of `kind` is read with:
    the candidate's, or both sides' where the order is arbitrary, so that the pair swapped reads alike."""
    if kind in ORDER_FREE_KINDS:
        return tuple(sorted({request.reference.language, request.candidate.language}))
    return (request.candidate.language,)


@dataclass(frozen=True)
class Line:
    intercept: float
    slope: float
    sd: float  # octaves: the spread of measured log2 S around the line
    misses: tuple[float, ...] = ()  # quantiles of measured − line on sources left out of the fit, octaves
    bandwidth: float = 0.0  # octaves: how far each quantile is smoothed

    def adjust(self, mean: float, sd: float) -> tuple[float, float]:
        return self.intercept + self.slope * mean, max(self.sd, sd)

    def bin_probabilities(self, mean: float, sd: float, both_ways: bool = False) -> list[float]:
        """The 8 bins around the line: its misses, each smoothed by the bandwidth, stretched by how
        much wider the model's own spread is; a normal of the line's spread where it has none.
        `both_ways`: each miss counts on either side too, so that a pair read in the other order gets
        the mirrored bins (a line through the origin whose misses lean one way would not)."""
        centre, spread = self.adjust(mean, sd)
        if not self.misses:
            return normal_bin_probabilities(centre, spread)
        stretch = spread / self.sd if self.sd > 0 else 1.0
        misses = (*self.misses, *(-miss for miss in self.misses)) if both_ways else self.misses
        each = [normal_bin_probabilities(centre + stretch * miss, stretch * self.bandwidth) for miss in misses]
        return [sum(column) / len(each) for column in zip(*each)]

    def to_json(self) -> dict[str, Any]:
        shape = {"misses": list(self.misses), "bandwidth": self.bandwidth} if self.misses else {}
        return {"intercept": self.intercept, "slope": self.slope, "sd": self.sd, **shape}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Line:
        misses = tuple(float(miss) for miss in data.get("misses", ()))
        return cls(float(data["intercept"]), float(data["slope"]), float(data["sd"]), misses, float(data.get("bandwidth", 0.0)))


@dataclass(frozen=True)
class KernelBenchPrior:
    lines: dict[str, Line]  # by the kind of pair it reads: pair_kinds.KINDS
    meta: dict[str, Any] = field(default_factory=dict)
    # Trees on the pair's features and the weights' forecast (boosted.corrected), fitted to every measured
    # real-world pair: their forecast is what a line reads. Without them a line reads the weights' mean.
    trees: BoostedTrees | None = None
    # The trees grown with one source left out each: how far their forecasts spread is how much a
    # forecast rests on which sources were measured (source_spread).
    members: tuple[BoostedTrees, ...] = ()
    # How many sources measured each kind of pair in each candidate language (SUPPORT_PAIRS or more
    # pairs each), and how much wider a pair of a kind and language fewer did is forecast.
    support: dict[str, dict[str, int]] = field(default_factory=dict)
    unsupported_widening: float = 1.0
    # By kind, then candidate language: how much surer (below 1) or less sure (above 1) a forecast
    # should be of its direction than the line makes it, learnt from how the lines' forecasts of
    # sources left out of their fit were right (LLM-written CUDA more often than forecast, Triton less).
    direction_temperatures: dict[str, dict[str, float]] = field(default_factory=dict)
    # The API tokens (features.api_tokens) whose counts on each side the trees read beside the features.
    vocabulary: tuple[str, ...] = ()

    def applies(self, request: ForecastRequest) -> str | None:
        """The kind of pair, where this prior has a line for it."""
        kind = pair_kind(request)
        return kind if kind in self.lines else None

    def adjust(self, kind: str, mean: float, sd: float, source_spread: float, languages: Sequence[str]) -> tuple[float, float]:
        return self.lines[kind].adjust(mean, self._widened(kind, sd, source_spread, languages))

    def bin_probabilities(self, kind: str, mean: float, sd: float, source_spread: float, languages: Sequence[str]) -> list[float]:
        widened = self._widened(kind, sd, source_spread, languages)
        probabilities = self.lines[kind].bin_probabilities(mean, widened, both_ways=kind in ORDER_FREE_KINDS)
        temperature = self._temperature(kind, languages)
        if temperature is None:
            return probabilities
        return with_direction_temperature(np.array([probabilities]), temperature)[0].tolist()

    def supported(self, kind: str, languages: Sequence[str]) -> bool:
        """Whether enough sources measured this kind of pair in each of these candidate languages (a
        prior that does not say, written before support was kept, counts every pair supported)."""
        return not self.support or all(self.support.get(kind, {}).get(language, 0) >= SUPPORTING_SOURCES for language in languages)

    def _temperature(self, kind: str, languages: Sequence[str]) -> float | None:
        """The kind's direction temperature in these languages: their geometric mean where there are two."""
        known = [
            self.direction_temperatures[kind][language] for language in languages if language in self.direction_temperatures.get(kind, {})
        ]
        return math.exp(sum(map(math.log, known)) / len(known)) if known else None

    def _widened(self, kind: str, sd: float, source_spread: float, languages: Sequence[str]) -> float:
        """The weights' spread, or the line's with the sources' disagreement added, whichever is wider;
        wider still where too few sources measured pairs of this kind and language."""
        spread = max(sd, math.hypot(self.lines[kind].sd, source_spread))
        return spread if self.supported(kind, languages) else spread * self.unsupported_widening

    def tokens_of(self, codes: Sequence[tuple[str, str]]) -> np.ndarray | None:
        """The (N, 2, vocabulary) token counts the trees read of (reference, candidate) texts; None without a vocabulary."""
        return token_counts(codes, self.vocabulary) if self.vocabulary else None

    def read(
        self, features: np.ndarray, mean: np.ndarray, sd: np.ndarray, kinds: Sequence[str | None], tokens: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """For (N, 2, F) pairs and their `tokens_of`: what each line reads, the trees' forecast (the
        weights' `mean` without trees), and the jackknife sd of the members' forecasts,
        sqrt((n - 1) / n · Σ (t_i - t̄)²) for n members (0 where all agree, or without members). The
        trees and members read one set of rows. Counts are taken, not texts, so that a refit counts
        each pair's tokens once, not once a fit."""
        mean, sd = np.asarray(mean, dtype=float), np.asarray(sd, dtype=float)
        spread = np.zeros(len(kinds))
        if (self.trees is None and len(self.members) < 2) or not len(kinds):
            return mean, spread
        if self.vocabulary and (tokens is None or tokens.shape != (len(kinds), 2, len(self.vocabulary))):
            raise ValueError("these trees read the pairs' texts: pass tokens_of each pair's (reference, candidate) code")
        rows = forecast_rows_both_ways(features, mean, sd, kind_flags(kinds), tokens)
        centre = read_both_ways(self.trees, rows) if self.trees is not None else mean
        if len(self.members) >= 2:
            forecasts = np.stack([read_both_ways(member, rows) for member in self.members])
            count = len(self.members)
            spread = np.sqrt((count - 1) / count * np.sum((forecasts - forecasts.mean(axis=0)) ** 2, axis=0))
        weights_only = np.array([kind in WEIGHTS_ONLY_KINDS for kind in kinds])
        return np.where(weights_only, mean, centre), np.where(weights_only, 0.0, spread)

    def to_json(self) -> dict[str, Any]:
        lines = {kind: line.to_json() for kind, line in sorted(self.lines.items())}
        return {
            "lines": lines,
            "support": self.support,
            "unsupported_widening": self.unsupported_widening,
            **({"direction_temperatures": self.direction_temperatures} if self.direction_temperatures else {}),
            **({"token_vocabulary": list(self.vocabulary)} if self.vocabulary else {}),
            "meta": self.meta,
        }

    def save_trees(self, path: Path) -> None:
        """The trees to `path`, their members to MEMBERS_FILE beside it."""
        if self.trees is not None:
            np.savez_compressed(path, **self.trees.to_arrays())
        if self.members:
            members = {key: value for i, member in enumerate(self.members) for key, value in member.to_arrays(f"{i}/").items()}
            np.savez_compressed(path.with_name(MEMBERS_FILE), **members)

    @classmethod
    def load(cls, path: Path = PRIOR_PATH) -> KernelBenchPrior | None:
        """The shipped lines and their trees (in TREES_FILE beside them), or None where there are no
        lines (the forecast is then the weights' alone)."""
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        lines = {kind: Line.from_json(line) for kind, line in data["lines"].items()}
        trees_path = path.with_name(TREES_FILE)
        trees = None
        if trees_path.exists():
            with np.load(trees_path) as arrays:
                trees = BoostedTrees.from_arrays(dict(arrays))
        members: list[BoostedTrees] = []
        members_path = path.with_name(MEMBERS_FILE)
        if members_path.exists():
            with np.load(members_path) as arrays:
                stored = dict(arrays)
            count = len({key.split("/", 1)[0] for key in stored})
            members = [BoostedTrees.from_arrays(stored, f"{i}/") for i in range(count)]
        support = {kind: {language: int(count) for language, count in counts.items()} for kind, counts in data.get("support", {}).items()}
        widening = float(data.get("unsupported_widening", 1.0))
        temperatures = {
            kind: {language: float(value) for language, value in each.items()}
            for kind, each in data.get("direction_temperatures", {}).items()
        }
        vocabulary = tuple(data.get("token_vocabulary", ()))
        return cls(lines, data.get("meta", {}), trees, tuple(members), support, widening, temperatures, vocabulary)
