"""CUDA-L2's HGEMM kernels (workshop/realworld/cuda_l2.py) read from the pinned CUDA-L2 and CUTLASS mirrors:
the manifest, the generated KernelBench files, batches with CUTLASS's headers, an nvcc build of one
generated candidate's kernel, and pairs. Skipped where the mirrors are absent (fetch
github:deepreinforce-ai/CUDA-L2 and github:NVIDIA/cutlass) or, for the build, where nvcc is."""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from realworld_support import MIRRORS, measured, pinned_mirror

from kernelcast.wire import LabelledPair
from workshop.realworld import cuda_l2, dataset, pack
from workshop.realworld.manifest import Mirror, load

SMALL_CUTE_KERNEL = "cuda-l2:h100_F32F16F16F32/64_64_128"  # includes cute/tensor.hpp; builds in about a minute


SAMPLE = 10


@pytest.fixture(scope="module")
def mirror() -> Mirror:
    return pinned_mirror(cuda_l2.REPO, cuda_l2.COMMIT, "README.md")


@pytest.fixture(scope="module")
def built(mirror: Mirror, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("cuda_l2") / "cuda_l2_manifest.jsonl.gz"
    cuda_l2.build(MIRRORS, out)
    return load(out)


def by_id(built: list[dict[str, Any]], *ids: str) -> list[dict[str, Any]]:
    rows = {row["id"]: row for row in built}
    return [rows[entry_id] for entry_id in ids]


def test_the_cuda_l2_manifest_builds_from_the_pinned_mirror_and_matches_the_committed_one(built: list[dict[str, Any]]) -> None:
    assert Counter(row["run"] for row in built) == {
        "h100_F32F16F16F32": 1000,
        "a100_F32F16F16F32": 1000,
        "a100_F16F16F16F16": 1000,
        "3090_F32F16F16F32": 736,
    }
    assert {(row["source"], row["language"], row["dtype"], row["problem_name"]) for row in built} == {
        ("cuda-l2", "cuda", "float16", "hgemm")
    }
    # One problem per shape, its reference shared by every set's kernel at that shape; every shape has an H100 kernel.
    shapes = {tuple(row["shape"]) for row in built}
    assert len(shapes) == 1000 == len({row["problem_sha256"] for row in built}) == len({row["problem"] for row in built})
    assert shapes == {tuple(row["shape"]) for row in built if row["tuned_for"] == "h100"}
    assert max(max(m * k, k * n, m * n) for m, n, k in shapes) == 2**28  # 16384 x 16384, the limit itself
    # Kernels whose tiles do not divide their shape are padded as the repository's benchmark pads them.
    padded = Counter(row["run"] for row in built if any(row["padding"]))
    assert padded == {"h100_F32F16F16F32": 9, "a100_F32F16F16F32": 310, "a100_F16F16F16F16": 192, "3090_F32F16F16F32": 48}
    assert {row["function"] for row in built} == {"cuda_l2_h100_fp32", "cuda_l2_a100_fp32", "cuda_l2_a100_fp16", "cuda_l2_3090_fp32"}
    (first,) = by_id(built, "cuda-l2:h100_F32F16F16F32/1024_1024_1024")
    assert first["path"] == "kernels/h100_F32F16F16F32/1024_1024_1024.cu"
    assert first["sha256"] == "f180e7df0f7552638e1dd5057233753be2e18fa1df971a662bb8f8ff98de59fb"
    assert first["sizes"] == {"M": 1024, "N": 1024, "K": 1024, "dtype": "f16"}
    assert built == load(cuda_l2.CUDA_L2_MANIFEST), "run `python -m workshop realworld cuda-l2-manifest`"
    text = gzip.open(cuda_l2.CUDA_L2_MANIFEST, "rt").read()
    assert "__global__" not in text and "#include" not in text and "import " not in text  # no code, ours or theirs


def test_generated_files_are_kernelbench_pairs_that_build_the_named_kernel_file(built: list[dict[str, Any]], mirror: Mirror) -> None:
    for row in built[::SAMPLE]:  # every SAMPLE-th: `pack` regenerates and checks each one it packs
        reference, candidate = cuda_l2.generated(row, mirror)
        assert hashlib.sha256(reference.encode()).hexdigest() == row["problem_sha256"]
        assert hashlib.sha256(candidate.encode()).hexdigest() == row["candidate_sha256"]
        assert candidate.startswith(reference) and "torch.matmul(a, b)" in reference
        tree = ast.parse(candidate)
        names = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
        assert names == {"Model", "ModelNew", "get_inputs", "get_init_inputs", "as_col_major"}, row["id"]
        model_new = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ModelNew")
        assert [base.id for base in model_new.bases] == ["Model"]
        source = next(node.value for node in tree.body if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "KERNEL_SOURCE")
        assert hashlib.sha256(ast.literal_eval(source).encode()).hexdigest() == row["sha256"], row["id"]
        assert f"extension.{row['function']}(a, b, b_col_major, c)" in candidate
        assert ("return c[:M, :N]" in candidate) == any(row["padding"])


def test_padding_follows_the_kernels_tiles_as_the_repository_reads_them() -> None:
    tiles = "using BM = Int<128>;\nusing BN = Int < 256 >;\nauto BK = Int<32>{};"
    assert cuda_l2.tile_sizes(tiles) == {"BM": 128, "BN": 256, "BK": 32}
    assert cuda_l2.padding_of(tiles, 64, 4096, 48) == (64, 0, 16)
    assert cuda_l2.padding_of("using BM = Int<128>;", 64, 64, 64) == (0, 0, 0)  # the repository pads only when all three are named


def test_a_batch_carries_the_checked_files_and_cutlass_headers_and_refuses_a_tampered_kernel(
    built: list[dict[str, Any]], mirror: Mirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pinned_mirror(cuda_l2.CUTLASS_REPO, cuda_l2.CUTLASS_COMMIT, "include/cute/tensor.hpp")
    rows = by_id(built, "cuda-l2:h100_F32F16F16F32/1024_1024_1024", "cuda-l2:a100_F32F16F16F32/1024_1024_1024")
    monkeypatch.setattr(pack, "load", lambda: rows)
    batch = tmp_path / "batch"
    assert pack.pack(batch, MIRRORS) == 2
    lines = {line["id"]: line for line in map(json.loads, (batch / "batch.jsonl").read_text().splitlines())}
    for row in rows:
        line = lines[row["id"]]
        assert (line["language"], line["sha256"], line["problem_sha256"]) == ("cuda", row["candidate_sha256"], row["problem_sha256"])
        for digest in (line["sha256"], line["problem_sha256"]):
            assert hashlib.sha256((batch / "files" / f"{digest}.py").read_bytes()).hexdigest() == digest
    assert len({line["problem_sha256"] for line in lines.values()}) == 1  # one shape, one reference
    archive = batch / cuda_l2.CUTLASS_ARCHIVE
    assert archive.stat().st_size < 2 * 2**20
    with tarfile.open(archive) as headers:
        names = set(headers.getnames())
    assert {"include/cute/tensor.hpp", "include/cutlass/version.h", "tools/util/include/cutlass/util/helper_cuda.hpp"} <= names
    assert not any(name.endswith((".cu", ".cpp", ".py")) for name in names)
    monkeypatch.delenv(cuda_l2.CUTLASS_ENV, raising=False)
    root = cuda_l2.unpack_cutlass(batch)
    assert root is not None and os.environ[cuda_l2.CUTLASS_ENV] == str(root)
    version = (root / "include/cutlass/version.h").read_text()
    assert "#define CUTLASS_MAJOR 4" in version and "#define CUTLASS_MINOR 2" in version and "#define CUTLASS_PATCH 1" in version
    # A manifest whose kernel file does not hash as the mirror's is refused, and so is a stale template.
    monkeypatch.setattr(pack, "load", lambda: [{**rows[0], "sha256": "0" * 64}])
    with pytest.raises(ValueError, match="is not the file the CUDA-L2 manifest names"):
        pack.pack(tmp_path / "other", MIRRORS)
    monkeypatch.setattr(pack, "load", lambda: [{**rows[0], "candidate_sha256": "0" * 64}])
    with pytest.raises(ValueError, match="the generated file differs"):
        pack.pack(tmp_path / "third", MIRRORS)


# The part of torch's C++ API that CUDA-L2's kernel files use, declared only: enough for nvcc to
# compile a kernel file (-c) on a machine without torch. Nothing of it runs.
TORCH_DECLARATIONS = """#pragma once
#include <cstdint>
#include <ostream>
#include <stdexcept>
#include <vector>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
namespace c10 {
enum class ScalarType { Half, Float, BFloat16 };
using Half = __half;
enum class DeviceType { CUDA };
struct CUDAStream { cudaStream_t stream() const; operator cudaStream_t() const; };
namespace cuda { CUDAStream getCurrentCUDAStream(int device = -1); }
}
namespace at {
using c10::Half;
using c10::ScalarType;
namespace cuda { using c10::cuda::getCurrentCUDAStream; }
}
namespace torch {
using c10::Half;
using IntArrayRef = std::vector<int64_t>;
constexpr auto kHalf = c10::ScalarType::Half;
constexpr auto kFloat = c10::ScalarType::Float;
constexpr auto kCUDA = c10::DeviceType::CUDA;
struct TensorOptions {
  TensorOptions dtype(c10::ScalarType) const;
  TensorOptions device(c10::DeviceType) const;
  c10::ScalarType dtype() const;
};
std::ostream& operator<<(std::ostream&, const TensorOptions&);
struct Tensor {
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const;
  int64_t numel() const;
  void* data_ptr() const;
  template <typename T> T* data_ptr() const;
  c10::ScalarType scalar_type() const;
  TensorOptions options() const;
  bool is_contiguous() const;
  bool is_cuda() const;
  Tensor contiguous() const;
};
Tensor empty(IntArrayRef, TensorOptions = {});
Tensor zeros(IntArrayRef, TensorOptions = {});
}
#define TORCH_CHECK(cond, ...) do { if (!(cond)) throw std::runtime_error("TORCH_CHECK"); } while (0)
"""


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("KERNELCAST_COMPILE_CUDA_L2"),
    reason="one CuTe kernel takes 1-4 CPU-minutes to compile: KERNELCAST_COMPILE_CUDA_L2=1 runs this test",
)
def test_one_generated_candidates_kernel_compiles_for_sm90a_with_the_carried_cutlass_headers(
    built: list[dict[str, Any]], mirror: Mirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The candidate's KERNEL_SOURCE, with the flags and include folders its load_inline passes, and
    the declaration its binding compiles against (taking the function's address fails on a mismatch)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on this machine")
    pinned_mirror(cuda_l2.CUTLASS_REPO, cuda_l2.CUTLASS_COMMIT, "include/cute/tensor.hpp")
    (row,) = by_id(built, SMALL_CUTE_KERNEL)
    monkeypatch.delenv(cuda_l2.CUTLASS_ENV, raising=False)
    cuda_l2.write_cutlass_archive(MIRRORS, tmp_path)
    cutlass = cuda_l2.unpack_cutlass(tmp_path)
    assert cutlass is not None
    candidate = ast.parse(cuda_l2.generated(row, mirror)[1])
    assigned = {ast.unparse(node.targets[0]): node.value for node in candidate.body if isinstance(node, ast.Assign)}
    kernel_source = ast.literal_eval(assigned["KERNEL_SOURCE"])
    load = next(keyword for keyword in assigned["extension"].keywords if keyword.arg == "cpp_sources")
    declaration = ast.literal_eval(load.value)
    function = row["function"]
    shim = tmp_path / "torch_declarations"
    for header in ("torch/extension.h", "torch/types.h"):
        (shim / header).parent.mkdir(parents=True, exist_ok=True)
        (shim / header).write_text(TORCH_DECLARATIONS)
    unit = tmp_path / "kernel.cu"
    binding = f"void (*kernelcast_binding)(torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor) = &{function};"
    unit.write_text(f"{kernel_source}\n{declaration}\n{binding}\n")
    includes = [f"-I{shim}", f"-I{cutlass / 'include'}", f"-I{cutlass / 'tools/util/include'}"]
    done = subprocess.run(
        [nvcc, *cuda_l2.NVCC_FLAGS, "-arch=sm_90a", *includes, "-c", str(unit), "-o", str(tmp_path / "kernel.o")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cute/tensor.hpp" in kernel_source and (tmp_path / "kernel.o").stat().st_size > 0


def test_measured_kernels_give_cublas_and_cross_gpu_pairs_with_the_timed_file_as_candidate(
    built: list[dict[str, Any]], mirror: Mirror, tmp_path: Path
) -> None:
    manifest = tmp_path / "cuda_l2_manifest.jsonl.gz"
    with gzip.open(manifest, "wt") as stream:
        stream.writelines(json.dumps(row) + "\n" for row in built)
    h100, a100 = "cuda-l2:h100_F32F16F16F32/1024_1024_1024", "cuda-l2:a100_F32F16F16F32/1024_1024_1024"
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(measured(h100, 1.2, 0.02)) + "\n" + json.dumps(measured(a100, 0.8, 0.03)) + "\n")
    records_path = tmp_path / "records.jsonl.gz"
    assert dataset.assemble([results], records_path, [manifest]) == {"correct": 2}
    records = {record["id"]: record for record in dataset.read(records_path)}
    assert (records[a100]["tuned_for"], records[a100]["accumulator"], records[a100]["shape"]) == ("a100", "fp32", [1024, 1024, 1024])
    found = list(dataset.pairs(list(records.values()), MIRRORS))
    assert Counter(pair.kind for pair in found) == {"llm-vs-cublas": 2, "variant": 2}
    against_cublas = next(pair for pair in found if pair.id == f"{h100}/llm-vs-cublas")
    candidate, reference = against_cublas.request.candidate, against_cublas.request.reference
    # The candidate is the file that was timed, to the byte: the kernel file inside the ModelNew that builds it.
    entry = next(row for row in built if row["id"] == h100)
    assert hashlib.sha256(candidate.code.encode()).hexdigest() == entry["candidate_sha256"]
    assert repr(mirror.read("kernels/h100_F32F16F16F32/1024_1024_1024.cu").decode()) in candidate.code
    assert (candidate.language, candidate.name) == ("cuda", "ModelNew") and "class ModelNew(Model)" in candidate.code
    assert reference.language == "pytorch" and "torch.matmul(a, b)" in reference.code and "class ModelNew" not in reference.code
    assert against_cublas.speedup == 1.2 and against_cublas.op == "cuda-l2/hgemm" and against_cublas.source == "cuda-l2"
    # The H100's kernel against the A100's at the same shape: S from their speedups over cuBLAS.
    tuned_here = next(pair for pair in found if pair.id == f"{h100}/variant/vs/{a100}")
    assert tuned_here.speedup == pytest.approx(1.2 / 0.8)
    assert "cuda_l2_a100_fp32" in tuned_here.request.reference.code and "cuda_l2_h100_fp32" in tuned_here.request.candidate.code
    assert LabelledPair.from_json(json.loads(json.dumps(against_cublas.to_json()))).kind == "llm-vs-cublas"
