"""Helion's example kernels against their eager baselines (workshop/realworld/helion_examples.py), read from
the helion mirror at its pinned commit: the manifest, the generated files, a batch and pairs.
Skipped where the mirror is absent (fetch github:pytorch/helion)."""

from __future__ import annotations

import ast
import dataclasses
import gzip
import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from realworld_support import MIRRORS, assembled, built_from_mirrors, carried_imports_resolve, measured, pinned_mirror, refuses_stale

from kernelcast.wire import PAIR_KINDS, LabelledPair
from workshop.realworld import dataset, helion_examples, library, pack
from workshop.realworld.helion_examples import EXAMPLES_PACKAGE, HELION
from workshop.realworld.manifest import INDUCTOR, Mirror, load


def helion_mirror() -> Mirror:
    return pinned_mirror(HELION.repo, HELION.commit, "helion/__init__.py")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    helion_mirror()
    return built_from_mirrors(helion_examples.build, tmp_path_factory.mktemp("helion") / "helion_manifest.jsonl.gz")


def test_the_helion_manifest_builds_from_the_pinned_mirror_and_matches_the_committed_one(built: list[dict[str, Any]]) -> None:
    kernels = Counter(row["op"] for row in built if row["language"] == "triton")
    # One entry a kernel and shape; welford and kl_div keep only the shape of theirs under MAX_ELEMENTS.
    assert kernels == {
        "add": 1,
        "exp": 1,
        "softmax": 2,
        "sum": 2,
        "long_sum": 3,
        "rms_norm": 2,
        "layer_norm": 1,
        "matmul": 1,
        "bmm": 1,
        "broadcast_matmul": 1,
        "embedding": 1,
        "welford": 1,
        "concatenate": 2,
        "swiglu": 2,
        "geglu": 2,
        "kl_div": 1,
    }
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in built:
        groups.setdefault(row["problem"], []).append(row)
    assert len(groups) == len({row["problem_sha256"] for row in built}) == 20
    # Each group: its kernels and one torch.compile entry of the same reference.
    assert all([row["language"] for row in members].count(INDUCTOR) == 1 for members in groups.values())
    assert all(len({row["problem_sha256"] for row in members}) == 1 for members in groups.values())
    rms = next(row for row in built if row["id"] == "helion:rms_norm/M2048_N8192/float16/rms_norm_fwd")
    assert (rms["path"], rms["kernel"], rms["shape"], rms["check_tolerance"]) == (
        "examples/rms_norm.py",
        "rms_norm_fwd",
        [2048, 8192],
        "1e-2",
    )
    assert rms["sizes"] == {"M": 2048, "N": 8192, "dtype": "f16"}
    tolerances = {row["op"]: row["check_tolerance"] for row in built}
    assert (tolerances["add"], tolerances["embedding"], tolerances["sum"]) == ("2e-2", "1e-6", "1e-2")
    mirror = helion_mirror()
    for row in built:
        assert hashlib.sha256(mirror.read(row["path"])).hexdigest() == row["sha256"]
    assert built == load(helion_examples.HELION_MANIFEST), "run `python -m workshop realworld helion-manifest`"
    text = gzip.open(helion_examples.HELION_MANIFEST, "rt").read()
    assert "@helion" not in text and "def " not in text and "import " not in text  # no code, ours or helion's


def top_level_functions(source: bytes) -> set[str]:
    return {node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}


def test_every_generated_file_turns_autotuning_off_and_calls_functions_of_the_pinned_example(built: list[dict[str, Any]]) -> None:
    mirror = helion_mirror()
    # The setting the preamble names is helion's, with `none` among its values, at the pinned commit.
    settings = mirror.read("helion/runtime/settings.py").decode()
    assert '"HELION_AUTOTUNE_EFFORT"' in settings and '("none", "quick", "full")' in settings
    for row in built:
        reference, candidate = helion_examples.generated(row)
        assert library.sha256_of(reference) == row["problem_sha256"] and library.sha256_of(candidate) == row["candidate_sha256"]
        assert candidate.startswith(reference)
        tree = ast.parse(candidate)
        names = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
        if row["language"] == INDUCTOR:
            assert candidate == reference and names == {"Model", "get_inputs", "get_init_inputs"}
            continue
        assert names == {"Model", "ModelNew", "get_inputs", "get_init_inputs"}, row["id"]
        model_new = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ModelNew")
        assert [base.id for base in model_new.bases] == ["Model"] and f"{row['kernel']}(" in ast.unparse(model_new)
        example = mirror.read(row["path"])
        imports = [node for node in tree.body if isinstance(node, ast.ImportFrom) and node.module == f"{EXAMPLES_PACKAGE}.{row['op']}"]
        imported = [alias.name for node in imports for alias in node.names]
        assert imported[-1] == row["kernel"] and row["kernel"] in helion_examples.helion_kernels(example), row["id"]
        assert set(imported) <= top_level_functions(example), row["id"]
        # Autotuning is off before the first line that imports an example (and so helion) runs.
        assert 0 < candidate.index('os.environ["HELION_AUTOTUNE_EFFORT"] = "none"') < candidate.index(f"from {EXAMPLES_PACKAGE}.")


