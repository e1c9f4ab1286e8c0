"""`kernelcast rank`: the policy, the replay on recorded pairs, a real local Dask cluster, the CLI's errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from lsp_support import KERNELCAST, isolated_env

from benchmarks import rank_variants
from kernelcast.kernels_runtime.hardware import lookup
from kernelcast.rank import cluster, policy, replay, report, variants
from kernelcast.rank.search import Budget, search
from kernelcast.wire import normal_bin_probabilities

DATA = Path(__file__).parent / "data"


def _rank(tmp_path: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a user runs it."""
    return subprocess.run(
        [str(KERNELCAST), "rank", *args], capture_output=True, text=True, timeout=timeout, env=isolated_env(tmp_path / "home")
    )


# --- the policy ---------------------------------------------------------------------------------


def _unalike(count: int) -> list[str]:
    """Texts with no three-token run in common: variants whose code is nothing alike."""
    return [f"v{i} = {i} ;" for i in range(count)]


def _run(forecasts: list[list[float]], texts: list[str] | None = None, languages: list[str] | None = None) -> policy.Run:
    return policy.Run.of(forecasts, texts or _unalike(len(forecasts)), languages or ["cuda"] * len(forecasts))


def test_code_likeness_reads_runs_of_tokens_not_spacing() -> None:
    kernel = "__global__ void add(const float* x, float* y, int n) { int i = blockIdx.x * 256 + threadIdx.x; if (i < n) y[i] += x[i]; }"
    respaced = kernel.replace(" ", "  ").replace(";", " ;\n")
    edited = kernel.replace("256", "128")
    likeness = policy.code_likeness([kernel, respaced, edited, "print('hello')", ""])
    assert np.allclose(np.diag(likeness), 1.0) and np.allclose(likeness, likeness.T)
    assert likeness[0, 1] == 1.0
    assert 0.8 < likeness[0, 2] < 1.0  # one constant changed
    assert likeness[0, 3] == 0.0 and likeness[0, 4] == 0.0


def test_policy_measures_the_best_forecast_first_then_what_may_still_beat_the_best() -> None:
    run = _run([normal_bin_probabilities(mean, 0.4) for mean in (0.0, 1.5, 0.9, -1.0)])
    assert policy.pick_next(run, {}, set(), 2) == [1, 2]
    # Variant 1 measured as forecast: variant 2 (0.6 octaves below) keeps a chance, 3 (2.5 below) has none.
    chances = policy.open_chances(run, {1: 1.5}, set())
    assert chances[2] > 0.05 > chances[3]
    assert policy.pick_next(run, {1: 1.5}, set(), 1) == [2]
    assert not policy.settled(run, {1: 1.5}, set())
    # Variant 2 measured well under its forecast: the run's common miss pulls 0 and 3 down with it.
    assert policy.settled(run, {1: 1.5, 2: 0.2}, set())
    # Excluded (wrong) variants are never picked.
    assert 0 not in policy.pick_next(run, {1: 1.5}, {0}, 3)


def test_policy_shifts_open_variants_by_the_common_miss() -> None:
    run = _run([normal_bin_probabilities(mean, 0.4) for mean in (0.0, 0.2, 0.1)])
    means = policy.forecast_means(run.probabilities)
    # Both measured variants beat their forecasts by a full octave: the third, code unlike theirs,
    # is expected to beat its own by the run's shared part of that.
    (shifted,), (narrowed,) = policy.posterior(run, {0: means[0] + 1.0, 1: means[1] + 1.0}, [2])
    (unmoved,), (prior_sd,) = policy.posterior(run, {}, [2])
    assert unmoved == means[2] and shifted > means[2] + 0.7 and narrowed < prior_sd


