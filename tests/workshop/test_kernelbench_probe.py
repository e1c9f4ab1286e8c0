"""The probe of the KernelBench trees: each pair forecast by trees that never saw its source, or its problem."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.models.embedded.features import FEATURE_NAMES, SIDE_NAMES
from kernelcast.models.embedded.pair_kinds import AGAINST_PROBLEM, BETWEEN_SOLUTIONS, LIBRARY_CALL
from kernelcast.models.service.calibrated import Forecaster
from kernelcast.wire import ForecastRequest, KernelSide, LabelledPair
from workshop.training import kernelbench_prior, kernelbench_probe
from workshop.training.boosting import TreeSettings
from workshop.training.kernelbench_prior import Measured, out_of_source_centres
from workshop.training.kernelbench_probe import direction_table, out_of_fold_centres

COLUMN = SIDE_NAMES.index("compute_log2_us")


@pytest.fixture(autouse=True)
def small_trees(monkeypatch: pytest.MonkeyPatch) -> None:
    """One small forest a fit: the probe's logic, not the shipped trees' size, is under test."""
    monkeypatch.setattr(kernelbench_prior, "TREE_SETTINGS", TreeSettings(rounds=150, leaves=7, min_pairs_in_leaf=5, threads=1))
    monkeypatch.setattr(kernelbench_prior, "TREE_SEEDS", 1)


def _sources(rule: dict[str, float], per_source: int = 60) -> Measured:
    """Pairs of each source in `rule` whose measured log2 S is that factor times how much less the
    candidate computes (one feature; the rest alike), two problems a source."""
    rng = np.random.default_rng(7)
    pairs, features = [], []
    for source, factor in rule.items():
        for n in range(per_source):
            sides = np.zeros((2, len(FEATURE_NAMES)))
            sides[:, COLUMN] = rng.normal(size=2)
            pairs.append(
                SimpleNamespace(source=source, op=f"{source}/{n % 2}", log2_speedup=factor * (sides[0, COLUMN] - sides[1, COLUMN]))
            )
            features.append(sides)
    kinds = [AGAINST_PROBLEM if n % 3 else BETWEEN_SOLUTIONS for n in range(len(pairs))]
    return Measured(pairs, np.array(features), np.zeros(len(pairs)), np.ones(len(pairs)), kinds)  # type: ignore[arg-type]


def _rows(table: str) -> dict[str, list[str]]:
    return {line[:48].strip(): line[48:].split() for line in table.splitlines() if line.strip()}


def test_each_source_is_forecast_by_trees_that_never_saw_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # a, b, c and e are faster the less they compute; d the other way round: trees that never saw d read
    # it wrong. A pair measured within 0.1 octave of even is not counted.
    data = _sources({"a": 2.0, "b": 2.0, "c": 2.0, "e": 2.0, "d": -2.0})
    data.pairs[0].log2_speedup = 0.05
    counted = [i for i, pair in enumerate(data.pairs) if abs(pair.log2_speedup) >= 0.1]
    columns = {
        "source": out_of_source_centres(data, range(len(data.pairs)), {"a", "b", "c", "d", "e"})[0],
        "problems": out_of_fold_centres(data, 2),
    }
    monkeypatch.setattr(kernelbench_probe, "KIND_ROW_PAIRS", 10)
    rows = _rows(direction_table(data, columns))
    for source in "abcde":
        assert int(rows[source][0]) == sum(data.pairs[i].source == source for i in counted)
    assert int(rows["a"][0]) < 60
    for source in "abce":
        assert float(rows[source][1]) > 0.7, rows[source]
    assert float(rows["d"][1]) < 0.2, rows["d"]
    assert float(rows["mean of 5 sources"][0]) == pytest.approx(np.mean([float(rows[source][1]) for source in "abcde"]), abs=0.001)
    # By kind: each source's pairs against the problem and between solutions.
    assert int(rows[f"a {AGAINST_PROBLEM}"][0]) + int(rows[f"a {BETWEEN_SOLUTIONS}"][0]) == int(rows["a"][0])
    assert int(rows[f"a {BETWEEN_SOLUTIONS}"][0]) == sum(
        data.kinds[i] == BETWEEN_SOLUTIONS and data.pairs[i].source == "a" for i in counted
    )


def test_a_pair_is_forecast_by_trees_grown_without_its_problem() -> None:
    # Problem d/0 is measured the other way round from every other problem: trees that saw it would
    # fit it, trees grown without it forecast it as the others, so wrong.
    data = _sources({"a": 2.0, "b": 2.0, "c": 2.0, "d": 2.0})
    for pair in data.pairs:
        if pair.op == "d/0":
            pair.log2_speedup = -pair.log2_speedup
    centres = out_of_fold_centres(data, 8)
    own = [i for i, pair in enumerate(data.pairs) if pair.op == "d/0"]
    assert np.mean([(centres[i] > 0) == (data.pairs[i].log2_speedup > 0) for i in own]) < 0.2
    others = [i for i, pair in enumerate(data.pairs) if pair.source == "a"]
    assert np.mean([(centres[i] > 0) == (data.pairs[i].log2_speedup > 0) for i in others]) > 0.8


def test_the_second_mean_counts_only_pairs_whose_line_reads_the_trees() -> None:
    # Source a: its solutions read right, its library calls wrong; source lib: library calls only, all
    # wrong. The shipped forecast of a library call reads the weights, so only a's solutions count there.
    data = _sources({"a": 2.0, "lib": 2.0})
    data.kinds[:] = [AGAINST_PROBLEM if pair.source == "a" and n % 2 else LIBRARY_CALL for n, pair in enumerate(data.pairs)]
    right = {i: pair.log2_speedup if data.kinds[i] == AGAINST_PROBLEM else -pair.log2_speedup for i, pair in enumerate(data.pairs)}
    rows = _rows(direction_table(data, {"source": right}))
    assert float(rows["mean of 2 sources"][0]) < 0.3
    assert float(rows["mean of 1, pairs whose line reads the trees"][0]) == 1.0


def test_other_seeds_grow_other_bags_of_the_same_pairs() -> None:
    data = _sources({"a": 2.0, "b": 2.0, "c": 1.0})
    sources = {"a", "b", "c"}
    first, again = (out_of_source_centres(data, range(len(data.pairs)), sources)[0] for _ in range(2))
    other = out_of_source_centres(data, range(len(data.pairs)), sources, first_seed=3)[0]
    assert first == again
    assert first.keys() == other.keys() and first != other
    assert np.corrcoef([first[i] for i in first], [other[i] for i in first])[0, 1] > 0.9


PROBLEM = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, a, b):\n        return torch.matmul(a, b)\n"
FUSED = PROBLEM.replace("torch.matmul(a, b)", "torch.relu(torch.matmul(a, b)) + torch.empty_like(a)")


def test_a_kept_read_is_reused_while_the_pairs_and_the_code_that_read_them_are_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []

    def counted(pairs: list[LabelledPair], forecaster: Forecaster) -> Measured:
        reads.append(len(pairs))
        return kernelbench_prior.measured(pairs, forecaster)

    monkeypatch.setattr(kernelbench_probe, "measured", counted)
    hardware = {**SPECS["H100-SXM"].to_json(), "fingerprint": SPECS["H100-SXM"].fingerprint()}
    pairs = [
        LabelledPair(
            f"s:{n}",
            "llm-vs-eager",
            ForecastRequest(KernelSide(PROBLEM, "pytorch", "Model"), KernelSide(code, "pytorch", "Model"), hardware),
            speedup,
            source="s",
        )
        for n, (code, speedup) in enumerate([(FUSED, 0.8), (PROBLEM, 1.0)])
    ]
    saved = tmp_path / "reads" / "rw.read"  # its folder is made
    first = kernelbench_probe.read(pairs, saved)
    again = kernelbench_probe.read(pairs, saved)
    assert reads == [2] and saved.exists()
    for name in ("features", "mean", "sd", "tokens"):
        np.testing.assert_array_equal(getattr(again, name), getattr(first, name))
    assert again.kinds == first.kinds and again.vocabulary == first.vocabulary and again.pairs is pairs
    # Other pairs, or a read that counts other tokens, are read again and the file keeps the new read.
    kernelbench_probe.read(pairs[:1], saved)
    kernelbench_probe.read(pairs[:1], saved)
    assert reads == [2, 1]
    monkeypatch.setattr(kernelbench_prior, "VOCABULARY_SIZE", 1)
    assert len(kernelbench_probe.read(pairs[:1], saved).vocabulary) == 1
    assert reads == [2, 1, 1]
    # Facts from other compilers are read again too.
    monkeypatch.setattr(kernelbench_probe, "toolchain", lambda: {"triton": "another"})
    kernelbench_probe.read(pairs[:1], saved)
    assert reads == [2, 1, 1, 1]
    # A pair rebuilt with other code keeps its id: its read is stale all the same.
    rebuilt = dataclasses.replace(
        pairs[0], request=dataclasses.replace(pairs[0].request, candidate=KernelSide(PROBLEM, "pytorch", "Model"))
    )
    kernelbench_probe.read([rebuilt], saved)
    assert reads == [2, 1, 1, 1, 1]


@pytest.mark.parametrize("kind", ["text", "npz"])
def test_a_file_that_is_not_a_kept_read_is_named_and_left_as_it_is(tmp_path: Path, kind: str) -> None:
    saved = tmp_path / "pairs.jsonl"
    if kind == "text":
        saved.write_text('{"id": "s:0"}\n')
    else:
        with open(saved, "wb") as stream:
            np.savez(stream, roots=np.arange(3))
    before = saved.read_bytes()
    with pytest.raises(SystemExit, match="is not a read this probe kept"):
        kernelbench_probe.read([], saved)
    assert saved.read_bytes() == before