def test_a_kernel_that_is_not_one_or_a_call_it_cannot_take_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    helion_mirror()
    long_sum = next(example for example in helion_examples.EXAMPLES if example.name == "long_sum")
    monkeypatch.setattr(helion_examples, "EXAMPLES", (dataclasses.replace(long_sum, kernels=("baseline_sum",)),))
    with pytest.raises(KeyError, match="examples/long_sum.py: baseline_sum is not a helion kernel"):
        list(helion_examples.entries(MIRRORS))
    monkeypatch.setattr(helion_examples, "EXAMPLES", (dataclasses.replace(long_sum, call="{kernel}(x, 1.0)"),))
    with pytest.raises(KeyError, match="longsum takes no 2 positional arguments"):
        list(helion_examples.entries(MIRRORS))


def test_shapes_whose_largest_input_exceeds_the_limit_are_left_out() -> None:
    by_name = {example.name: example for example in helion_examples.EXAMPLES}
    assert helion_examples.largest_input(by_name["matmul"], {"M": 1024, "K": 1024, "N": 1024}) == 2**20
    assert helion_examples.largest_input(by_name["embedding"], {"B": 256, "T": 32, "num_embeddings": 16, "dim": 64}) == 256 * 32
    assert helion_examples.largest_input(by_name["welford"], {"M": 262144, "N": 1536}) == 262144 * 1536
    assert [shape["N"] for shape in helion_examples.example_shapes(by_name["welford"])] == [1024]


def test_a_batch_carries_helion_and_the_checked_example_files(
    built: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [row for row in built if row["problem"] in {"helion/long_sum/M4_N130000/float32", "helion/softmax/M4096_N2560/float16"}]
    monkeypatch.setattr(pack, "load", lambda: rows)
    assert pack.pack(tmp_path / "batch", MIRRORS) == 7
    batch = tmp_path / "batch"
    lines = [json.loads(line) for line in (batch / "batch.jsonl").read_text().splitlines()]
    assert {line["check_tolerance"] for line in lines} == {"1e-2"}
    for line in lines:
        for digest in (line["sha256"], line["problem_sha256"]):
            assert hashlib.sha256((batch / "files" / f"{digest}.py").read_bytes()).hexdigest() == digest
    lib = batch / "lib"
    assert sorted(path.name for path in (lib / EXAMPLES_PACKAGE).iterdir()) == ["__init__.py", "long_sum.py", "softmax.py"]
    mirror = helion_mirror()
    assert (lib / EXAMPLES_PACKAGE / "softmax.py").read_bytes() == mirror.read("examples/softmax.py")
    seen: set[str] = set()
    for line in lines:
        tree = ast.parse((batch / "files" / f"{line['sha256']}.py").read_text())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(EXAMPLES_PACKAGE):
                carried_imports_resolve(lib, node.module, seen)
    assert {"helion", "helion._testing", "helion.runtime.settings", "helion.language", "helion_examples.long_sum"} <= seen
    refuses_stale(rows[0], "sha256", "is not the file the helion manifest names", tmp_path / "other", monkeypatch)
    refuses_stale(rows[0], "candidate_sha256", "rebuild it \\(helion-manifest\\)", tmp_path / "third", monkeypatch)


def test_a_measured_example_shape_gives_kernel_vs_eager_and_vs_compile_pairs(built: list[dict[str, Any]], tmp_path: Path) -> None:
    group = "helion:softmax/M4096_N2560/float16"
    lines = [
        measured(f"{group}/softmax", 2.0, 0.05),
        measured(f"{group}/softmax_two_pass", 1.5, 0.1),
        measured(f"{group}/compile", 1.25, 0.08),
        measured("helion:rms_norm/M2048_N4096/float16/rms_norm_fwd", 3.0),
    ]
    records = assembled(built, lines, tmp_path)
    assert {record.get("kernel") for record in records} == {"softmax", "softmax_two_pass", "rms_norm_fwd", None}
    found = list(dataset.pairs(records, MIRRORS))
    assert Counter(pair.kind for pair in found) == {"library-vs-eager": 3, "inductor-vs-eager": 1, "library-vs-compile": 2}
    assert {pair.kind for pair in found} <= set(PAIR_KINDS)
    by_id = {pair.id: pair for pair in found}
    kernel = by_id[f"{group}/softmax/library-vs-eager"]
    mirror = helion_mirror()
    assert kernel.speedup == 2.0 and kernel.op == "helion/softmax" and kernel.source == "helion"
    assert (
        kernel.request.candidate.code.startswith(mirror.read("examples/softmax.py").decode())
        and kernel.request.candidate.language == "triton"
    )
    assert (
        "class ModelNew(Model)" in kernel.request.candidate.code
        and kernel.request.reference.code == helion_examples.generated(next(row for row in built if row["id"] == f"{group}/softmax"))[0]
    )
    versus_compile = by_id[f"{group}/softmax_two_pass/library-vs-compile"]
    # Timed in runs where eager took 0.15 and 0.1 ms: S is the kernel's speedup over eager over torch.compile's.
    assert versus_compile.speedup == pytest.approx(1.5 / 1.25)
    rms = by_id["helion:rms_norm/M2048_N4096/float16/rms_norm_fwd/library-vs-eager"]
    assert "rms_norm_pytorch(x, weight, 1e-5)" in rms.request.reference.code and rms.request.reference.name == "Model"
    assert LabelledPair.from_json(json.loads(json.dumps(kernel.to_json()))).kind == "library-vs-eager"