def test_a_miss_moves_the_variants_of_its_language_more_than_the_others() -> None:
    forecasts = [normal_bin_probabilities(mean, 0.4) for mean in (1.5, 1.2, 0.9)]
    # The best forecast, a Triton variant, measures an octave under it: the other Triton variant,
    # forecast above the CUDA one, is now expected below it, and the CUDA one is measured next.
    mixed = _run(forecasts, languages=["triton", "triton", "cuda"])
    missed = {0: policy.forecast_means(mixed.probabilities)[0] - 1.0}
    (triton, cuda), _ = policy.posterior(mixed, missed, [1, 2])
    assert triton < cuda - 0.1
    assert policy.pick_next(mixed, missed, set(), 1) == [2]
    # All in one language, the miss moves both alike and the order stays the forecasts'.
    same = _run(forecasts)
    (first, second), _ = policy.posterior(same, missed, [1, 2])
    assert first > second + 0.2 and policy.pick_next(same, missed, set(), 1) == [1]


def test_expected_improvement_prefers_the_wider_of_two_equal_means_below_the_best() -> None:
    gains = policy.expected_improvement(np.array([0.0, 0.0]), np.array([0.5, 0.1]), best=0.5)
    assert gains[0] > 0.04 and gains[1] < 1e-6
    # Variant 1 was measured as forecast; 2 is its code's twin (one constant changed), 3 has the
    # same forecast and other code. The best measured (0) is above both: the twin, already half
    # known, is worth less.
    kernel = "__global__ void scale(float* y, const float* x, int n) { int i = blockIdx.x * 256 + threadIdx.x; y[i] = 2.0f * x[i]; }"
    texts = ["0 1 2 3", kernel, kernel.replace("256", "128"), "__global__ void other(float* out) { out[threadIdx.x] = 0; }"]
    same = normal_bin_probabilities(0.3, 0.3)
    run = _run([normal_bin_probabilities(1.5, 0.3), same, same, same], texts)
    means = policy.forecast_means(run.probabilities)
    measured = {0: means[0], 1: means[1]}
    expected, sds = policy.posterior(run, measured, [2, 3])
    assert expected == pytest.approx([means[2], means[3]]) and sds[0] < sds[1]
    assert policy.pick_next(run, measured, set(), 1) == [3]
    # Had variant 1 missed by 0.6 octaves, its twin would be pulled down further than the other.
    expected, _ = policy.posterior(run, {0: means[0], 1: means[1] - 0.6}, [2, 3])
    assert expected[0] < expected[1] - 0.08


def test_one_outlying_miss_neither_drags_nor_flips_the_rest() -> None:
    run = _run([normal_bin_probabilities(mean, 0.4) for mean in (1.5, 1.0, 0.5, 0.0)])
    means = policy.forecast_means(run.probabilities)
    # The best forecast measures six octaves under it: read as its own miss, the rest keep their
    # order and stay within a tenth of an octave of their forecasts, and the next best is measured next.
    outlier = {0: means[0] - 6.0}
    expected, _ = policy.posterior(run, outlier, [1, 2, 3])
    assert list(np.argsort(-expected)) == [0, 1, 2] and np.all(np.abs(expected - means[1:]) < 0.1)
    assert policy.pick_next(run, outlier, set(), 1) == [1]
    # A second, ordinary miss that the rest can share still moves them.
    expected, _ = policy.posterior(run, {**outlier, 1: means[1] - 0.5}, [2, 3])
    assert np.all(expected < means[2:] - 0.15)


def test_a_round_spends_no_two_gpus_on_twins() -> None:
    # 0 and 1 are the same code and forecast; 2 is other code, forecast a little lower: the round takes 0 and 2.
    forecasts = [normal_bin_probabilities(mean, sd) for mean, sd in ((1.0, 0.4), (1.0, 0.4), (0.95, 0.9))]
    twins = _run(forecasts, ["y = x * 2 ;", "y  =  x*2;", "z = w + 1 ;"])
    assert policy.forecast_means(twins.probabilities)[2] < policy.forecast_means(twins.probabilities)[1]
    assert policy.pick_next(twins, {}, set(), 2) == [0, 2]
    assert policy.pick_next(twins, {}, set(), 1) == [0]
    # The same forecasts of three unalike variants: the round takes the two best forecast.
    assert policy.pick_next(_run(forecasts), {}, set(), 2) == [0, 1]


