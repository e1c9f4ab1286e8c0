"""Judge the measuring policy on measurements already made: `kernelcast rank --replay PAIRS.jsonl`.

Every group of labelled pairs (one reference and problem, many candidates) with enough
measured candidates is searched again with each pair's recorded speedup standing in for
the GPU: the policy, forecast order alone and random order each measure 10, 20 and 30% of
the group, and the best found is compared with the group's true best. Groups are told apart by
source and name, and reported per source: all groups, and each half of a fixed split by name
(the policy's numbers were chosen on the design half; the held-out half judges it).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.rank import policy
from kernelcast.wire import LabelledPair, read_forecast_rows

FRACTIONS = (0.1, 0.2, 0.3)
# "Found the best": within 5% of the true best's speedup.
WITHIN = 0.95
MIN_GROUP = 10
RANDOM_SEEDS = 20
RANDOM_SEED = 32
STRATEGIES = ("policy", "forecast order", "random order")
# The split into halves: a group is held out when the hash of this seed and its name is odd.
HALF_SEED = 32
POOLED = "all sources"
# What separates a group name's problem from its reference.
REFERENCE_MARK = "/ref="
_GROUP_FIELD = re.compile(r'"group":\s*"((?:[^"\\]|\\.)*)"')


@dataclass
class Group:
    name: str
    source: str
    pairs: list[LabelledPair]
    probabilities: np.ndarray = field(default_factory=lambda: np.zeros((0, 8)))

    @cached_property
    def likeness(self) -> np.ndarray:
        return policy.code_likeness([pair.request.candidate.code for pair in self.pairs])

    @cached_property
    def kin(self) -> np.ndarray:
        return policy.same_language([pair.request.candidate.language for pair in self.pairs])

    @property
    def run(self) -> policy.Run:
        return policy.Run(self.probabilities, self.likeness, self.kin)

    @property
    def log2_speedups(self) -> np.ndarray:
        return np.log2([pair.speedup for pair in self.pairs])

    @property
    def kinds(self) -> str:
        return "+".join(sorted({pair.kind for pair in self.pairs}))

    @property
    def half(self) -> str:
        """The group's half of the split, "design" or "held-out": fixed by its name alone, so a group
        keeps its half in any file."""
        odd = hashlib.sha256(f"{HALF_SEED}:{self.name}".encode()).digest()[0] % 2
        return "held-out" if odd else "design"


def read_groups(
    path: Path, min_size: int = MIN_GROUP, max_groups: int | None = None, pool_sources: bool = False, per_problem: bool = False
) -> list[Group]:
    """Groups (one source and group name) with at least `min_size` pairs, in the file's order; a
    file may be large, so the first pass reads only each line's group name and the second parses
    the pairs kept. `pool_sources` groups by name alone, as POOLED: one problem's solutions from
    many authors against one reference, as a folder of agents' files is. `per_problem` keeps one
    group of each problem (`problem_of`), its largest: one problem's solutions against its eager
    model, its torch.compile or one of themselves are one search under a rescaled reference, and
    counted once per reference a problem with many solutions would outweigh the others."""
    sizes: Counter[str] = Counter()
    with open(path, encoding="utf-8") as stream:
        for line in stream:
            found = _GROUP_FIELD.search(line)
            if found:
                sizes[json.loads(f'"{found.group(1)}"')] += 1
    wanted = [name for name, size in sizes.items() if size >= min_size][:max_groups]
    keep = set(wanted)
    pairs: dict[tuple[str, str], list[LabelledPair]] = defaultdict(list)
    with open(path, encoding="utf-8") as stream:
        for number, line in enumerate(stream, start=1):
            found = _GROUP_FIELD.search(line)
            if not found or json.loads(f'"{found.group(1)}"') not in keep:
                continue
            try:
                pair = LabelledPair.from_json(json.loads(line))
            except (ValueError, json.JSONDecodeError) as error:
                raise ValueError(f"{path}:{number}: {error}") from None
            source = POOLED if pool_sources else pair.source or "unnamed source"
            pairs[(source, pair.group)].append(pair)
    groups = [Group(name, source, found) for (source, name), found in pairs.items() if len(found) >= min_size]
    if not per_problem:
        return groups
    largest: dict[tuple[str, str], Group] = {}
    for group in groups:
        key = (group.source, problem_of(group.name))
        if key not in largest or len(group.pairs) > len(largest[key].pairs):
            largest[key] = group
    return [group for group in groups if largest[(group.source, problem_of(group.name))] is group]


def problem_of(group: str) -> str:
    """The problem a group name names: the name before its reference (`PROBLEM/ref=REFERENCE`, as the
    real-world pairs name their groups), else the whole name."""
    return group.split(REFERENCE_MARK, 1)[0]


def forecast_groups(groups: Sequence[Group], forecaster: Any, progress: Callable[[int, int], None], chunk: int = 512) -> None:
    """Fill each group's forecast distributions through the forecaster's batch path."""
    requests = [pair.request for group in groups for pair in group.pairs]
    rows: list[list[float]] = []
    for start in range(0, len(requests), chunk):
        rows.extend(forecast.probabilities for forecast in forecaster.forecast_many(requests[start : start + chunk]))
        progress(len(rows), len(requests))
    offset = 0
    for group in groups:
        group.probabilities = policy.as_matrix(rows[offset : offset + len(group.pairs)])
        offset += len(group.pairs)


def read_forecasts(path: Path, groups: Sequence[Group]) -> None:
    """Fill each group's forecast distributions from a file of {id, probabilities} lines: forecasts
    made elsewhere, such as each source's by a forecaster that never saw that source."""
    found = read_forecast_rows(path)
    for group in groups:
        missing = [pair.id for pair in group.pairs if pair.id not in found]
        if missing:
            raise ValueError(f"{path} has no forecast of {len(missing)} pairs of group {group.name}, first: {missing[0]}")
        group.probabilities = policy.as_matrix([found[pair.id] for pair in group.pairs])


