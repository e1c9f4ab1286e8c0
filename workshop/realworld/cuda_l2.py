"""CUDA-L2's HGEMM kernels: one LLM-written CUDA kernel per GPU and shape, measured against torch.matmul (cuBLAS).

deepreinforce-ai/CUDA-L2 holds, per kernel set (`kernels/<gpu>_<types>/`), one `.cu` file per
shape `<M>_<N>_<K>.cu`. Each defines the host function `cuda_l2_<gpu>_<fp32|fp16>(a, b,
b_col_major, c)`: C (M×N, fp16) = A (M×K, fp16) @ B (K×N, fp16), B also given column-major. The
types name the MMA as CuTe does, D/A/B/C: `F32F16F16F32` accumulates in fp32, `F16F16F16F16` in
fp16; the tensors are fp16 either way. Kernels tuned for the A100 and the RTX 3090 are kept at
their shapes too: on our H100 they are "tuned for another GPU" entries of the same problem.

For each kernel two files are generated from our templates. The reference is the repository's
problem as a KernelBench file: `get_inputs()` gives a, b and b in column-major storage (as the
repository's `as_col_major`: every function it times receives both) and `Model.forward` returns
`torch.matmul(a, b)`, fp16 in and out, which is the repository's own `torch.matmul` baseline. The
candidate is the reference's text and a `ModelNew` that builds the kernel file with
`load_inline` (the file's text, a one-line declaration for the binding, the repository's nvcc
flags, the CUTLASS headers from `$KERNELCAST_CUTLASS`) and calls it. Where the kernel's tiles
(`BM`, `BN`, `BK` = `Int<…>`) do not divide the shape, ModelNew zero-pads the inputs and crops the
output as the repository's benchmark does, and the padding is in its time. A kernel that adds
into C (atomics) gets a zeroed C.

CUTLASS is a build dependency, not a source: `pack` writes its `include/` and
`tools/util/include/` at the tag the repository builds with (README: v4.2.1) as
`BATCH/cutlass.tar.xz`, and the runner unpacks it and sets KERNELCAST_CUTLASS. Nothing of either
repository is committed: the manifest (`data/cuda_l2_manifest.jsonl.gz`) holds each kernel file's
path and SHA-256, the shape, the kernel set and the digests of the generated files.

    python -m workshop realworld cuda-l2-manifest --mirrors /work/.mirror
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import re
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelcast.kernels_runtime.source.launch_spec import kernelbench_problem
from workshop.realworld.library import MAX_ELEMENTS, sha256_of
from workshop.realworld.manifest import DATA, Mirror, write_rows

SOURCE = "cuda-l2"
REPO = "deepreinforce-ai/CUDA-L2"
COMMIT = "dbe017722194bb33bafadfbcbb4a65ab6df95dc3"
CUDA_L2_MANIFEST = DATA / "cuda_l2_manifest.jsonl.gz"
# The keys a CUDA-L2 entry adds to the KernelBench entry's (manifest.Entry); records keep them.
CUDA_L2_KEYS = ("op", "shape", "dtype", "candidate_sha256", "tuned_for", "accumulator", "padding", "function")

CUTLASS_REPO = "NVIDIA/cutlass"
CUTLASS_TAG = "v4.2.1"
CUTLASS_COMMIT = "f3fde58372d33e9a5650ba7b80fc48b3b49d40c8"
CUTLASS_PATHS = ("include", "tools/util/include")
CUTLASS_ARCHIVE = "cutlass.tar.xz"
CUTLASS_ENV = "KERNELCAST_CUTLASS"

# tools/utils.py's get_build_cuda_cflags at the pinned commit, less its include paths and ptxas' verbose output.
NVCC_FLAGS = (
    "-O3",
    "-std=c++17",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_HALF2_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
    "--use_fast_math",
)


@dataclass(frozen=True)
class KernelSet:
    """One folder of kernels: the GPU they were tuned on and the MMA's types (D, A, B, C)."""

    gpu: str
    types: str

    @property
    def folder(self) -> str:
        return f"kernels/{self.gpu}_{self.types}"

    @property
    def accumulator(self) -> str:
        return "fp32" if self.types.startswith("F32") else "fp16"

    @property
    def function(self) -> str:
        return f"cuda_l2_{self.gpu}_{self.accumulator}"


# The H100's set first: it is the main one; the others are the same problems tuned elsewhere.
KERNEL_SETS = (
    KernelSet("h100", "F32F16F16F32"),
    KernelSet("a100", "F32F16F16F32"),
    KernelSet("a100", "F16F16F16F16"),
    KernelSet("3090", "F32F16F16F32"),
)


@dataclass(frozen=True)
class Kernel:
    """One kernel file at its shape, and what its ModelNew needs to know of it."""

    kernels: KernelSet
    path: str
    m: int
    n: int
    k: int
    padding: tuple[int, int, int]  # added to M, N, K so the kernel's tiles divide them
    zeroed_output: bool

    @property
    def tag(self) -> str:
        return f"{self.m}_{self.n}_{self.k}"