class _RecordedVariant:
    """What search() reads of a variant: a forecast, its text and language, and a job the recorded GPU answers from the name."""

    def __init__(self, forecast_mean: float, speedup: float) -> None:
        self.name = self.text = f"speedup_{speedup}"
        self.forecast = SimpleNamespace(probabilities=normal_bin_probabilities(forecast_mean, 0.3))
        self.request = SimpleNamespace(candidate=SimpleNamespace(language="cuda"))

    def measurement_job(self, index: int, kernel_timeout_s: float) -> dict:
        return {"index": index, "name": self.name}


def test_a_settled_search_stops_before_measuring_everything() -> None:
    # Measured as forecast: after the two best, nothing left has a 5% chance of beating them.
    found = [_RecordedVariant(s, round(2**s, 4)) for s in (1.0, 0.8, -0.5, -1.0, -1.5, -2.0)]
    state = search(found, cluster.LocalMeasurer(recorded_gpu), Budget(), lambda s, r: None, lambda v, m: None)  # type: ignore[arg-type]
    assert state.stopped.startswith("settled") and sorted(state.outcomes) == [0, 1]
    assert state.chances and max(state.chances.values()) <= policy.SETTLE_CHANCE


# --- the replay on recorded measurements ---------------------------------------------------------


def test_replay_on_recorded_pairs(tmp_path: Path) -> None:
    groups = replay.read_groups(DATA / "pairs_rank_groups.jsonl")
    assert sorted(len(g.pairs) for g in groups) == [10, 10, 11]
    assert replay.read_groups(DATA / "pairs_small.jsonl") == []  # its groups are smaller than 10

    completed = _rank(tmp_path, "--replay", str(DATA / "pairs_rank_groups.jsonl"), "--json")
    assert completed.returncode == 0, completed.stderr
    summary = json.loads(completed.stdout)
    overall = summary["splits"][0]
    assert (overall["groups"], overall["variants"]) == (3, 31)

    # Forecast order, recomputed here from the same forecasts: the replay's number must match.
    from kernelcast.models.service.calibrated import Forecaster

    replay.forecast_groups(groups, Forecaster(["embedded"]), lambda done, total: None)
    found = []
    for group in groups:
        speedups = np.array([pair.speedup for pair in group.pairs])
        means = policy.forecast_means(group.probabilities)
        top = np.argsort(-means, kind="stable")[: replay.budget_of(len(speedups), 0.2)]
        found.append(speedups.max() / speedups[top].max())
    assert overall["forecast order @20%"]["mean_regret"] == pytest.approx(np.mean(found), abs=1e-4)
    for name in replay.STRATEGIES:
        regrets = [overall[f"{name} @{round(100 * f)}%"]["mean_regret"] for f in replay.FRACTIONS]
        assert all(r >= 1 for r in regrets) and regrets == sorted(regrets, reverse=True)  # more measured never finds less
    for fraction in replay.FRACTIONS:
        assert sum(overall[f"policy vs forecast order @{round(100 * fraction)}%"].values()) == 3

    table = _rank(tmp_path, "--replay", str(DATA / "pairs_rank_groups.jsonl"))
    assert "| kernelcast-h100-corpus | 3 | 31 |" in table.stdout


def test_replay_reports_every_source_and_both_halves(tmp_path: Path) -> None:
    # The gemv group again under another source, with the same group name: a group of its own.
    lines = (DATA / "pairs_rank_groups.jsonl").read_text().splitlines()
    elsewhere = [json.dumps({**json.loads(line), "source": "written elsewhere"}) for line in lines if '"group": "gemv' in line]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join([*lines, *elsewhere]) + "\n")
    groups = replay.read_groups(pairs)
    assert sorted((g.source, len(g.pairs)) for g in groups)[-1] == ("written elsewhere", 11) and len(groups) == 4
    for group in groups:
        group.probabilities = policy.as_matrix([normal_bin_probabilities(0.0, 1.0)] * len(group.pairs))
    summary = replay.replay(groups, seeds=2)
    splits = {entry["split"]: entry for entry in summary["splits"]}
    assert splits["written elsewhere"]["groups"] == 1 and splits["kernelcast-h100-corpus"]["groups"] == 3
    halves = [name for name in splits if name.startswith("kernelcast-h100-corpus · ") and name.endswith(" half")]
    assert sum(splits[name]["groups"] for name in halves) == 3
    assert {g.half for g in groups} <= {"design", "held-out"}
    assert [g.half for g in groups] == [replay.Group(g.name, "any source", []).half for g in groups]  # the name alone decides
    # Pooled, one problem's solutions from both sources are one group, as a folder of agents' files is.
    pooled = replay.read_groups(pairs, pool_sources=True)
    assert sorted((g.source, len(g.pairs)) for g in pooled) == [(replay.POOLED, 10), (replay.POOLED, 10), (replay.POOLED, 22)]


