"""fla's kernels against its naive PyTorch (workshop/realworld/linear_attention.py), read from the
flash-linear-attention mirror at its pinned commit: the manifest, the generated files, a batch and pairs.
Skipped where the mirror is absent (fetch github:fla-org/flash-linear-attention)."""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from realworld_support import MIRRORS, assembled, built_from_mirrors, carried_imports_resolve, measured, pinned_mirror, refuses_stale

from kernelcast.kernels_runtime.source.launch_spec import PROBLEM_INPUTS_HEADING
from kernelcast.wire import LabelledPair
from workshop.realworld import dataset, library, linear_attention, pack
from workshop.realworld.linear_attention import FLA
from workshop.realworld.manifest import Mirror, load


def fla_mirror() -> Mirror:
    return pinned_mirror(FLA.repo, FLA.commit, "fla/ops/__init__.py")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    fla_mirror()
    return built_from_mirrors(linear_attention.build, tmp_path_factory.mktemp("fla") / "fla_manifest.jsonl.gz")


def test_the_fla_manifest_builds_from_the_pinned_mirror_and_matches_the_committed_one(built: list[dict[str, Any]]) -> None:
    counts = Counter(row["op"] for row in built)
    # Three registry shapes a family; retention's naive [B, H, T, T] scores leave out B4_T4096_H64_D128.
    assert counts == {
        "gla": 6,
        "simple_gla": 6,
        "retention": 4,
        "linear_attn": 6,
        "delta_rule": 6,
        "gated_delta_rule": 6,
        "hgrn": 6,
        "rwkv6": 6,
    }
    assert {(row["language"], row["dtype"], row["check_tolerance"]) for row in built} == {("triton", "bfloat16", "5e-2")}
    # One group a family-shape: its chunked and its recurrent kernel, against the one naive reference.
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in built:
        groups.setdefault(row["problem"], []).append(row)
    assert all(sorted(row["method"] for row in members) == ["chunk", "fused_recurrent"] for members in groups.values())
    assert all(len({row["problem_sha256"] for row in members}) == 1 for members in groups.values())
    assert len({row["problem_sha256"] for row in built}) == len(groups) == 23
    gla = next(row for row in built if row["id"] == "fla:gla/B4_T2048_H16_D128/bfloat16/chunk")
    assert (gla["path"], gla["naive_path"], gla["shape"]) == ("fla/ops/gla/chunk.py", "fla/ops/gla/naive.py", [4, 2048, 16, 128])
    assert gla["sizes"] == {"B": 4, "T": 2048, "H": 16, "D": 128, "dtype": "bf16"}
    mirror = fla_mirror()
    for row in built:
        assert hashlib.sha256(mirror.read(row["path"])).hexdigest() == row["sha256"]
        assert hashlib.sha256(mirror.read(row["naive_path"])).hexdigest() == row["naive_sha256"]
    assert built == load(linear_attention.FLA_MANIFEST), "run `python -m workshop realworld fla-manifest`"
    text = gzip.open(linear_attention.FLA_MANIFEST, "rt").read()
    assert "@triton" not in text and "def " not in text and "import " not in text  # no code, ours or fla's


def imported(tree: ast.Module) -> dict[str, str]:
    """Name → module of the fla imports at a file's top level."""
    return {
        alias.name: node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fla.")
        for alias in node.names
    }


def forward_arguments(tree: ast.Module, name: str) -> list[str]:
    model = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name)
    forward = next(node for node in model.body if isinstance(node, ast.FunctionDef) and node.name == "forward")
    return [argument.arg for argument in forward.args.args[1:]]


def test_every_generated_file_calls_the_named_fla_functions(built: list[dict[str, Any]]) -> None:
    mirror = fla_mirror()
    for row in built:
        reference, candidate = linear_attention.generated(row)
        assert library.sha256_of(reference) == row["problem_sha256"] and library.sha256_of(candidate) == row["candidate_sha256"]
        assert candidate.startswith(reference)
        reference_tree, tree = ast.parse(reference), ast.parse(candidate)
        names = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
        assert names == {"Model", "ModelNew", "get_inputs", "get_init_inputs"}, row["id"]
        model_new = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ModelNew")
        assert [base.id for base in model_new.bases] == ["Model"]  # the same inputs after the same seed
        get_inputs = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "get_inputs")
        returned = [element.id for element in get_inputs.body[-1].value.elts]
        assert forward_arguments(tree, "Model") == forward_arguments(tree, "ModelNew") == returned, row["id"]
        # The reference imports the naive function from the naive file, the candidate adds the kernel from its file.
        naive_imports, imports = imported(reference_tree), imported(tree)
        assert [library.module_path(FLA, module) for module in naive_imports.values()] == [row["naive_path"]]
        kernel = next(name for name in imports if name not in naive_imports)
        assert library.module_path(FLA, imports[kernel]) == row["path"], row["id"]
        for name, module in imports.items():
            defined = {
                node.name for node in ast.parse(mirror.read(library.module_path(FLA, module))).body if isinstance(node, ast.FunctionDef)
            }
            assert name in defined, (row["id"], name)
        assert f"{kernel}(" in ast.unparse(model_new) and "[0]" in ast.unparse(model_new)  # o, not the state


