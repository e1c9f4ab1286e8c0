"""Library operators (workshop/realworld/library.py) read from the FlagGems and Liger-Kernel mirrors
at their pinned commits: the manifest, the generated KernelBench files, batches and pairs.
Skipped where the mirrors are absent (fetch github:FlagOpen/FlagGems and github:linkedin/Liger-Kernel)."""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from realworld_support import assembled, measured, refuses_stale

from kernelcast.wire import LabelledPair
from workshop.realworld import dataset, library, pack
from workshop.realworld.manifest import INDUCTOR, Mirror, load

MIRRORS = Path("/work/.mirror")


def mirror_of(source: library.Library) -> Mirror:
    try:
        mirror = Mirror(MIRRORS, source.repo, source.commit)
        mirror.read(f"{source.package}/ops/__init__.py")
    except (FileNotFoundError, OSError) as error:
        pytest.skip(f"no mirror of {source.repo}: {error}")
    except Exception as error:  # git show fails: the pinned commit is not in the mirror
        pytest.skip(f"the mirror of {source.repo} lacks {source.commit[:12]}: {error}")
    return mirror


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    for source in library.LIBRARIES:
        mirror_of(source)
    out = tmp_path_factory.mktemp("libraries") / "library_manifest.jsonl.gz"
    library.build(MIRRORS, out)
    return load(out)


def test_the_library_manifest_builds_from_the_pinned_mirrors_and_matches_the_committed_one(built: list[dict[str, Any]]) -> None:
    counts = Counter((row["source"], row["language"]) for row in built)
    assert counts == {("flaggems", "triton"): 522, ("flaggems", INDUCTOR): 522, ("liger", "triton"): 56, ("liger", INDUCTOR): 56}
    ops = {source: {row["op"] for row in built if row["source"] == source} for source in ("flaggems", "liger")}
    assert (len(ops["flaggems"]), len(ops["liger"])) == (len(library.FLAGGEMS_OPS), len(library.LIGER_OPS)) == (80, 14)
    dtypes = Counter((row["source"], row["dtype"]) for row in built if row["language"] == "triton")
    assert dtypes == {
        ("flaggems", "float32"): 245,
        ("flaggems", "bfloat16"): 245,
        ("flaggems", "int32"): 15,
        ("flaggems", "bool"): 17,
        ("liger", "bfloat16"): 44,
        ("liger", "float32"): 12,
    }
    # mm takes M, N, K of FlagGems' (batch, M, N, K) shapes: two that differ in batch only are one problem.
    assert sorted(row["shape"] for row in built if row["id"].startswith("flaggems:mm/") and row["language"] == "triton") == [
        [384, 384, 384],
        [384, 384, 384],
        [1024, 1024, 1024],
        [1024, 1024, 1024],
        [2048, 2048, 2048],
        [2048, 2048, 2048],
        [4096, 4096, 4096],
        [4096, 4096, 4096],
    ]
    # One group (operator-shape-dtype) per library kernel, shared with its torch.compile entry.
    groups = Counter(row["problem"] for row in built)
    assert set(groups.values()) == {2} and len({row["problem_sha256"] for row in built}) == len(groups)
    files = {row["path"]: row["sha256"] for row in built}
    assert files["src/flag_gems/ops/add.py"] == "e131a7c4a086d997fd78f861ff2b9c6a48696b3e4e4c1afbfe3f9fc4aa077081"
    assert files["src/liger_kernel/ops/rms_norm.py"] == "869f58a0e85a18bcb71b9e1827565b4ff43c70231dd2522287ff3c3a6550655b"
    add = next(row for row in built if row["id"] == "flaggems:add/4096x4096/bfloat16")
    assert (add["shape"], add["sizes"]) == ([4096, 4096], {"dim0": 4096, "dim1": 4096, "dtype": "bf16"})
    # Shapes over 2^28 elements are left out: FlagGems' 1024x1024x1024 pointwise shape is not here.
    assert not any(row["shape"] == [1024, 1024, 1024] for row in built if row["op"] == "abs")
    assert built == load(library.LIBRARY_MANIFEST), "run `python -m workshop realworld library-manifest`"
    text = gzip.open(library.LIBRARY_MANIFEST, "rt").read()
    assert "@triton" not in text and "def " not in text and "import " not in text  # no code, ours or the libraries'


def test_every_generated_file_is_a_kernelbench_pair_that_imports_the_named_library_file(built: list[dict[str, Any]]) -> None:
    mirrors = {source.name: mirror_of(source) for source in library.LIBRARIES}
    for row in built:
        reference, candidate = library.generated(row, mirrors[row["source"]])
        assert hashlib.sha256(reference.encode()).hexdigest() == row["problem_sha256"]
        assert hashlib.sha256(candidate.encode()).hexdigest() == row["candidate_sha256"]
        tree = ast.parse(candidate)
        names = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
        if row["language"] == INDUCTOR:
            assert names == {"Model", "get_inputs", "get_init_inputs"}, row["id"]
            continue
        assert names == {"Model", "ModelNew", "get_inputs", "get_init_inputs"}, row["id"]
        model_new = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ModelNew")
        assert [base.id for base in model_new.bases] == ["Model"]  # the same parameters after the same seed
        imported = next(node for node in tree.body if isinstance(node, ast.ImportFrom))
        source = library.by_name(row["source"])
        assert library.module_path(source, imported.module) == row["path"], row["id"]
        assert candidate.startswith(reference)