def test_replay_per_problem_keeps_each_problems_largest_group(tmp_path: Path) -> None:
    # Two groups of one problem under two references (gemv against its eager model, axpy's pairs
    # renamed as gemv's against one of its solutions), and another problem's group.
    renamed = {"gemv": "gemv@m=4096/ref=eager", "axpy": "gemv@m=4096/ref=solution-1", "index_select_rows": "rows@d=100/ref=eager"}
    lines = []
    for line in (DATA / "pairs_rank_groups.jsonl").read_text().splitlines():
        pair = json.loads(line)
        lines.append(json.dumps({**pair, "group": renamed[pair["group"].split("-")[0]]}))
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(lines) + "\n")
    assert len(replay.read_groups(pairs)) == 3
    kept = replay.read_groups(pairs, per_problem=True)
    assert sorted((g.name, len(g.pairs)) for g in kept) == [("gemv@m=4096/ref=eager", 11), ("rows@d=100/ref=eager", 10)]
    completed = _rank(tmp_path, "--replay", str(pairs), "--per-problem", "--json")
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["splits"][0]["groups"] == 2


def test_replay_reads_forecasts_made_elsewhere(tmp_path: Path) -> None:
    # Forecasts that know each group's order (S itself, as a narrow distribution) find the best at
    # 10%; forecasts that have it backwards do not. The replay must use the file's, not its own.
    pairs = [json.loads(line) for line in (DATA / "pairs_rank_groups.jsonl").read_text().splitlines()]

    def forecasts(sign: float) -> Path:
        path = tmp_path / f"forecasts{sign:+.0f}.jsonl"
        lines = [{"id": pair["id"], "probabilities": normal_bin_probabilities(sign * np.log2(pair["speedup"]), 0.1)} for pair in pairs]
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        return path

    def regret_at_10(path: Path) -> float:
        completed = _rank(tmp_path, "--replay", str(DATA / "pairs_rank_groups.jsonl"), "--forecasts", str(path), "--json")
        assert completed.returncode == 0, completed.stderr
        return json.loads(completed.stdout)["splits"][0]["forecast order @10%"]["mean_regret"]

    knowing, backwards = regret_at_10(forecasts(+1)), regret_at_10(forecasts(-1))
    assert knowing == pytest.approx(1.0) and backwards > 1.05
    # A file that lacks a pair, or is not forecasts, is named with what is wrong.
    short = tmp_path / "short.jsonl"
    short.write_text("".join(forecasts(+1).read_text().splitlines(keepends=True)[1:]))
    completed = _rank(tmp_path, "--replay", str(DATA / "pairs_rank_groups.jsonl"), "--forecasts", str(short))
    assert completed.returncode == 2 and "has no forecast of 1 pairs" in completed.stderr and pairs[0]["id"] in completed.stderr
    short.write_text('{"id": "x", "probabilities": [1.0]}\n')
    completed = _rank(tmp_path, "--replay", str(DATA / "pairs_rank_groups.jsonl"), "--forecasts", str(short))
    assert completed.returncode == 2 and "short.jsonl:1: 1 probabilities, not one per bin (8)" in completed.stderr


# --- a real local Dask cluster -----------------------------------------------------------------


def recorded_gpu(job: dict) -> dict:
    """Measures nothing: the speedup a variant's name records (speedup_<S>), as measured on this worker."""
    from kernelcast.rank.cluster import where_this_runs

    speedup = float(job["name"].split("_")[1].removesuffix(".cu"))
    measurement = {"speedup": speedup, "ci95": [speedup * 0.99, speedup * 1.01], "gpu": "H100", "t_reference_ms": 1.0}
    return {
        "index": job["index"],
        "outcome": {**measurement, "t_candidate_ms": 1.0 / speedup, "details": {}},
        "measured": True,
        "seconds": 0.5,
        "where": where_this_runs(),
    }


