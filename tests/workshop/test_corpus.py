"""The corpus on CPU: the generator is deterministic and its kernels compile; pairs validate."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from kernelcast.kernels_runtime import timing
from kernelcast.kernels_runtime.source.access_pattern import ACCESS_NAMES, access_summary
from kernelcast.wire import bin_of_speedup, read_pairs, write_pairs
from workshop.corpus import dataset
from workshop.corpus.generate import describe, describe_reference, entries, record_key, reference_id
from workshop.corpus.ops import all_ops
from workshop.corpus.ops.activation import _cuda_code
from workshop.corpus.pair_builder import build_pairs
from workshop.corpus.runner import compile_failures, compile_variant, median_intervals, one_per_operation
from workshop.corpus.stats import corpus_stats, reproducibility


def test_generator_is_deterministic_and_ids_are_unique() -> None:
    first, second = entries(), entries()
    assert [entry.id for entry in first] == [entry.id for entry in second]
    assert len({entry.id for entry in first}) == len(first)
    assert [entry.variant.code for entry in first] == [entry.variant.code for entry in second]


def test_every_operation_has_three_sizes_and_runnable_variants() -> None:
    for op in all_ops():
        assert len(op.sizes) >= 3, op.name
        runnable = [entry for entry in entries([op.name]) if entry.problems()]
        assert runnable, f"{op.name}: no variant runs any of its sizes"
        for entry in runnable:
            for sizes in entry.problems():
                launches = entry.launches(sizes)
                assert launches, entry.id
                for launch in launches:
                    assert all(extent >= 1 for extent in launch.grid), (entry.id, launch)
                    assert launch.grid[0] < 2**31 and launch.grid[1] < 65536 and launch.grid[2] < 65536, (entry.id, launch)


def test_every_tenth_operation_compiles_for_the_h100() -> None:
    """nvcc/NVRTC for CUDA and Triton's offline compile, the way the editor takes facts: a tenth
    of the operations here (9 compiles, languages alternating);
    `python -m workshop corpus compile-check` compiles every one."""
    pytest.importorskip("triton")
    sample = one_per_operation(every=10)
    assert len(sample) == (len(all_ops()) + 9) // 10
    failures = compile_failures(sample)
    assert not failures, "\n".join(failures)


def _synthetic_records() -> list[dict]:
    """Records as `assemble` writes them, with made-up runtimes: t grows with the block size."""
    records = []
    f32 = [entry for entry in entries(["gelu"]) if entry.variant.params.get("dtype") == "f32"]
    gelu = [entry for entry in f32 if entry.variant.family == "cuda-scalar"][:8] + [
        entry for entry in f32 if entry.variant.family != "cuda-scalar"
    ][:4]
    sizes = gelu[0].problems()[0]
    for index, entry in enumerate(gelu):
        median = 0.01 * (1 + index % 5)
        records.append(
            {
                "id": f"{entry.id}@x",
                "kernel_id": entry.id,
                **describe(entry, sizes),
                "gpu": {"gpu_name": "test"},
                "correct": index != 3,
                "failure": None if index != 3 else {"kind": "wrong", "message": "x"},
                "runtime": {"median_ms": median, "p20_ms": median, "p80_ms": median, "n": 10, "ci95_ms": [median * 0.99, median * 1.01]}
                if index != 3
                else None,
                "facts": None,
            }
        )
    op = gelu[0].op
    records.append(
        {
            "id": f"{reference_id(op.name)}@x",
            "kernel_id": reference_id(op.name),
            **describe_reference(op, sizes),
            "gpu": {"gpu_name": "test"},
            "correct": True,
            "failure": None,
            "runtime": {"median_ms": 0.02, "p20_ms": 0.02, "p80_ms": 0.02, "n": 10, "ci95_ms": [0.0198, 0.0202]},
            "facts": None,
        }
    )
    for record in records:
        dataset.validate_record(record)
    return records


def test_launches_carry_the_bytes_of_the_arrays_they_name() -> None:
    """As an editor's launch pragma does: the same kernel at half precision moves half the bytes."""
    triton = next(entry for entry in entries(["rmsnorm"]) if entry.variant.language == "triton")
    wide, narrow = ({**triton.op.sizes[3], "dtype": dtype} for dtype in ("f32", "f16"))
    (launch,) = describe(triton, wide)["launches"]
    arrays = {**triton.op.inputs(wide), **triton.op.outputs(wide)}
    assert launch["bytes"] == sum(arrays[arg].nbytes() for arg in launch["args"] if isinstance(arg, str)) > 0
    assert launch["output_bytes"] == sum(array.nbytes() for array in triton.op.outputs(wide).values()) > 0
    assert describe(triton, narrow)["launches"][0]["bytes"] * 2 == pytest.approx(launch["bytes"], rel=0.01)