def policy_order(run: policy.Run, log2_speedups: np.ndarray, budget: int) -> tuple[list[int], int | None]:
    """The policy's measuring order with recorded results, one at a time, and after how many
    measurements it would have stopped on its own (None: not within the budget)."""
    measured: dict[int, float] = {}
    settled_at = None
    while len(measured) < budget:
        if settled_at is None and policy.settled(run, measured, set()):
            settled_at = len(measured)
        (index,) = policy.pick_next(run, measured, set(), 1)
        measured[index] = float(log2_speedups[index])
    if settled_at is None and policy.settled(run, measured, set()):
        settled_at = len(measured)
    return list(measured), settled_at


def forecast_order(probabilities: np.ndarray) -> list[int]:
    means = policy.forecast_means(probabilities)
    return sorted(range(len(means)), key=lambda i: (-means[i], i))


def budget_of(size: int, fraction: float) -> int:
    return max(1, math.ceil(fraction * size - 1e-9))


def replay(groups: Sequence[Group], seeds: int = RANDOM_SEEDS) -> dict[str, Any]:
    """Per source (each half, and each group kind within it): for each strategy and fraction, the
    share of groups whose best found is within 5% of the true best and the mean regret (true best /
    best found); and in how many groups the policy found more, as much or less than forecast order."""
    per_group: list[dict[str, Any]] = []
    for group in groups:
        speedups = np.array([pair.speedup for pair in group.pairs])
        true_best = float(speedups.max())
        size = len(speedups)
        chosen, settled_at = policy_order(group.run, group.log2_speedups, size)
        orders = {"policy": chosen, "forecast order": forecast_order(group.probabilities)}
        generator = np.random.default_rng([RANDOM_SEED, len(per_group)])
        random_orders = [list(generator.permutation(size)) for _ in range(seeds)]
        row: dict[str, Any] = {"group": group.name, "source": group.source, "kinds": group.kinds, "half": group.half, "size": size}
        for fraction in FRACTIONS:
            budget = budget_of(size, fraction)
            for name, order in orders.items():
                found = float(speedups[order[:budget]].max())
                row[(name, fraction)] = (found >= WITHIN * true_best, true_best / found, found)
            founds = [float(speedups[order[:budget]].max()) for order in random_orders]
            row[("random order", fraction)] = (
                float(np.mean([f >= WITHIN * true_best for f in founds])),
                float(np.mean([true_best / f for f in founds])),
            )
        if settled_at is not None:
            row["settled"] = (settled_at / size, float(speedups[chosen[:settled_at]].max()) >= WITHIN * true_best)
        per_group.append(row)
    return summarise(per_group)