def wrong_when_fastest(job: dict) -> dict:
    """The recorded GPU, except that the variant recorded fastest computes a wrong answer."""
    result = recorded_gpu(job)
    if job["name"].startswith("speedup_2.2"):
        result.update(measured=False, outcome={"kind": "wrong", "message": "out differs from the reference at 17 of 1048576 elements"})
    return result


def dies_on_first_try(job: dict) -> dict:
    """Kills its whole Dask worker process the first time it runs; the retry says where it ran."""
    from distributed import get_worker

    marker = Path(job["marker"])
    if not marker.exists():
        marker.write_text(get_worker().address)
        os._exit(1)
    return {"index": job["index"], "outcome": {}, "measured": True, "seconds": 0.0, "where": get_worker().address}


@pytest.fixture(scope="module")
def two_worker_cluster():
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers need not import the tests
    measurer = cluster.connect("auto", devices=["0", "1"], job_function=recorded_gpu)
    yield measurer
    measurer.close()


SPEEDUPS = [0.5, 0.8, 1.1, 1.25, 1.3, 1.6, 2.2, 0.9, 1.05, 1.7]


def _forecast_recorded_sweep(tmp_path: Path) -> list[variants.Variant]:
    """Ten real variants, forecast, named after the speedup the recorded GPU gives them."""
    reference = tmp_path / "reference.cu"
    reference.write_text(rank_variants.REFERENCE.format(args=rank_variants.ARGS.format(n=1 << 20)))
    sweep = rank_variants.variants(1 << 20)
    folder = tmp_path / "variants"
    folder.mkdir()
    for speedup, code in zip(SPEEDUPS, list(sweep.values())[: len(SPEEDUPS)]):
        (folder / f"speedup_{speedup}.cu").write_text(code)
    found = variants.read_variants(str(folder))
    variants.analyse(found, variants.reference_option(str(reference)), lookup("H100-SXM"), None, allow_outside_workspace=True)
    from kernelcast.models.service.calibrated import Forecaster

    variants.forecast_all(found, Forecaster(["embedded"]), 0.8)
    return found


def test_search_spends_gpu_seconds_and_drops_a_wrong_variant(tmp_path: Path) -> None:
    found = _forecast_recorded_sweep(tmp_path)
    state = search(found, cluster.LocalMeasurer(wrong_when_fastest), Budget(gpu_seconds=100), lambda s, r: None, lambda v, m: None, 1e-9)
    assert state.stopped == "every variant measured" and len(state.outcomes) == 10 and state.gpu_seconds == pytest.approx(5.0)
    assert state.best is not None and state.best[1].speedup == 1.7  # 2.2 was wrong: out, said so
    rows = {row["variant"]: row for row in report.rows(state)}
    assert rows["speedup_2.2.cu"]["status"] == "wrong" and "differs" in rows["speedup_2.2.cu"]["why"]
    capped = search(found, cluster.LocalMeasurer(recorded_gpu), Budget(gpu_seconds=1.2), lambda s, r: None, lambda v, m: None, 1e-9)
    assert len(capped.outcomes) == 3 and capped.stopped == "budget of 1.2 GPU-seconds spent"


def noisy_wrong_when_fastest(job: dict) -> dict:
    """As wrong_when_fastest, measured with a 95% CI of ±5% instead of ±1%."""
    result = wrong_when_fastest(job)
    if result["measured"]:
        speedup = result["outcome"]["speedup"]
        result["outcome"]["ci95"] = [speedup * 0.95, speedup * 1.05]
    return result