def tile_sizes(text: str) -> dict[str, int]:
    """BM, BN, BK as the file sets them (`BM = Int<128>`), read as the repository's benchmark reads them."""
    found = {}
    for line in text.replace(" ", "").splitlines():
        match = re.search(r"(BM|BN|BK)=Int<(\d+)>", line)
        if match:
            found[match.group(1)] = int(match.group(2))
    return found


def padding_of(text: str, m: int, n: int, k: int) -> tuple[int, int, int]:
    """How far the repository pads M, N, K for this kernel: to a multiple of each tile, if the file names all three."""
    tiles = tile_sizes(text)
    if len(tiles) < 3 or min(tiles.values()) <= 0:
        return (0, 0, 0)
    return tuple(math.ceil(size / tiles[name]) * tiles[name] - size for size, name in ((m, "BM"), (n, "BN"), (k, "BK")))  # type: ignore[return-value]


def kernel_of(kernels: KernelSet, path: str, text: str) -> Kernel:
    m, n, k = (int(part) for part in Path(path).stem.split("_"))
    if not re.search(rf"\bvoid\s+{kernels.function}\s*\(\s*torch::Tensor", text):
        raise ValueError(f"{REPO}@{COMMIT[:12]}:{path} defines no {kernels.function}(torch::Tensor, …)")
    return Kernel(kernels, path, m, n, k, padding_of(text, m, n, k), bool(re.search(r"\batomicAdd\b|\bred\.global\b", text)))


def reference_code(m: int, n: int, k: int) -> str:
    """The repository's problem at one shape as a KernelBench file, torch.matmul its Model."""
    return f'''"""CUDA-L2's HGEMM at M={m}, N={n}, K={k}: torch.matmul (cuBLAS), fp16 in and out (generated by kernelcast's workshop)."""

import torch
import torch.nn as nn

M, N, K = {m}, {n}, {k}


def as_col_major(x):
    """x's values stored column-major under x's shape, as CUDA-L2's tools/utils.py gives every function it times."""
    return x.t().reshape(x.shape).contiguous()


class Model(nn.Module):
    def forward(self, a, b, b_col_major):
        return torch.matmul(a, b)


def get_inputs():
    a = torch.randn(M, K, dtype=torch.float16)
    b = torch.randn(K, N, dtype=torch.float16)
    return [a, b, as_col_major(b)]


def get_init_inputs():
    return []
'''


def candidate_code(kernel: Kernel, kernel_text: str, reference: str) -> str:
    """The reference's text and a ModelNew that builds the kernel file with load_inline and calls it."""
    function = kernel.kernels.function
    pad_m, pad_n, pad_k = kernel.padding
    allocate = "zeros" if kernel.zeroed_output else "empty"
    if any(kernel.padding):
        body = f"""a = F.pad(a, (0, {pad_k}, 0, {pad_m}))
        b = F.pad(b, (0, {pad_n}, 0, {pad_k}))
        b_col_major = F.pad(b_col_major.reshape(N, K), (0, {pad_k}, 0, {pad_n})).reshape(K + {pad_k}, N + {pad_n})
        c = torch.{allocate}(M + {pad_m}, N + {pad_n}, dtype=torch.float16, device=a.device)
        extension.{function}(a, b, b_col_major, c)
        return c[:M, :N]"""
    else:
        body = f"""c = torch.{allocate}(M, N, dtype=torch.float16, device=a.device)
        extension.{function}(a, b, b_col_major, c)
        return c"""
    return f"""{reference}

import os  # noqa: E402

import torch.nn.functional as F  # noqa: E402
from torch.utils.cpp_extension import load_inline  # noqa: E402

# {REPO}@{COMMIT[:12]}:{kernel.path}, read from the mirror when the batch was packed.
KERNEL_SOURCE = {kernel_text!r}
CUTLASS = os.environ.get("{CUTLASS_ENV}", "cutlass")  # the runner unpacks BATCH/{CUTLASS_ARCHIVE} and sets it

extension = load_inline(
    name="{function}",
    cpp_sources="void {function}(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c);",
    cuda_sources=KERNEL_SOURCE,
    functions=["{function}"],
    extra_cuda_cflags={list(NVCC_FLAGS)!r},
    extra_include_paths=[os.path.join(CUTLASS, "include"), os.path.join(CUTLASS, "tools", "util", "include")],
)


class ModelNew(Model):
    def forward(self, a, b, b_col_major):
        {body}
"""