def summarise(per_group: list[dict[str, Any]]) -> dict[str, Any]:
    """Each source's rows: all its groups, its design and held-out halves, then its group kinds."""
    splits: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for source in dict.fromkeys(row["source"] for row in per_group):
        rows = [row for row in per_group if row["source"] == source]
        splits[source] = rows
        for key, label in (("half", "half"), ("kinds", "groups")):
            for value in sorted({row[key] for row in rows}):
                splits[f"{source} · {value} {label}"] = [row for row in rows if row[key] == value]
    table = []
    for split, rows in splits.items():
        entry: dict[str, Any] = {"split": split, "groups": len(rows), "variants": int(sum(r["size"] for r in rows))}
        for name in STRATEGIES:
            for fraction in FRACTIONS:
                entry[f"{name} @{round(100 * fraction)}%"] = {
                    "within_5pct": round(float(np.mean([r[(name, fraction)][0] for r in rows])), 4),
                    "mean_regret": round(float(np.mean([r[(name, fraction)][1] for r in rows])), 4),
                }
        for fraction in FRACTIONS:
            margins = [r[("policy", fraction)][2] - r[("forecast order", fraction)][2] for r in rows]
            entry[f"policy vs forecast order @{round(100 * fraction)}%"] = {
                "better": sum(m > 0 for m in margins),
                "same": sum(m == 0 for m in margins),
                "worse": sum(m < 0 for m in margins),
            }
        stops = [r["settled"] for r in rows if "settled" in r]
        entry["self_stop"] = {
            "groups_stopped": len(stops),
            "median_fraction_measured": round(float(np.median([s[0] for s in stops])), 4) if stops else None,
            "within_5pct": round(float(np.mean([s[1] for s in stops])), 4) if stops else None,
        }
        table.append(entry)
    return {"within": WITHIN, "fractions": list(FRACTIONS), "splits": table}


def table_lines(summary: dict[str, Any]) -> list[str]:
    """The replay as a Markdown table: % of groups within 5% of the true best (mean true best / best
    found), and the groups where the policy found more, as much or less than forecast order at 20%."""
    cells = [f"{n} @{round(100 * f)}%" for n in STRATEGIES for f in FRACTIONS]
    header = "| split | groups | variants | " + " | ".join(cells) + " | policy vs forecast order @20%: better/same/worse |"
    lines = [header, "|" + "---|" * (4 + len(cells))]
    for entry in summary["splits"]:
        cells = [entry["split"], str(entry["groups"]), str(entry["variants"])]
        for name in STRATEGIES:
            for fraction in FRACTIONS:
                cell = entry[f"{name} @{round(100 * fraction)}%"]
                cells.append(f"{100 * cell['within_5pct']:.1f}% ({cell['mean_regret']:.3f})")
        paired = entry["policy vs forecast order @20%"]
        cells.append(f"{paired['better']}/{paired['same']}/{paired['worse']}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def text_lines(summary: dict[str, Any]) -> list[str]:
    """What `kernelcast rank --replay` prints: the table, then how the policy did left to stop by itself."""
    lines = ["% of groups whose best found is within 5% of the true best (mean regret: true best / best found)", *table_lines(summary)]
    for entry in summary["splits"]:
        stop = entry["self_stop"]
        if stop["groups_stopped"]:
            lines.append(
                f"{entry['split']}: the policy settles on its own after a median {100 * stop['median_fraction_measured']:.0f}% "
                f"measured, within 5% of the best in {100 * stop['within_5pct']:.0f}% of {stop['groups_stopped']} groups"
            )
    return lines