def test_the_best_names_the_variants_as_fast_within_measurement_noise(tmp_path: Path) -> None:
    found = _forecast_recorded_sweep(tmp_path)
    settle = 1e-9
    precise = search(
        found, cluster.LocalMeasurer(wrong_when_fastest), Budget(gpu_seconds=100), lambda s, r: None, lambda v, m: None, settle
    )
    assert precise.tied_with_best == []  # 1.7 (CI 1.68–1.72) stands apart from 1.6 (CI 1.58–1.62)
    noisy = search(
        found, cluster.LocalMeasurer(noisy_wrong_when_fastest), Budget(gpu_seconds=100), lambda s, r: None, lambda v, m: None, settle
    )
    # ±5%: 1.6 (1.52–1.68) overlaps the best 1.7 (1.615–1.785); 1.3 (1.235–1.365) does not.
    assert [m.speedup for _, m in noisy.tied_with_best] == [1.6]
    summary = report.summary(noisy, [], "reference.cu", "H100-SXM")
    assert summary["best"]["variant"] == "speedup_1.7.cu"
    assert [row["variant"] for row in summary["best"]["tied"]] == ["speedup_1.6.cu"]
    assert "as fast within measurement noise (95% CIs overlap): speedup_1.6.cu (1.60×)" in [
        line.strip() for line in report.text_lines(summary)
    ]
    assert report.summary(precise, [], "reference.cu", "H100-SXM")["best"]["tied"] == []


@pytest.mark.slow
def test_local_cluster_plans_rounds_over_both_workers(tmp_path: Path, two_worker_cluster: cluster.DaskMeasurer) -> None:
    found = _forecast_recorded_sweep(tmp_path)
    assert two_worker_cluster.width == 2
    learned: list[str] = []
    rounds: list[list[int]] = []
    state = search(
        found,
        two_worker_cluster,
        Budget(measurements=8),
        lambda state, result: rounds.append(result["index"]),
        lambda v, m: learned.append(v.name),
    )
    run = policy.Run.of([v.forecast.probabilities for v in found], [v.text for v in found], [v.request.candidate.language for v in found])
    assert sorted(rounds[:2]) == sorted(policy.pick_next(run, {}, set(), 2))  # the first round, as the policy picks one
    assert 2 <= len(state.outcomes) <= 8 and learned == [found[i].name for i in rounds]
    assert state.stopped.startswith(("budget of 8", "settled"))
    measured = {found[i].name: float(found[i].name.split("_")[1][:-3]) for i in state.outcomes}
    assert state.best is not None and state.best[1].speedup == max(measured.values())
    assert {where.split(" GPU ")[1] for where in state.per_gpu} == {"0", "1"}  # both workers measured
    assert state.gpu_seconds == pytest.approx(0.5 * len(state.outcomes))


@pytest.mark.slow
def test_a_job_whose_worker_dies_is_retried_on_another(tmp_path: Path, two_worker_cluster: cluster.DaskMeasurer) -> None:
    measurer = cluster.DaskMeasurer(two_worker_cluster.client, job_function=dies_on_first_try)
    marker = tmp_path / "first-try"
    results: list[dict] = []
    started = time.monotonic()
    measurer.run([{"index": 0, "marker": str(marker)}], results.append)
    assert marker.exists(), "the first try did not run"
    (result,) = results
    assert result["measured"] and result["where"] != marker.read_text()
    assert time.monotonic() - started < 120


# --- the command ----------------------------------------------------------------------------------


def _sweep(tmp_path: Path, count: int, project: bool = True) -> tuple[Path, Path]:
    """A folder of `count` real variants of the vector add and their reference, in a git project
    (the workspace the reference may lie in) unless not `project`."""
    if project:
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    reference = tmp_path / "reference.cu"
    reference.write_text(rank_variants.REFERENCE.format(args=rank_variants.ARGS.format(n=1 << 20)))
    folder = tmp_path / "variants"
    folder.mkdir()
    for name, code in list(rank_variants.variants(1 << 20).items())[:count]:
        (folder / f"{name}.cu").write_text(code)
    return folder, reference


