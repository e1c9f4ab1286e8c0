"""What a kernel's text says about its cost, read without compiling or running it.

Counts are deliberately coarse: they feed a prior whose uncertainty is wide, and
the learned forecaster replaces the weights later. Comments are stripped first so a
commented-out `__shared__` does not count.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

_CUDA_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_PY_COMMENT = re.compile(r"#[^\n]*")


@dataclass(frozen=True)
class CodeFeatures:
    launches: int  # kernel launches / library calls one forward makes
    shared_memory: bool  # tiles data in on-chip shared memory
    vector_loads: bool  # 64/128-bit loads (float4, half2, …)
    tensor_cores: bool  # wmma/mma/tl.dot or a library matmul
    library_matmul: bool  # cuBLAS/cuDNN through torch (hard to beat)
    syncs: int  # block-wide barriers in the source
    atomics: int
    warp_shuffles: int
    loops: int
    unrolled: bool
    half_precision: bool  # fp16/bf16 data
    strided_index: bool  # an index multiplied by a runtime stride: likely uncoalesced
    lines: int

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def _count(pattern: str, text: str) -> int:
    return len(re.findall(pattern, text))


def extract(code: str, language: str) -> CodeFeatures:
    text = _PY_COMMENT.sub("", code) if language in ("triton", "pytorch") else _CUDA_COMMENT.sub("", code)
    torch_heavy = _count(r"\b(?:torch\.(?:matmul|mm|bmm|einsum|conv\dd|nn\.functional\.conv\dd|addmm|baddbmm)|F\.conv\dd|F\.linear|nn\.(?:Linear|Conv\dd))\b|@", text)
    torch_ops = _count(r"\btorch\.\w+\(|\bF\.\w+\(|\.(?:sum|mean|max|softmax|relu|exp|sigmoid|tanh)\(", text)
    cuda_launches = _count(r"<<<", text)
    triton_launches = _count(r"\w\[[^\]\n]*\]\s*\(", text) if language == "triton" else 0
    if language == "pytorch":
        launches = max(1, torch_ops + torch_heavy)
    else:
        launches = max(1, cuda_launches + triton_launches)
    return CodeFeatures(
        launches=launches,
        shared_memory=bool(re.search(r"__shared__|extern\s+__shared__|tl\.dot", text)),
        vector_loads=bool(re.search(r"\b(?:float[24]|int[24]|half2|__half2|nv_bfloat162|double2|uint4|reinterpret_cast<\s*(?:float4|int4|uint4))\b", text)),
        tensor_cores=bool(re.search(r"\bwmma::|\bmma\.sync|\bwgmma|\btl\.dot\b|\bmma_sync\b", text)) or torch_heavy > 0,
        library_matmul=language == "pytorch" and torch_heavy > 0,
        syncs=_count(r"__syncthreads\s*\(|tl\.debug_barrier|__syncwarp\s*\(", text),
        atomics=_count(r"\batomic[A-Z]\w*\s*\(|\btl\.atomic_\w+\(", text),
        warp_shuffles=_count(r"__shfl_\w*\s*\(|__reduce_\w+_sync\s*\(", text),
        loops=_count(r"\bfor\s*\(|\bwhile\s*\(|\bfor\s+\w+\s+in\b", text),
        unrolled=bool(re.search(r"#pragma\s+unroll|tl\.static_range", code)),
        half_precision=bool(re.search(r"\b(?:half|__half|__nv_bfloat16|bfloat16|float16|fp16|bf16)\b", text)),
        strided_index=bool(re.search(r"\[\s*\w+\s*\*\s*(?:stride|ld|lda|ldb|n|N|cols|width)\w*\s*[\]+]", text)),
        lines=text.count("\n") + 1,
    )