def entry_of(kernel: Kernel, sha256: str, reference: str, candidate: str) -> dict[str, Any]:
    """A kernel's manifest line: manifest.Entry's keys and CUDA_L2_KEYS; no code."""
    kernels = kernel.kernels
    group = f"{SOURCE}/hgemm/{kernel.tag}"
    return {
        "id": f"{SOURCE}:{kernels.gpu}_{kernels.types}/{kernel.tag}",
        "source": SOURCE,
        "repo": REPO,
        "commit": COMMIT,
        "path": kernel.path,
        "sha256": sha256,
        "run": f"{kernels.gpu}_{kernels.types}",
        "level": 0,
        "problem": group,
        "problem_name": "hgemm",
        "problem_path": "",
        "problem_sha256": sha256_of(reference),
        "sizes": kernelbench_problem(reference),
        "same_as": [],
        "language": "cuda",
        "op": "hgemm",
        "shape": [kernel.m, kernel.n, kernel.k],
        "dtype": "float16",
        "candidate_sha256": sha256_of(candidate),
        "tuned_for": kernels.gpu,
        "accumulator": kernels.accumulator,
        "padding": list(kernel.padding),
        "function": kernels.function,
    }


def kernel_paths(mirror: Mirror) -> list[tuple[KernelSet, str]]:
    """Every kernel file of the listed sets whose inputs stay within MAX_ELEMENTS, set by set, shapes sorted."""
    listed = set(mirror.paths())
    found = []
    for kernels in KERNEL_SETS:
        for path in sorted(path for path in listed if re.fullmatch(rf"{kernels.folder}/\d+_\d+_\d+\.cu", path)):
            m, n, k = (int(part) for part in Path(path).stem.split("_"))
            if max(m * k, k * n, m * n) <= MAX_ELEMENTS:
                found.append((kernels, path))
    return found


def entries(mirrors: Path) -> Iterator[dict[str, Any]]:
    mirror = Mirror(mirrors, REPO, COMMIT)
    for kernels, path in kernel_paths(mirror):
        data = mirror.read(path)
        yield entry_of(*_generated(kernels, path, data))


def _generated(kernels: KernelSet, path: str, data: bytes) -> tuple[Kernel, str, str, str]:
    """(kernel, the file's SHA-256, reference, candidate) of one kernel file's bytes."""
    text = data.decode()
    kernel = kernel_of(kernels, path, text)
    reference = reference_code(kernel.m, kernel.n, kernel.k)
    return kernel, hashlib.sha256(data).hexdigest(), reference, candidate_code(kernel, text, reference)


def build(mirrors: Path, out: Path = CUDA_L2_MANIFEST) -> dict[str, int]:
    """Write the CUDA-L2 manifest; the count of entries per kernel set."""
    return write_rows(out, entries(mirrors), counted_by="run")


def is_cuda_l2(entry: dict[str, Any]) -> bool:
    return entry["source"] == SOURCE


def generated(entry: dict[str, Any], mirror: Mirror) -> tuple[str, str]:
    """An entry's (reference, candidate) text, generated again from the kernel file at the pinned commit.

    Raises ValueError where the file is not the one the manifest names."""
    kernels = next(kernels for kernels in KERNEL_SETS if f"{kernels.gpu}_{kernels.types}" == entry["run"])
    _, sha256, reference, candidate = _generated(kernels, entry["path"], mirror.read(entry["path"]))
    if sha256 != entry["sha256"]:
        raise ValueError(f"{REPO}@{COMMIT[:12]}:{entry['path']} is not the file the CUDA-L2 manifest names (SHA-256 differs)")
    return reference, candidate


def write_cutlass_archive(mirrors: Path, out: Path) -> Path:
    """CUTLASS's headers at the tag CUDA-L2 builds with, as one xz tarball (~1 MB; 27 MB unpacked)."""
    mirror = Mirror(mirrors, CUTLASS_REPO, CUTLASS_COMMIT)
    tagged = subprocess.run(
        ["git", f"--git-dir={mirror.git_dir}", "rev-parse", f"{CUTLASS_TAG}^{{commit}}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if tagged != CUTLASS_COMMIT:
        raise ValueError(f"{CUTLASS_REPO}'s {CUTLASS_TAG} is {tagged[:12]} in the mirror, not the pinned {CUTLASS_COMMIT[:12]}")
    archive = subprocess.run(
        ["git", f"--git-dir={mirror.git_dir}", "archive", mirror.commit, *CUTLASS_PATHS], capture_output=True, check=True
    )
    target = out / CUTLASS_ARCHIVE
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as headers, tarfile.open(target, "w:xz", preset=1) as packed:
        for member in headers.getmembers():
            packed.addfile(member, headers.extractfile(member) if member.isfile() else None)
    return target


def unpack_cutlass(batch: Path) -> Path | None:
    """Unpack BATCH/cutlass.tar.xz beside it once and point KERNELCAST_CUTLASS there; None without one."""
    archive = batch / CUTLASS_ARCHIVE
    if not archive.is_file():
        return None
    root = (batch / "cutlass").resolve()
    if not (root / "include" / "cute").is_dir():
        with tarfile.open(archive) as packed:
            packed.extractall(root, filter="data")
    os.environ[CUTLASS_ENV] = str(root)
    return root