def test_rank_forecasts_and_ranks_a_folder(tmp_path: Path) -> None:
    folder, reference = _sweep(tmp_path, 6)
    (folder / "same_as_reference.cu").write_text(reference.read_text())
    plots = tmp_path / "plots"
    completed = _rank(
        tmp_path, str(folder), "--reference", str(reference), "--forecast-only", "--no-facts", "--json", "--report", str(plots)
    )
    assert completed.returncode == 0, completed.stderr
    assert sorted(p.name for p in plots.iterdir()) == ["best_vs_measurements.png", "forecast_vs_measured.png"]
    report = json.loads(completed.stdout)
    assert report["ranked"] == 6 and report["measurements"] == 0 and report["best"] is None
    assert report["skipped"] == [{"variant": "same_as_reference.cu", "why": "same code and launch as the reference"}]
    forecasts = [row["forecast"]["speedup"] for row in report["variants"]]
    assert forecasts == sorted(forecasts, reverse=True)
    # The same number `kernelcast forecast` gives for one of them.
    row = report["variants"][0]
    single = subprocess.run(
        [str(KERNELCAST), "forecast", str(folder / row["variant"]), "--reference", str(reference), "--no-facts", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=isolated_env(tmp_path / "home"),
    )
    assert json.loads(single.stdout)["kernels"][0]["forecast"]["speedup"] == pytest.approx(row["forecast"]["speedup"])


def test_a_reference_outside_the_variants_workspace_needs_the_flag_forecast_needs(tmp_path: Path) -> None:
    folder, reference = _sweep(tmp_path, 2, project=False)
    refused = _rank(tmp_path, str(folder), "--reference", str(reference), "--forecast-only", "--no-facts")
    assert refused.returncode != 0
    assert "points outside the workspace" in refused.stdout + refused.stderr
    allowed = _rank(
        tmp_path, str(folder), "--reference", str(reference), "--forecast-only", "--no-facts", "--allow-references-outside-workspace"
    )
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr


def test_rank_reads_a_jsonl_of_variants(tmp_path: Path) -> None:
    lines = [{"name": name, "code": code, "language": "cuda"} for name, code in list(rank_variants.variants(1 << 20).items())[:3]]
    # One gives its launch apart from its code.
    pragma, _, code = lines[0]["code"].partition("\n")
    lines[0].update(code=code, launch=pragma.removeprefix("// kernelcast: launch "))
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)  # the project the reference lies in
    source = tmp_path / "variants.jsonl"
    source.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    reference = tmp_path / "reference.cu"
    reference.write_text(rank_variants.REFERENCE.format(args=rank_variants.ARGS.format(n=1 << 20)))
    completed = _rank(tmp_path, str(source), "--reference", str(reference), "--forecast-only", "--no-facts", "--json")
    assert completed.returncode == 0, completed.stderr
    ranked = json.loads(completed.stdout)["variants"]
    assert sorted(row["variant"] for row in ranked) == sorted(line["name"] for line in lines)
    # With its launch it is forecast as the same kernel in a file with the pragma would be.
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / f"{lines[0]['name']}.cu").write_text(f"// kernelcast: launch {lines[0]['launch']}\n{code}")
    as_file = _rank(tmp_path, str(tmp_path / "folder"), "--reference", str(reference), "--forecast-only", "--no-facts", "--json")
    by_name = {row["variant"]: row["forecast"]["speedup"] for row in ranked}
    assert json.loads(as_file.stdout)["variants"][0]["forecast"]["speedup"] == pytest.approx(by_name[lines[0]["name"]])
    source.write_text('{"name": "a", "code": "x", "language": "fortran"}\n')
    broken = _rank(tmp_path, str(source), "--reference", str(reference), "--forecast-only")
    assert broken.returncode == 2 and "variants.jsonl:1: language must be one of cuda, triton, kernelbench" in broken.stderr


def test_rank_errors_are_clear(tmp_path: Path) -> None:
    folder, reference = _sweep(tmp_path, 2)
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        ((str(empty), "--reference", str(reference)), "no variants: "),
        ((str(tmp_path / "nowhere"), "--reference", str(reference)), "no such file, folder or glob"),
        ((str(folder), "--reference", str(tmp_path / "missing.cu")), "--reference "),
        ((str(folder), "--reference", f"{reference}::nosuchkernel"), "no variants to rank"),
        ((str(folder), "--reference", str(reference), "--budget", "0"), "--budget 0: the budget counts measurements"),
        ((str(folder), "--reference", str(reference), "--gpu", "Z80"), "Z80"),
        ((), "give VARIANTS"),
        (("--replay", str(DATA / "pairs_small.jsonl")), "no group in "),
        (("--replay", str(tmp_path / "none.jsonl")), "cannot read "),
    ]
    for args, expected in cases:
        completed = _rank(tmp_path, *args)
        assert completed.returncode == 2 and expected in completed.stderr, (args, completed.stderr)
        assert "Traceback" not in completed.stderr