def test_a_call_the_pinned_function_cannot_take_is_refused() -> None:
    source = b"def chunk_gla(q, k, v, g, scale=None, *, cu_seqlens=None):\n    pass\n"
    linear_attention.check_call(source, "chunk_gla(q=q, k=k, v=v, g=g, cu_seqlens=None)")
    linear_attention.check_call(source, "chunk_gla(q, k, v, g)[0].transpose(1, 2)")
    with pytest.raises(KeyError, match="takes no gk"):
        linear_attention.check_call(source, "chunk_gla(q=q, k=k, v=v, gk=g)")
    with pytest.raises(KeyError, match="6 positional"):
        linear_attention.check_call(source, "chunk_gla(q, k, v, g, 1.0, None)")
    with pytest.raises(KeyError, match="no function fused_recurrent_gla"):
        linear_attention.check_call(source, "fused_recurrent_gla(q=q)")


def test_a_package_at_the_repository_root_is_carried_by_its_named_parts() -> None:
    assert (FLA.module, FLA.prefix, library.module_path(FLA, "fla.ops.gla.chunk")) == ("fla", "", "fla/ops/gla/chunk.py")
    assert (library.LIGER.module, library.LIGER.prefix) == ("liger_kernel", "src/")


def test_a_batch_carries_the_needed_parts_of_fla_and_the_checked_files(
    built: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [row for row in built if row["problem"] == "fla/delta_rule/B8_T1024_H8_D64/bfloat16"]
    monkeypatch.setattr(pack, "load", lambda: rows)
    assert pack.pack(tmp_path / "batch", MIRRORS) == 2
    batch = tmp_path / "batch"
    lines = [json.loads(line) for line in (batch / "batch.jsonl").read_text().splitlines()]
    assert {line["check_tolerance"] for line in lines} == {"5e-2"} and {line["problem_sha256"] for line in lines} == {
        rows[0]["problem_sha256"]
    }
    for line in lines:
        for digest in (line["sha256"], line["problem_sha256"]):
            assert hashlib.sha256((batch / "files" / f"{digest}.py").read_bytes()).hexdigest() == digest
    lib = batch / "lib"
    assert sorted(path.name for path in (lib / "fla").iterdir()) == ["__init__.py", "modules", "ops", "utils"]  # no layers, no models
    seen: set[str] = set()
    for line in lines:
        for module in imported(ast.parse((batch / "files" / f"{line['sha256']}.py").read_text())).values():
            carried_imports_resolve(lib, module, seen)
    assert {"fla.ops", "fla.utils", "fla.modules.l2norm", "fla.ops.delta_rule.naive"} <= seen
    refuses_stale(rows[0], "naive_sha256", "naive.py is not the file the library manifest names", tmp_path / "other", monkeypatch)
    refuses_stale(rows[0], "candidate_sha256", "rebuild it \\(fla-manifest\\)", tmp_path / "third", monkeypatch)


def test_a_measured_family_shape_gives_kernel_vs_naive_and_chunk_vs_recurrent_pairs(built: list[dict[str, Any]], tmp_path: Path) -> None:
    group = "fla:gla/B4_T2048_H16_D128/bfloat16"
    lines = [
        measured(f"{group}/chunk", 40.0, 0.5),
        measured(f"{group}/fused_recurrent", 10.0, 2.0),
        measured("fla:hgrn/B8_T1024_H8_D64/bfloat16/chunk", 3.0),
    ]
    records = assembled(built, lines, tmp_path)
    assert {record["method"] for record in records} == {"chunk", "fused_recurrent"}
    found = list(dataset.pairs(records, MIRRORS))
    assert Counter(pair.kind for pair in found) == {"library-vs-naive": 3, "variant": 2}
    by_id = {pair.id: pair for pair in found}
    chunk = by_id[f"{group}/chunk/library-vs-naive"]
    mirror = fla_mirror()
    assert chunk.speedup == 40.0 and chunk.op == "fla/gla" and chunk.source == "fla"
    assert chunk.request.reference.code.startswith(mirror.read("fla/ops/gla/naive.py").decode()) and chunk.request.reference.name == "Model"
    assert (
        chunk.request.candidate.code.startswith(mirror.read("fla/ops/gla/chunk.py").decode())
        and chunk.request.candidate.language == "triton"
    )
    assert "class ModelNew(Model)" in chunk.request.candidate.code and "class Model(" in chunk.request.reference.code
    variant = by_id[f"{group}/chunk/variant/vs/{group}/fused_recurrent"]
    assert variant.speedup == pytest.approx(2.0 / 0.5)  # the recurrent kernel's median over the chunked one's
    assert variant.request.reference.code.startswith(mirror.read("fla/ops/gla/fused_recurrent.py").decode())
    assert PROBLEM_INPUTS_HEADING in variant.request.candidate.code and "def get_inputs" in variant.request.candidate.code
    assert PROBLEM_INPUTS_HEADING not in chunk.request.candidate.code, "against the naive reference: it gives them"
    assert LabelledPair.from_json(json.loads(json.dumps(chunk.to_json()))).kind == "library-vs-naive"