def test_pairs_validate_and_carry_the_measured_speedup(tmp_path: Path) -> None:
    records = _synthetic_records()
    by_id = {record["id"]: record for record in records}
    path = tmp_path / "pairs.jsonl"
    written = write_pairs(path, build_pairs(records))
    pairs = list(read_pairs(path))  # validates every line against the schema
    assert len(pairs) == written > 0
    assert {pair.kind for pair in pairs} == {"edit", "cross", "reference"}
    for pair in pairs:
        reference_id_, candidate_id = pair.id.split(":", 1)[1].split("|")
        reference, candidate = by_id[reference_id_], by_id[candidate_id]
        assert reference["correct"] and candidate["correct"]
        assert math.isclose(pair.speedup, reference["runtime"]["median_ms"] / candidate["runtime"]["median_ms"])
        assert pair.true_bin == bin_of_speedup(pair.speedup)
        assert pair.ci95[0] < pair.speedup < pair.ci95[1]
        if pair.kind == "edit":
            differing = [k for k in reference["params"] if reference["params"][k] != candidate["params"][k]]
            assert differing == [pair.extra["axis"]]
        if pair.kind == "reference":
            assert pair.request.reference.language == "pytorch"
        if pair.request.candidate.language != "pytorch":
            assert pair.request.candidate.facts["launches"] == candidate["launches"]
    # Unordered pairs appear once, and directions are mixed.
    assert len({frozenset(pair.id.split(":", 1)[1].split("|")) for pair in pairs}) == len(pairs)
    edits = [pair for pair in pairs if pair.kind == "edit"]
    assert any(pair.speedup > 1 for pair in edits) and any(pair.speedup < 1 for pair in edits)