def test_an_unreachable_cluster_fails_fast(tmp_path: Path) -> None:
    folder, reference = _sweep(tmp_path, 2)
    started = time.monotonic()
    completed = _rank(tmp_path, str(folder), "--reference", str(reference), "--no-facts", "--cluster", "tcp://127.0.0.1:9", timeout=60)
    assert completed.returncode == 2
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9 within 5 s" in completed.stderr
    assert time.monotonic() - started < 30
    wrong = _rank(tmp_path, str(folder), "--reference", str(reference), "--no-facts", "--cluster", "localhost:8786")
    assert wrong.returncode == 2 and "expected auto or a scheduler address such as tcp://host:8786" in wrong.stderr


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")
def test_without_a_gpu_rank_says_so_and_keeps_the_forecasts(tmp_path: Path) -> None:
    folder, reference = _sweep(tmp_path, 3)
    completed = _rank(tmp_path, str(folder), "--reference", str(reference), "--no-facts")
    assert completed.returncode == 1
    assert "measuring stopped: no NVIDIA GPU here" in completed.stdout and "0 of 3 variants measured" in completed.stdout


@pytest.mark.gpu
def test_rank_on_the_gpu_finds_a_best_and_reports_the_hostile_variant(tmp_path: Path) -> None:
    folder, reference = _sweep(tmp_path, 4)
    (folder / "hostile.cu").write_text(rank_variants.variants(1 << 20)["hostile_illegal_address"])
    report_dir = tmp_path / "report"
    everything = ("--budget", "5", "--settle", "1e-9")
    completed = _rank(
        tmp_path, str(folder), "--reference", str(reference), *everything, "--no-learn", "--json", "--report", str(report_dir)
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert report["best"] is not None and report["measurements"] == 5
    rows = {row["variant"]: row for row in report["variants"]}
    assert rows["hostile.cu"]["status"] == "runtime" and "illegal" in rows["hostile.cu"]["why"].lower()
    assert sum(row["status"] == "measured" for row in rows.values()) == 4
    assert (report_dir / "forecast_vs_measured.png").stat().st_size > 0 and (report_dir / "best_vs_measurements.png").stat().st_size > 0


def test_rank_kernel_may_name_the_function_each_variant_calls(tmp_path: Path) -> None:
    """`--kernel` as TritonBench's and agents' files name a kernel: by the wrapper people call."""
    wrapper = (
        "import triton\nimport triton.language as tl\n\n\n"
        "@triton.jit\ndef {kernel}(x_ptr, n, BLOCK: tl.constexpr):\n"
        "    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * 2, mask=offsets < n)\n\n\n"
        "def double(x):\n    {kernel}[(triton.cdiv(x.numel(), {block}),)](x, x.numel(), BLOCK={block})\n"
    )
    reference = tmp_path / "reference.py"
    reference.write_text(wrapper.format(kernel="_double", block=1024))
    folder = tmp_path / "variants"
    folder.mkdir()
    (folder / "b256.py").write_text(wrapper.format(kernel="_double_256", block=256))
    (folder / "b128.py").write_text(wrapper.format(kernel="_double_128", block=128))
    (folder / "other.py").write_text(wrapper.format(kernel="_double", block=64).replace("def double", "def twice"))
    found = variants.read_variants(str(folder))
    variants.analyse(found, variants.reference_option(f"{reference}::double"), lookup("H100-SXM"), "double", allow_outside_workspace=True)
    by_name = {variant.path.name: variant for variant in found}
    assert {name: v.result.kernel.name for name, v in by_name.items() if v.result} == {"b256.py": "_double_256", "b128.py": "_double_128"}
    assert all(v.result.reference.name == "_double" for v in by_name.values() if v.result)
    assert by_name["other.py"].skipped == "no kernel named 'double', and no function of that name launches one (kernels: _double)"
