"""Counts that say what the corpus holds, and whether a re-measurement reproduces it."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from kernelcast.wire import NUM_BINS, LabelledPair
from workshop.corpus.dataset import is_reference


def corpus_stats(records: list[dict[str, Any]], pairs: Iterable[LabelledPair]) -> dict[str, Any]:
    """Kernels, failures by kind, operations, languages, sizes per op, GPU, pairs per bin by kind."""
    kernels = [record for record in records if not is_reference(record)]
    correct = [record for record in kernels if record["correct"]]
    pair_bins: dict[str, list[int]] = defaultdict(lambda: [0] * NUM_BINS)
    per_op_bins: dict[str, list[int]] = defaultdict(lambda: [0] * NUM_BINS)
    for pair in pairs:
        pair_bins[pair.kind][pair.true_bin - 1] += 1
        per_op_bins[pair.op][pair.true_bin - 1] += 1
    sizes_per_op: dict[str, set[str]] = defaultdict(set)
    for record in records:
        sizes_per_op[record["op"]].add(",".join(f"{k}={v}" for k, v in record["sizes"].items()))
    gpus = Counter(record["gpu"].get("gpu_name", "?") for record in records)
    return {
        "kernels": len(kernels),
        "distinct_kernel_sources": len({record["kernel_id"] for record in kernels}),
        "correct": len(correct),
        "failed_by_kind": dict(Counter(record["failure"]["kind"] for record in kernels if not record["correct"])),
        "pytorch_references": sum(1 for record in records if is_reference(record) and record["correct"]),
        "operations": len({record["op"] for record in kernels}),
        "languages": dict(Counter(record["language"] for record in correct)),
        "sizes_per_op": {op: len(sizes) for op, sizes in sorted(sizes_per_op.items())},
        "gpu": dict(gpus),
        "drivers": sorted({str(record["gpu"].get("driver")) for record in records}),
        "pairs_per_bin": {kind: bins for kind, bins in sorted(pair_bins.items())},
        "per_op": _per_op(kernels, per_op_bins),
    }


def _per_op(kernels: list[dict[str, Any]], bins: dict[str, list[int]]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    by_op: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in kernels:
        by_op[record["op"]].append(record)
    for op, members in sorted(by_op.items()):
        times = sorted(record["runtime"]["median_ms"] for record in members if record["correct"])
        total = sum(bins[op]) or 1
        table[op] = {
            "kernels": len(members),
            "correct": len(times),
            "languages": sorted({record["language"] for record in members}),
            "runtime_ms": {"min": times[0], "median": statistics.median(times), "max": times[-1]} if times else None,
            "pair_bin_shares": [round(count / total, 3) for count in bins[op]],
        }
    return table


def reproducibility(dataset: list[dict[str, Any]], remeasured: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Share of re-measured kernels whose new median falls inside the dataset's 95% CI."""
    by_key = {record["id"]: record for record in dataset if record["correct"]}
    inside, compared, ratios = 0, 0, []
    for record in remeasured:
        original = by_key.get(record["key"])
        if not original or not record.get("correct") or not original["runtime"].get("ci95_ms"):
            continue
        low, high = original["runtime"]["ci95_ms"]
        median = record["runtime"]["median_ms"]
        compared += 1
        inside += low <= median <= high
        ratios.append(median / original["runtime"]["median_ms"])
    deviations = sorted(abs(ratio - 1) for ratio in ratios)
    return {
        "compared": compared,
        "inside_ci": inside,
        "share_inside_ci": inside / compared if compared else None,
        "median_abs_deviation": statistics.median(deviations) if deviations else None,
        "p90_abs_deviation": deviations[int(0.9 * (len(deviations) - 1))] if deviations else None,
    }


def markdown_table(stats: dict[str, Any]) -> str:
    """The per-operation summary the dataset README and closing notes show."""
    lines = [
        "| op | kernels | correct | languages | runtime min / median / max (ms) | pair share per bin 1…8 |",
        "|---|---|---|---|---|---|",
    ]
    for op, row in stats["per_op"].items():
        spread = row["runtime_ms"]
        times = f"{spread['min']:.4g} / {spread['median']:.4g} / {spread['max']:.4g}" if spread else "–"
        shares = " ".join(f"{share:.2f}" for share in row["pair_bin_shares"])
        lines.append(f"| {op} | {row['kernels']} | {row['correct']} | {', '.join(row['languages'])} | {times} | {shares} |")
    return "\n".join(lines)
