"""`kernelcast rank`: its flags and its run. Imports beyond argparse wait until it runs."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the run imports these; --help does not
    from kernelcast.kernels_runtime.hardware import GpuSpec
    from kernelcast.models.service.calibrated import Forecaster
    from kernelcast.progress import Progress
    from kernelcast.rank.cluster import DaskMeasurer, LocalMeasurer
    from kernelcast.rank.variants import Variant
    from kernelcast.wire import Measurement


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("variants", nargs="?", help="a folder of kernel files, a glob, or a .jsonl of variants (code, language, problem)")
    parser.add_argument("--reference", help="reference as path[::kernel] (default: each variant's pragma, config or git HEAD)")
    parser.add_argument("--kernel", help="the kernel of each file to rank (default: the first with a reference)")
    parser.add_argument(
        "--allow-references-outside-workspace",
        action="store_true",
        help="read a reference outside a variant's workspace (its git top, else its folder), as kernelcast forecast's flag",
    )
    parser.add_argument("--budget", type=int, help="at most this many measurements (default: until settled)")
    parser.add_argument("--budget-seconds", type=float, help="stop starting measurements once this many GPU-seconds are spent")
    parser.add_argument("--settle", type=float, default=0.05, help="stop when no unmeasured variant has more chance than this (0.05)")
    parser.add_argument("--gpu", help="target GPU of the forecasts (default: the local GPU, else H100-SXM)")
    parser.add_argument("--cluster", help="auto (a local Dask cluster, one worker per visible GPU) or a scheduler, tcp://host:8786")
    parser.add_argument("--backend", default="embedded", help="forecaster backend (default: embedded)")
    parser.add_argument("--threshold", type=float, default=0.8, help="confidence below which a forecast defers (default 0.8)")
    parser.add_argument("--no-facts", action="store_true", help="skip compiling for registers/occupancy (faster, less exact)")
    parser.add_argument("--kernel-timeout", type=float, default=10.0, help="seconds one launch may take (default 10)")
    parser.add_argument("--forecast-only", action="store_true", help="forecast and rank, measure nothing")
    parser.add_argument("--no-learn", action="store_true", help="keep measurements out of local learning")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--report", help="folder for forecast_vs_measured.png and best_vs_measurements.png")
    parser.add_argument("--replay", metavar="PAIRS.jsonl", help="judge the policy on recorded measurements instead of measuring")
    parser.add_argument("--min-group", type=int, default=10, help="--replay: smallest group replayed (default 10)")
    parser.add_argument("--max-groups", type=int, help="--replay: only the first N groups")
    parser.add_argument("--pool-sources", action="store_true", help="--replay: a group is one problem's pairs from every source")
    parser.add_argument(
        "--per-problem", action="store_true", help="--replay: each problem once, its largest group (PROBLEM/ref=REFERENCE names)"
    )
    parser.add_argument(
        "--forecasts",
        metavar="FORECASTS.jsonl",
        help="--replay: each pair's forecast from this file ({id, probabilities} a line), e.g. forecasts held out by source",
    )


def _fail(message: str, code: int = 2) -> int:
    print(f"kernelcast rank: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    if args.replay:
        return _replay(args)
    if not args.variants:
        return _fail("give VARIANTS (a folder, a glob or a .jsonl), or --replay PAIRS.jsonl")
    if args.budget is not None and args.budget < 1:
        return _fail(f"--budget {args.budget}: the budget counts measurements and must be at least 1 (--forecast-only measures none)")
    if args.budget_seconds is not None and not args.budget_seconds > 0:
        return _fail(f"--budget-seconds {args.budget_seconds:g}: must be more than 0")
    if not 0 < args.settle < 1:
        return _fail(f"--settle {args.settle:g}: a chance between 0 and 1")
    from kernelcast.kernels_runtime.hardware import resolve_target
    from kernelcast.models.service.calibrated import Forecaster
    from kernelcast.progress import Progress
    from kernelcast.rank import cluster, variants

    try:
        hardware = resolve_target(args.gpu)
        reference = variants.reference_option(args.reference)
        found = variants.read_variants(args.variants)
        variants.analyse(found, reference, hardware, args.kernel, args.allow_references_outside_workspace)
        forecaster = Forecaster([args.backend], options={})
    except KeyError as error:
        return _fail(str(error.args[0]))
    except variants.RankError as error:
        return _fail(str(error))
    ranked = [v for v in found if v.result is not None]
    skipped = [v for v in found if v.result is None]
    if not ranked:
        reasons = Counter(v.skipped for v in skipped)
        listed = "; ".join(f"{why} ({count} variant{'s' if count > 1 else ''})" for why, count in reasons.most_common(3))
        return _fail(f"no variants to rank in {args.variants}: {listed}")
    measurer: LocalMeasurer | DaskMeasurer | None = None
    if not args.forecast_only:
        try:
            measurer = cluster.connect(args.cluster) if args.cluster else cluster.LocalMeasurer()
        except cluster.ClusterError as error:
            return _fail(str(error))
    try:
        return _rank(args, ranked, skipped, reference, hardware, forecaster, measurer, Progress("", len(ranked), every_s=0.0))
    finally:
        if measurer is not None:
            measurer.close()


def _rank(
    args: argparse.Namespace,
    ranked: list[Variant],
    skipped: list[Variant],
    reference: str | None,
    hardware: GpuSpec,
    forecaster: Forecaster,
    measurer: LocalMeasurer | DaskMeasurer | None,
    progress: Progress,
) -> int:
    from kernelcast.analysis import measured_on
    from kernelcast.rank import report, variants
    from kernelcast.rank.search import Budget, SearchState, search

    if not args.no_facts:
        progress.update(0, "compiling facts")
        variants.attach_facts(ranked, reference, hardware, args.kernel, os.cpu_count() or 1)
    variants.forecast_all(ranked, forecaster, args.threshold)
    progress.update(len(ranked), "forecast")
    learning_failed: list[str] = []

    def learn(variant: Variant, measurement: Measurement) -> None:
        if args.no_learn or learning_failed or not measured_on(measurement, hardware):
            return
        try:
            forecaster.learn(variant.request, measurement.speedup)
        except (OSError, ValueError, KeyError) as error:
            learning_failed.append(str(error))
            print(f"kernelcast rank: local learning skipped: {error}", file=sys.stderr)

    def shown(state: SearchState, result: dict[str, Any]) -> None:
        best = state.best
        words = f"best {best[1].speedup:.2f}× ({state.variants[best[0]].name})" if best else "no correct variant yet"
        progress.update(len(state.outcomes), f"measured {state.variants[result['index']].name} · {words}")

    if measurer is None:
        state = SearchState(ranked, stopped="--forecast-only: nothing measured")
    else:
        budget = Budget(args.budget, args.budget_seconds)
        state = search(ranked, measurer, budget, shown, learn, args.settle, args.kernel_timeout)
    progress.finish()
    described = reference or (ranked[0].result.reference.description if ranked[0].result.reference else "?")
    summary = report.summary(state, skipped, described, hardware.key)
    if args.report:
        try:
            for path in report.write_plots(summary, Path(args.report)):
                print(f"wrote {path}", file=sys.stderr)
        except ImportError:
            print("kernelcast rank: --report needs matplotlib: pip install 'kernelcast[eval]'", file=sys.stderr)
        except OSError as error:
            print(f"kernelcast rank: cannot write the report in {args.report}: {error}", file=sys.stderr)
    print(json.dumps(summary, indent=2) if args.json else "\n".join(report.text_lines(summary)))
    return 0 if state.best is not None or measurer is None else 1


def _replay(args: argparse.Namespace) -> int:
    from kernelcast.models.service.calibrated import Forecaster
    from kernelcast.progress import Progress
    from kernelcast.rank import replay

    try:
        groups = replay.read_groups(Path(args.replay), args.min_group, args.max_groups, args.pool_sources, args.per_problem)
    except OSError as error:
        return _fail(f"cannot read {args.replay}: {error.strerror or error}")
    except ValueError as error:
        return _fail(str(error))
    if not groups:
        return _fail(f"no group in {args.replay} has {args.min_group} or more measured variants")
    if args.forecasts:
        try:
            replay.read_forecasts(Path(args.forecasts), groups)
        except OSError as error:
            return _fail(f"cannot read {args.forecasts}: {error.strerror or error}")
        except ValueError as error:
            return _fail(str(error))
    else:
        try:
            forecaster = Forecaster([args.backend], options={})
        except KeyError as error:
            return _fail(str(error.args[0]))
        progress = Progress("", 0, every_s=0.0)
        replay.forecast_groups(groups, forecaster, lambda done, total: progress.update(done, "pairs forecast", total))
        progress.finish()
    summary = replay.replay(groups)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print("\n".join(replay.text_lines(summary)))
    return 0
