"""TritonBench (workshop/realworld/tritonbench.py) read from the thunlp/TritonBench mirror at its pinned
commit: the manifest, the generated KernelBench files, batches and pairs. Skipped where the mirror is
absent (fetch github:thunlp/TritonBench)."""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from realworld_support import MIRRORS, measured, pinned_mirror

from kernelcast.models.embedded.pair_kinds import AGAINST_PROBLEM, BETWEEN_SOLUTIONS, pair_kind
from kernelcast.wire import LabelledPair
from workshop.realworld import dataset, library, pack, tritonbench
from workshop.realworld.manifest import Mirror, load

ADD = "tritonbench:G/add_example/i=20/"
SUB_GELU = "tritonbench:T/sub_gelu/i=19/"


def the_mirror() -> Mirror:
    return pinned_mirror(tritonbench.REPO, tritonbench.COMMIT, "performance_metrics/perf_G/performance_utils.py")


# Every SAMPLE-th committed entry is generated again here; `python -m workshop realworld
# tritonbench-manifest --check` builds the whole manifest afresh (80 s) and compares.
SAMPLE = 50


@pytest.fixture(scope="module")
def built() -> list[dict[str, Any]]:
    the_mirror()
    return load(tritonbench.TRITONBENCH_MANIFEST)


def first(built: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    return next(row for row in built if row["id"].startswith(prefix))


def test_the_committed_manifest_names_the_pinned_mirrors_files(built: list[dict[str, Any]]) -> None:
    assert len(built) == 21108 and Counter(row["track"] for row in built) == {"G": 12417, "T": 8691}
    assert len({(row["track"], row["op"]) for row in built}) == 344 and len({(row["op"], row["sha256"]) for row in built}) == 7036
    assert max(row["sizes"]["elements"] for row in built) <= library.MAX_ELEMENTS
    # add_example sweeps i over 12..27 (2^i elements): its smallest, middle and largest value.
    assert sorted({(row["sizes"]["i"], row["sizes"]["elements"]) for row in built if row["op"] == "add_example"}) == [
        (12, 4096),
        (20, 2**20),
        (27, 2**27),
    ]
    sub_gelu = first(built, SUB_GELU)
    assert sub_gelu["files"]["data/TritonBench_T_v1/sub_gelu.py"] == "068c54d85b61e6ad2e1775d698286356ca18b0483d39f8a999e11a1abf2bcb8d"
    assert sub_gelu["files"]["performance_metrics/perf_T/performance_utils.py"] == (
        "71a165b6cfb26a5a6d9d07b420bb2f2b23288a70891f862ca7de25b1e968dd77"
    )
    mirror = the_mirror()
    for row in (sub_gelu, first(built, ADD)):
        for path, digest in row["files"].items():
            assert hashlib.sha256(mirror.read(path)).hexdigest() == digest
        candidate = next(r for r in tritonbench.rows_of(mirror, row["path"]) if r.row == row["row"])
        assert hashlib.sha256(candidate.code.encode()).hexdigest() == row["sha256"]
    # One entry per candidate text, kernel and size: a repeated text is one entry naming its other rows.
    assert sum(len(row["same_as"]) for row in built if row["id"].split("/")[2] == "i=12") > 0
    assert len({(row["problem"], row["sha256"]) for row in built}) == len(built)
    text = gzip.open(tritonbench.TRITONBENCH_MANIFEST, "rt").read()
    assert "@triton" not in text and "def " not in text and "import " not in text  # no code, ours or TritonBench's


def test_generated_files_are_kernelbench_pairs_importing_the_named_texts(built: list[dict[str, Any]]) -> None:
    mirror = the_mirror()
    for row in built[::SAMPLE]:
        reference, candidate = tritonbench.generated(row, mirror)
        assert hashlib.sha256(reference.encode()).hexdigest() == row["problem_sha256"]
        assert hashlib.sha256(candidate.encode()).hexdigest() == row["candidate_sha256"]
        for text, names, module in (
            (reference, {"Model", "get_inputs", "get_init_inputs"}, row["kernel_sha256"]),
            (candidate, {"Model", "ModelNew", "get_inputs", "get_init_inputs"}, row["sha256"]),
        ):
            tree = ast.parse(text)
            defined = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
            assert names <= defined and ("ModelNew" in defined) == ("ModelNew" in names), row["id"]
            assert f'importlib.import_module("{tritonbench.CODE_PACKAGE}.k_{module}")' in text
            # The sweep is cut to this entry's one value.
            variable = next(key for key in row["sizes"] if key != "elements")
            assert f"for {variable} in ({row['sizes'][variable]},):" in text, row["id"]


def test_a_sweep_is_read_from_a_perf_script_chosen_within_the_cap_and_refused_when_unknown() -> None:
    script = """
from TritonBench_v1.mm import matmul as entry, helper
from performance_utils import Performance_Metrics

class performance_metrics(Performance_Metrics):
    def get_input_tensors(self):
        self.input_tensors = []
        base = 64
        for i in range(1, 40):
            M = N = K = base * 2 ** i
            a = torch.randn((M, K), dtype=torch.float16)
            self.input_tensors.append((a, torch.randint(0, 4, (K, N))))

    def to_cuda(self, item):
        return item

    def call_op(self, item):
        return entry(*item)
"""
    sweep = tritonbench.read_sweep(script)
    # 64 * 2^i squared stays within 2^28 up to i = 8; the smallest, middle and largest of i = 1..8.
    assert (sweep.variable, sweep.values, sweep.item) == ("i", (1, 5, 8), "tuple")
    assert sweep.elements == ((64 * 2) ** 2, (64 * 32) ** 2, (64 * 256) ** 2)
    assert sweep.entry_names == (("matmul", "entry"), ("helper", "helper"))
    body = tritonbench.perf_body(script, 5)
    assert "for i in (5,):" in body and "TritonBench_v1" not in body and "performance_utils" not in body
    with pytest.raises(tritonbench.Unmappable, match="not known before running"):
        tritonbench.read_sweep(script.replace("(M, K)", "(M, self.k)"))
    assert tritonbench.candidate_code("Here it is:\n```python\nimport triton\n```\nDone.<|EOT|>") == "\nimport triton\n"


def test_a_batch_carries_the_checked_texts_and_files_and_refuses_a_mismatch(
    built: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [first(built, ADD), first(built, SUB_GELU)]
    monkeypatch.setattr(pack, "load", lambda: rows)
    assert pack.pack(tmp_path / "batch", MIRRORS) == 2
    batch = tmp_path / "batch"
    lines = {line["id"]: line for line in map(json.loads, (batch / "batch.jsonl").read_text().splitlines())}
    package = batch / "lib" / tritonbench.CODE_PACKAGE
    assert (package / "__init__.py").is_file()
    for row in rows:
        line = lines[row["id"]]
        assert line["sha256"] == row["candidate_sha256"] and line["problem_sha256"] == row["problem_sha256"]
        for digest in (line["sha256"], line["problem_sha256"]):
            assert hashlib.sha256((batch / "files" / f"{digest}.py").read_bytes()).hexdigest() == digest
        for digest in (row["sha256"], row["kernel_sha256"]):
            assert hashlib.sha256((package / f"k_{digest}.py").read_bytes()).hexdigest() == digest
    # A source file that does not hash as the manifest says is refused, and so is a stale template.
    tampered = {**rows[0], "files": {**rows[0]["files"], "data/TritonBench_G_v1/add_example.py": "0" * 64}}
    monkeypatch.setattr(pack, "load", lambda: [tampered])
    with pytest.raises(ValueError, match="is not the file the TritonBench manifest names"):
        pack.pack(tmp_path / "other", MIRRORS)
    monkeypatch.setattr(pack, "load", lambda: [{**rows[0], "candidate_sha256": "0" * 64}])
    with pytest.raises(ValueError, match="the generated file differs"):
        pack.pack(tmp_path / "third", MIRRORS)


def test_a_candidate_sure_to_fail_before_timing_is_told_by_its_text() -> None:
    entries = (("add", "add"),)
    runs = """
import math
import torch
import triton
import triton.language as tl
from typing import Optional

SCALE = 2.0

@triton.jit
def _kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * SCALE, mask=offsets < n)

def add(x: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    global SCALE
    out = torch.empty_like(x) if out is None else out
    grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)
    try:
        _kernel[grid](x, out, x.numel(), BLOCK=1024)
    except RuntimeError as error:
        raise ValueError(str(error)) from error
    return [value for value in (out,)][0] * math.sqrt(1.0)
"""
    assert tritonbench.why_it_cannot_load(runs, entries) is None
    # An entry bound inside a top-level block may run: where in doubt, the GPU judges.
    guarded = "try:\n    from torch import add\nexcept ImportError:\n    def add(x):\n        return x\n"
    assert tritonbench.why_it_cannot_load(guarded, entries) is None
    told = {
        "does not parse": runs.replace("def add(", "def add(("),
        "defines no add": runs.replace("def add(", "def plus("),
        "imports xformers": "import xformers\n" + runs,
        "imports .": runs.replace("import math", "from .utils import math"),
        "uses torch, which it never binds": runs.replace("import torch\n", ""),
        "uses BLOCK_SIZE": runs.replace("BLOCK=1024", "BLOCK=BLOCK_SIZE"),
    }
    for why, text in told.items():
        assert why in (tritonbench.why_it_cannot_load(text, entries) or ""), why


def test_a_loadable_batch_leaves_out_only_candidates_sure_to_fail(
    built: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror = the_mirror()
    rows = built[:: SAMPLE // 2]
    told = {
        row["id"]: tritonbench.why_it_cannot_load(tritonbench.candidate_text(row, mirror), tritonbench.entry_names(row, mirror))
        for row in rows
    }
    assert 0 < sum(why is None for why in told.values()) < len(rows)
    monkeypatch.setattr(pack, "load", lambda: rows)
    assert pack.pack(tmp_path / "batch", MIRRORS, loadable=True) == sum(why is None for why in told.values())
    packed = {json.loads(line)["id"] for line in (tmp_path / "batch" / "batch.jsonl").read_text().splitlines()}
    assert packed == {name for name, why in told.items() if why is None}
    # Every candidate the GPU measured (right or wrong) passes the check: it leaves out none that could run.
    ran = [
        record
        for record in dataset.read(dataset.RECORDS)
        if record["source"] == "tritonbench" and (record["correct"] or (record.get("failure") or {}).get("kind") == "wrong")
    ]
    assert ran and all(
        tritonbench.why_it_cannot_load(tritonbench.candidate_text(record, mirror), tritonbench.entry_names(record, mirror)) is None
        for record in ran
    )


def test_measured_candidates_give_pairs_against_the_human_kernel_the_torch_operator_and_each_other(
    built: list[dict[str, Any]], tmp_path: Path
) -> None:
    adds = [row for row in built if row["id"].startswith(ADD)][:2]
    rows = [*adds, first(built, SUB_GELU)]
    manifest = tmp_path / "tritonbench_manifest.jsonl.gz"
    with gzip.open(manifest, "wt") as stream:
        stream.writelines(json.dumps(row) + "\n" for row in rows)
    results = tmp_path / "results.jsonl"
    failed = [{"id": row["id"], "failure": "wrong", "message": "wrong results: out differs", "seconds": 1.0} for row in rows[1:]]
    results.write_text("".join(json.dumps(line) + "\n" for line in (measured(rows[0]["id"], 0.5), *failed)))
    records_path = tmp_path / "records.jsonl.gz"
    assert dataset.assemble([results], records_path, [manifest]) == {"correct": 1, "wrong": 2}
    records = dataset.read(records_path)
    assert {record["track"] for record in records} == {"G", "T"} and all(record["kernel_sha256"] for record in records)
    (human,) = list(dataset.pairs(records, MIRRORS))  # the wrong candidates give no pair
    mirror = the_mirror()
    assert human.kind == "llm-vs-human" and human.speedup == 0.5 and human.op == "tritonbench/add_example"
    # Each side is the kernel's text followed by the KernelBench file measured, as a user would write it:
    # the entry functions defined above rather than imported, the class a solution's ModelNew.
    reference_file, candidate_file = tritonbench.generated(rows[0], mirror)
    label = tritonbench.kernel_code(mirror.read("data/TritonBench_G_v1/add_example.py").decode())
    candidate = next(row for row in tritonbench.rows_of(mirror, rows[0]["path"]) if row.row == rows[0]["row"])
    names = tritonbench.entry_names(rows[0], mirror)
    for side, kernel, measured_file in (
        (human.request.reference, label, reference_file),
        (human.request.candidate, candidate.code, candidate_file),
    ):
        assert side.language == "triton" and side.name == "ModelNew" and side.code.startswith(kernel + "\n")
        written = side.code[len(kernel) + 1 :]
        assert "importlib" not in written and "_kernel" not in written and "class ModelNew(Model)" not in written
        assert "class ModelNew(nn.Module):" in written and "class Model(" not in written
        dropped = set(measured_file.removesuffix(tritonbench.CANDIDATE).splitlines()) - set(
            written.replace("class ModelNew(", "class Model(").splitlines()
        )
        assert dropped and all("importlib" in line or "_kernel." in line for line in dropped), dropped
        defined = {node.name for node in ast.parse(side.code).body if isinstance(node, ast.FunctionDef | ast.ClassDef)}
        assert {bound for _, bound in names} <= defined | {
            target.id
            for node in ast.parse(side.code).body
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
    assert pair_kind(human.request) == BETWEEN_SOLUTIONS  # two Triton solutions of one kernel-size
    # A measured T candidate is paired with the torch operator: a solution against its problem.
    records[2] = dataset.record_of(rows[2], measured(rows[2]["id"], 1.5))
    eager = next(pair for pair in dataset.pairs(records, MIRRORS) if pair.kind == "llm-vs-eager")
    assert eager.request.reference.language == "pytorch" and "def sub_gelu(" in eager.request.reference.code
    assert eager.request.reference.name == "Model" and "class Model(nn.Module):" in eager.request.reference.code
    assert pair_kind(eager.request) == AGAINST_PROBLEM
    # Two measured candidates of one kernel-size are two solutions of it, both ways round, S from their speedups.
    records[1] = dataset.record_of(rows[1], measured(rows[1]["id"], 2.0, t_candidate_ms=0.025))
    variants = [pair for pair in dataset.pairs(records, MIRRORS) if pair.kind == "variant"]
    assert sorted(pair.speedup for pair in variants) == [0.25, 4.0]
    assert all(pair_kind(pair.request) == BETWEEN_SOLUTIONS for pair in variants)
    assert LabelledPair.from_json(json.loads(json.dumps(human.to_json()))).kind == "llm-vs-human"
    assert dataset.stats(records)["sources"]["tritonbench"]["tried"] == 3
