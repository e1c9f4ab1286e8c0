"""What a rank run shows: a progress line on stderr, the table, JSON, and with --report two PNGs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from kernelcast.rank.search import SearchState
from kernelcast.rank.variants import Variant
from kernelcast.wire import Measurement


def estimate_all_seconds(state: SearchState) -> float | None:
    """GPU-seconds measuring every ranked variant would take, at this run's mean per measurement."""
    spent = [o["seconds"] for o in state.outcomes.values() if o["seconds"] > 0]
    return sum(spent) / len(spent) * len(state.variants) if spent else None


def rows(state: SearchState) -> list[dict[str, Any]]:
    """One row per ranked variant: measured ones by measured S, then open ones by forecast, then the failed."""
    table, any_measured = [], state.best is not None
    for index, variant in enumerate(state.variants):
        forecast = variant.forecast
        assert forecast is not None
        row: dict[str, Any] = {
            "variant": variant.name,
            "kernel": variant.result.kernel.name if variant.result else None,
            "forecast": {"speedup": forecast.speedup, "interval": list(forecast.interval), "confidence": forecast.confidence},
        }
        outcome = state.outcomes.get(index)
        if outcome is None:
            row["status"] = "not measured"
            if index in state.chances and any_measured:
                row["chance_to_beat_best"] = round(state.chances[index], 4)
        elif outcome["measured"]:
            measurement = state.measurement(index)
            assert measurement is not None
            row.update(status="measured", measured={"speedup": measurement.speedup, "ci95": list(measurement.ci95)}, where=outcome["where"])
        else:
            failure = outcome["outcome"]
            row.update(status=failure["kind"], why=failure["message"], where=outcome["where"])
        table.append(row)

    def order(row: dict[str, Any]) -> tuple[int, float]:
        if row["status"] == "measured":
            return 0, -row["measured"]["speedup"]
        return (1 if row["status"] == "not measured" else 2), -row["forecast"]["speedup"]

    return sorted(table, key=order)


def summary(state: SearchState, skipped: list[Variant], reference: str, gpu: str) -> dict[str, Any]:
    best = state.best
    estimate = estimate_all_seconds(state)
    return {
        "reference": reference,
        "gpu": gpu,
        "variants": rows(state),
        "skipped": [{"variant": v.name, "why": v.skipped} for v in skipped],
        "best": {**_measured(state, *best), "tied": [_measured(state, *item) for item in state.tied_with_best]} if best else None,
        "measurements": len(state.outcomes),
        "ranked": len(state.variants),
        "gpu_seconds": round(state.gpu_seconds, 3),
        "gpu_seconds_to_measure_all": round(estimate, 3) if estimate is not None else None,
        "per_gpu": state.per_gpu,
        "stopped": state.stopped,
        "best_after_each_measurement": [None if math.isnan(s) else s for s in state.best_after],
    }


def _measured(state: SearchState, index: int, measurement: Measurement) -> dict[str, Any]:
    return {"variant": state.variants[index].name, "speedup": measurement.speedup, "ci95": list(measurement.ci95)}


def _times(value: float) -> str:
    return f"{value:.2f}×"


def text_lines(report: dict[str, Any]) -> list[str]:
    lines = [f"reference: {report['reference']} · GPU: {report['gpu']}"]
    width = max([len(r["variant"]) for r in report["variants"]] + [7])
    lines.append(f"{'variant':<{width}}  {'forecast (10–90%)':<24} {'conf':>5}  measured")
    for row in report["variants"]:
        forecast = row["forecast"]
        words = f"{_times(forecast['speedup'])} ({forecast['interval'][0]:.2f}–{forecast['interval'][1]:.2f})"
        if row["status"] == "measured":
            low, high = row["measured"]["ci95"]
            result = f"{_times(row['measured']['speedup'])} (CI {low:.2f}–{high:.2f}) on {row['where']}"
        elif row["status"] == "not measured":
            chance = row.get("chance_to_beat_best")
            result = "not measured" + (f" ({100 * chance:.0f}% chance to beat the best)" if chance is not None else "")
        else:
            result = f"{row['status'].upper()}: {row['why'].splitlines()[0] if row['why'] else ''}"
        lines.append(f"{row['variant']:<{width}}  {words:<24} {forecast['confidence']:>5.2f}  {result}")
    for skipped in report["skipped"]:
        lines.append(f"skipped {skipped['variant']}: {skipped['why']}")
    best = report["best"]
    if best:
        lines.append(f"best: {best['variant']}: {_times(best['speedup'])} the reference (CI {best['ci95'][0]:.2f}–{best['ci95'][1]:.2f})")
        if best["tied"]:
            tied = ", ".join(f"{row['variant']} ({_times(row['speedup'])})" for row in best["tied"])
            lines.append(f"  as fast within measurement noise (95% CIs overlap): {tied}")
    else:
        lines.append("best: none measured")
    spent = f"{report['measurements']} of {report['ranked']} variants measured, {report['gpu_seconds']:.1f} GPU-s"
    if report["gpu_seconds_to_measure_all"] is not None:
        spent += f" (measuring all: about {report['gpu_seconds_to_measure_all']:.1f} GPU-s)"
    lines.append(spent)
    if report["per_gpu"]:
        lines.append("per GPU: " + ", ".join(f"{where}: {count}" for where, count in report["per_gpu"].items()))
    lines.append(f"stopped: {report['stopped']}")
    return lines


def write_plots(report: dict[str, Any], folder: Path) -> list[Path]:
    """forecast_vs_measured.png and best_vs_measurements.png; matplotlib is imported only here."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    measured = [r for r in report["variants"] if r["status"] == "measured"]
    figure, axes = plt.subplots(figsize=(5.5, 5))
    for row in measured:
        forecast, result = row["forecast"], row["measured"]
        axes.errorbar(
            result["speedup"],
            forecast["speedup"],
            xerr=[[result["speedup"] - result["ci95"][0]], [result["ci95"][1] - result["speedup"]]],
            yerr=[[forecast["speedup"] - forecast["interval"][0]], [forecast["interval"][1] - forecast["speedup"]]],
            fmt="o",
            color="tab:blue",
            alpha=0.7,
        )
    values = [r["measured"]["speedup"] for r in measured] + [r["forecast"]["speedup"] for r in measured] or [1.0]
    low, high = min(values) / 1.5, max(values) * 1.5
    axes.plot([low, high], [low, high], color="grey", linewidth=0.8)
    axes.set(xscale="log", yscale="log", xlabel="measured S (95% CI)", ylabel="forecast S (10–90%)", title="Forecast vs measured")
    figure.tight_layout()
    first = folder / "forecast_vs_measured.png"
    figure.savefig(first, dpi=120)
    plt.close(figure)
    figure, axes = plt.subplots(figsize=(5.5, 3.5))
    best = [math.nan if s is None else s for s in report["best_after_each_measurement"]]
    axes.step(range(1, len(best) + 1), best, where="post")
    axes.set(xlabel="measurements", ylabel="best measured S", title=f"Best found ({report['ranked']} variants)")
    axes.set_xlim(0, max(report["ranked"], 1))
    figure.tight_layout()
    second = folder / "best_vs_measurements.png"
    figure.savefig(second, dpi=120)
    plt.close(figure)
    return [first, second]