def test_a_bad_record_is_refused_with_its_line(tmp_path: Path) -> None:
    record = _synthetic_records()[0]
    broken = {**record, "runtime": None}
    path = tmp_path / "bad.jsonl.gz"
    with gzip.open(path, "wt") as stream:
        stream.write(json.dumps(record) + "\n" + json.dumps(broken) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl.gz:2: .*runtime.median_ms"):
        dataset.load(path)


def test_stats_and_reproducibility_count_what_they_say() -> None:
    records = _synthetic_records()
    stats = corpus_stats(records, build_pairs(records))
    assert stats["kernels"] == 12 and stats["correct"] == 11 and stats["failed_by_kind"] == {"wrong": 1}
    assert stats["pytorch_references"] == 1 and stats["operations"] == 1
    assert sum(stats["pairs_per_bin"]["reference"]) == 11
    correct = [record for record in records if record["correct"]]
    again = [
        {"key": record["id"], "correct": True, "runtime": {"median_ms": record["runtime"]["median_ms"] * factor}}
        for record, factor in zip(correct, [1.0, 1.005, 1.02, 0.9] + [1.0] * 20)
    ]
    figure = reproducibility(records, again)
    assert figure["compared"] == len(correct)
    assert figure["inside_ci"] == len(correct) - 2  # 1.02 and 0.9 fall outside ±1%


def test_the_reported_interval_adds_run_to_run_drift_to_what_the_rounds_say() -> None:
    steady = median_intervals([0.1, 0.1, 0.1])  # rounds agree: only the drift is left
    drift = 1.96 * math.hypot(timing.RUN_TO_RUN_REL_SD, timing.RUN_TO_RUN_JITTER_MS / 0.1)
    assert steady["ci95_within_run_ms"] == pytest.approx([0.1, 0.1])
    assert steady["ci95_ms"] == pytest.approx([0.1 * math.exp(-drift), 0.1 * math.exp(drift)])
    noisy = median_intervals([0.001, 0.0011, 0.00105])
    low, high = noisy["ci95_ms"]
    within_low, within_high = noisy["ci95_within_run_ms"]
    assert low < within_low < within_high < high
    # a 1 µs kernel: the 0.24 µs jitter dominates the relative drift
    assert math.log(high / low) / 2 > 1.96 * timing.RUN_TO_RUN_JITTER_MS / 0.00105 * 0.99
    assert median_intervals([0.1])["ci95_ms"] is None


def test_shipped_dataset_meets_the_issue_counts() -> None:
    if not dataset.DEFAULT_DATASET.exists():
        pytest.skip("no measured corpus shipped yet (models/corpus/data/h100.jsonl.gz)")
    records = dataset.load()
    stats = corpus_stats(records, build_pairs(records, ["edit"]))
    assert stats["correct"] >= 5000
    assert stats["operations"] >= 25
    assert set(stats["languages"]) >= {"cuda", "triton"}
    assert min(stats["sizes_per_op"].values()) >= 3
    assert all(count > 0 for count in stats["pairs_per_bin"]["edit"]), stats["pairs_per_bin"]["edit"]


def test_a_dataset_written_back_as_a_run_assembles_to_the_same_file(tmp_path: Path) -> None:
    records = _synthetic_records()
    for record in records:
        record.update({"clocks": None, "seeds": None})
    original = tmp_path / "original.jsonl.gz"
    with gzip.open(original, "wt", encoding="utf-8") as stream:
        for record in sorted(records, key=lambda r: r["id"]):
            stream.write(json.dumps(record, sort_keys=True) + "\n")
    assert dataset.to_run(original, tmp_path / "run") == len(records)
    counts = dataset.assemble([tmp_path / "run"], tmp_path / "again.jsonl.gz")
    assert counts["records"] == len(records)
    assert dataset.load(tmp_path / "again.jsonl.gz") == dataset.load(original)
    with pytest.raises(FileExistsError, match="already holds measurements"):
        dataset.to_run(original, tmp_path / "run")  # never overwrites measurements


def test_each_record_keeps_the_facts_of_its_own_launch(tmp_path: Path) -> None:
    """A kernel measured at two sizes may compile two ways (BLOCK_N = n): neither record takes the other's facts."""
    records = [record for record in _synthetic_records() if record["correct"]][:2]
    wide = {**records[0], "id": records[0]["kernel_id"] + "@n=2048", "facts": {"k": {"registers": 158}}}
    narrow = {**records[0], "id": records[0]["kernel_id"] + "@n=64", "facts": {"k": {"registers": 19}}}
    original = tmp_path / "original.jsonl.gz"
    with gzip.open(original, "wt", encoding="utf-8") as stream:
        for record in sorted([wide, narrow, records[1]], key=lambda r: r["id"]):
            stream.write(json.dumps(record, sort_keys=True) + "\n")
    dataset.to_run(original, tmp_path / "run")
    dataset.assemble([tmp_path / "run"], tmp_path / "again.jsonl.gz")
    facts = {record["id"]: record["facts"] for record in dataset.load(tmp_path / "again.jsonl.gz")}
    assert facts[wide["id"]] == {"k": {"registers": 158}}
    assert facts[narrow["id"]] == {"k": {"registers": 19}}
    assert facts[records[1]["id"]] is None


@pytest.mark.gpu
def test_a_triton_block_that_follows_the_size_is_compiled_at_every_size() -> None:
    """The corpus once took one size's facts for all: a 2048-wide sort's registers for a 64-wide one."""
    entry = next(
        entry for entry in entries(["row_sort"]) if entry.variant.language == "triton" and entry.variant.params.get("num_warps") == 1
    )
    narrow, wide = entry.problems()[0], entry.problems()[-1]
    assert entry.launches(narrow)[0].constexprs != entry.launches(wide)[0].constexprs
    compiled = compile_variant(entry.id)
    assert compiled["error"] is None
    assert set(compiled["facts"]) == {record_key(entry.id, sizes) for sizes in entry.problems()}
    registers = {sizes["n"]: compiled["facts"][record_key(entry.id, sizes)]["row_sort"]["registers"] for sizes in (narrow, wide)}
    assert registers[narrow["n"]] < registers[wide["n"]], registers


def _summary(code: str) -> dict[str, float]:
    return dict(zip(ACCESS_NAMES, access_summary(code, "cuda", ())))


def test_corpus_gelu_generator_strided_axis_changes_the_summary() -> None:
    for dtype in ("f32", "f16"):
        plain = _summary(_cuda_code(dtype, per_thread=4, stride_loop=True, strided=False))
        strided = _summary(_cuda_code(dtype, per_thread=4, stride_loop=True, strided=True))
        assert (plain["global_uncoalesced_share"], strided["global_uncoalesced_share"]) == (0.0, 1.0)