def test_flaggems_shapes_name_their_dims_and_leave_out_the_largest() -> None:
    core = {
        "BlasBenchmark": {"shapes": [[2, 384, 384, 384], [16, 4096, 4096, 4096], [32, 4096, 4096, 4096]]},
        "X": {"shapes": [[64, 64], [2**29]]},
    }
    assert library.flaggems_shapes(core, "BlasBenchmark") == [
        {"batch": 2, "M": 384, "N": 384, "K": 384},
        {"batch": 16, "M": 4096, "N": 4096, "K": 4096},
    ]
    assert library.flaggems_shapes(core, "X") == [{"dim0": 64, "dim1": 64}]


def chosen(built: list[dict[str, Any]], *ids: str) -> list[dict[str, Any]]:
    rows = {row["id"]: row for row in built}
    return [rows[entry_id] for entry_id in ids]


def test_a_batch_carries_the_library_package_and_the_checked_files_and_refuses_a_mismatch(
    built: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = chosen(
        built,
        "flaggems:add/4096x4096/bfloat16",
        "flaggems:add/4096x4096/bfloat16/compile",
        "liger:rms_norm/1024x4096/bfloat16",
        "flaggems:add/4096x4096/float32",
    )
    monkeypatch.setattr(pack, "load", lambda: rows)
    assert pack.pack(tmp_path / "batch", MIRRORS) == 4
    batch = tmp_path / "batch"
    lines = {line["id"]: line for line in map(json.loads, (batch / "batch.jsonl").read_text().splitlines())}
    # bf16 outputs are checked two bf16 ulps wide, fp32 ones by KernelBench's rule; the runner reads the line.
    assert [lines[row["id"]]["check_tolerance"] for row in rows] == ["2e-2", "2e-2", "2e-2", "auto"]
    for row in rows:
        line = lines[row["id"]]
        assert line["problem_sha256"] == row["problem_sha256"] and line["sha256"] == row["candidate_sha256"]
        for digest in (line["sha256"], line["problem_sha256"]):
            assert hashlib.sha256((batch / "files" / f"{digest}.py").read_bytes()).hexdigest() == digest
    assert lines["flaggems:add/4096x4096/bfloat16/compile"]["sha256"] == rows[0]["problem_sha256"]  # the runner compiles the reference
    assert hashlib.sha256((batch / "lib/flag_gems/ops/add.py").read_bytes()).hexdigest() == rows[0]["sha256"]
    assert (batch / "lib/flag_gems/__init__.py").is_file() and (batch / "lib/liger_kernel/ops/rms_norm.py").is_file()
    # A manifest whose library file does not hash as the mirror's is refused, and so is a stale template.
    refuses_stale(rows[0], "sha256", "is not the file the library manifest names", tmp_path / "other", monkeypatch)
    refuses_stale(rows[0], "candidate_sha256", "the generated file differs", tmp_path / "third", monkeypatch)


def test_a_measured_library_kernel_gives_pairs_with_the_librarys_source_as_candidate(built: list[dict[str, Any]], tmp_path: Path) -> None:
    lines = [measured("liger:rms_norm/1024x4096/bfloat16", 2.0, 0.05), measured("liger:rms_norm/1024x4096/bfloat16/compile", 1.6, 0.0625)]
    records = assembled(built, lines, tmp_path)
    assert {record["op"] for record in records} == {"rms_norm"} and records[0]["problem"] == "liger/rms_norm/1024x4096/bfloat16"
    found = {pair.kind: pair for pair in dataset.pairs(records, MIRRORS)}
    assert sorted(found) == ["inductor-vs-eager", "library-vs-compile", "library-vs-eager"]
    library_file = mirror_of(library.LIGER).read("src/liger_kernel/ops/rms_norm.py").decode()
    eager = found["library-vs-eager"]
    assert eager.speedup == 2.0 and eager.source == "liger" and eager.op == "liger/rms_norm"
    assert eager.request.candidate.language == "triton" and eager.request.candidate.code.startswith(library_file)
    assert "class ModelNew(Model)" in eager.request.candidate.code and "class Model(" in eager.request.reference.code
    against_compile = found["library-vs-compile"]
    assert against_compile.speedup == pytest.approx(0.0625 / 0.05)
    assert "torch.compile" in against_compile.request.reference.code
    assert LabelledPair.from_json(json.loads(json.dumps(against_compile.to_json()))).kind == "library-vs-compile"
    assert dataset.stats(records)["sources"]["liger"]["tried"] == 2


def test_a_flaggems_candidate_turns_the_launch_cache_to_the_3_5_path_on_newer_triton(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flag_gems.utils re-exports the libentry decorator under its module's name: the preamble must
    reach the module, or every cached launch on Triton 3.6 passes too few arguments."""
    utils = tmp_path / "flag_gems" / "utils"
    utils.mkdir(parents=True)
    (tmp_path / "flag_gems" / "__init__.py").write_text("")
    (utils / "__init__.py").write_text("from flag_gems.utils.libentry import libentry\n")
    (utils / "libentry.py").write_text("major_version, minor_version = 3, 6\n\ndef libentry():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for version, expected in (("3.6.0", (3, 5)), ("3.4.0", (3, 6))):
        for name in [name for name in sys.modules if name.startswith("flag_gems")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setitem(sys.modules, "triton", types.SimpleNamespace(__version__=version))
        exec(library.FLAGGEMS.preamble, {})
        module = sys.modules["flag_gems.utils.libentry"]
        assert (module.major_version, module.minor_version) == expected, version
    assert library.LIGER.preamble == ""
