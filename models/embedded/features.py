"""What the embedded forecaster knows about one side of a pair, shared by training and inference.

Each side becomes a vector that describes what the code *does* (launches, memory ops and
their widths, shared memory, syncs, atomics, tensor cores, precision, library calls) and
how far apart neighbouring threads' accesses are (kernels_runtime/source/access_pattern.py), how often
a thread goes round its loops and how often all threads touch global and shared memory
(kernels_runtime/source/loop_trips.py), how the compiler and launch shape it (registers, occupancy,
spills, SASS mix, grid), next
to a context that both sides share (problem sizes, work, the GPU). A roofline floor per
side (launch overhead + max(bytes / bandwidth, FLOPs / the side's peak)) anchors its log
time; the learned model only corrects it. Nothing here says which side is "the rewrite":
no line counts, no names, no source of the pair (shared/data/README.md).

Facts are read from `side.facts` when the corpus or the LSP compiled them (KernelFacts
JSON, plus "launches" in corpus pairs); launches fall back to a `kernelcast: launch`
pragma in the code, then to launch sites counted in the code.
"""

from __future__ import annotations

import ast
import bisect
import functools
import math
import re
import tokenize
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from kernelcast.kernels_runtime.hardware import DEFAULT_TARGET, SPECS
from kernelcast.kernels_runtime.source.access_pattern import ACCESS_NAMES, access_summary
from kernelcast.kernels_runtime.source.alternatives import one_path_each
from kernelcast.kernels_runtime.source.cuda_text import blank
from kernelcast.kernels_runtime.source.host_launch import TRITON_DEFAULT_WARPS, few_value_programs, repeated_grids
from kernelcast.kernels_runtime.source.launch_spec import DTYPE_BYTES, LaunchSpec, find_launch_spec, launch_specs
from kernelcast.kernels_runtime.source.loop_trips import NO_WORK, ThreadWork, thread_work
from kernelcast.kernels_runtime.source.python_ast import line_offsets, parse_python_expression
from kernelcast.kernels_runtime.source.timed_path import (
    BACKWARD_NAME,
    calls_out_of_sight,
    kernels_built_each_call,
    line_repeats,
    tuned_share,
    unreached_spans,
)
from kernelcast.kernels_runtime.source.triton_text import FP32_DOT, triton_kernels
from kernelcast.models.embedded.pair_kinds import SOLUTION_KINDS, pair_kind
from kernelcast.wire import TEMPLATES_OUT_OF_SIGHT, ForecastRequest, KernelSide

# Host + driver cost of one kernel launch, and of one eager PyTorch op (dispatcher on top).
LAUNCH_US = 2.5
TORCH_OP_US = 5.0
# What one call of a torch.compile'd module costs beyond its kernels' launches (its guards and
# generated wrapper), as the timing harness sees it: at 64×64 elements a compiled call took 0 or
# 20–65 µs more than one eager op, by process, 15–28 µs on average (benchmarks/bench_host_costs.py;
# a later run of three processes saw 0–12 µs, results/host_costs_flaggems.md).
# At the sizes libraries are benchmarked at, this decides whether compiling one op pays.
COMPILED_CALL_US = 15.0
# What a Triton kernel reached through a library's Python dispatch layer costs the host beyond its
# launch, measured at 64×64 (benchmarks/results/host_costs_flaggems.md): FlagGems' generated
# pointwise wrapper (`@pointwise_dynamic`) about 20 µs a call, its kernel cache (`@libentry`) 3 µs.
# A `@helion.kernel` call with its config fixed costs nothing the harness sees beyond a direct launch
# (3.6–3.9 µs either way, results/host_costs_helion.md), so it is not listed.
DISPATCH_US = {"@pointwise_dynamic": 20.0, "@libentry": 3.0}
# What a call pays for a Triton kernel defined inside it (benchmarks/bench_host_costs.py, H200): a new
# kernel object loads its binary from Triton's disk cache again, 1.7–2.8 ms a call by process (means
# of three runs 1.8, 2.2 and 2.6 ms); an autotuner of several configs around it times each again with
# Triton's benchmarker, 105–109 ms a config.
DEFINED_IN_CALL_US = 2200.0
AUTOTUNE_CONFIG_US = 105_000.0
# A wave of Triton programs that each load and store one value: 1.21-1.26 µs from 8 to 7,944 waves on
# the H100, blocks of 4 values 1.15-1.25 µs, of 16 0.96-1.18 µs from 2 waves up, each beyond the time of
# the same work in blocks of 1,024 (benchmarks/results/few_value_programs.md). Likewise among
# TritonBench's measured candidates (H200), a block of 4 a program over 2^20 and 2^27 elements took
# 634 µs and 80.8 ms against 621 µs and 79.4 ms counted so, a block of 16 44.6 µs and 5.05 ms against
# 40.0 µs and 4.97 ms.
FEW_VALUE_WAVE_US = 1.25
# How much faster an `@triton.autotune` kernel runs, timed after its tuning, than with one of its
# configs chosen without timing (benchmarks/bench_autotune_gain.py, H200): the median config of a
# list ran slower than the best by 0.02–0.87 octaves on row reductions, softmaxes and matmuls (the
# median of those workloads 0.32 and 0.31 in two runs), by 0.01–0.06 on an elementwise kernel, bound
# by bandwidth at every block size, which the floor ignores. The roofline reads neither the configs
# nor their timing.
AUTOTUNE_GAIN_LOG2 = 0.32
_DISPATCH_LAYER = re.compile("|".join(re.escape(layer) + r"\b" for layer in DISPATCH_US))
# Share of a peak a plain kernel reaches before the learned correction: the floor is a
# floor, the residual says how far above it each kind of code runs.
LIBRARY_EFFICIENCY = 0.7
# Sizes beyond this many elements cannot be one tensor on any GPU we forecast for.
MAX_ELEMENTS = 2.0**34

# The code counts were fit on text with comments cut this way (a string holding `//` loses its tail).
_C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
# In Python text `//` is floor division unless it starts a line (a comment in a CUDA string).
_C_COMMENT_IN_PYTHON = re.compile(r"(?m)^\s*//[^\n]*|/\*.*?\*/", re.S)
_PY_COMMENT = re.compile(r"(?m)(?:^|\s)#(?!\s*(?:include|define|pragma|if|endif|else|ifdef|ifndef|undef)\b)[^\n]*")


@dataclass(frozen=True)
class _Count:
    """How often `regex` occurs in a text. `anchors`: strings one of which every match contains;
    a text with none of them counts 0 without a regex scan. A substring search runs ~10× faster
    than a scan for an alternation, and most patterns occur in few texts (a 300-kernel file
    read every pattern in 3.5 ms; tests/test_embedded_model.py checks the anchors)."""

    regex: re.Pattern[str]
    anchors: tuple[str, ...] = ()

    def __call__(self, text: str) -> float:
        if self.anchors and not any(anchor in text for anchor in self.anchors):
            return 0.0
        return float(len(self.regex.findall(text)))


def _pattern(regex: str, *anchors: str) -> _Count:
    return _Count(re.compile(regex), anchors)


def _any_of(*literals: str) -> _Count:
    return _Count(re.compile("|".join(map(re.escape, literals))), literals)


# Counts read from any side's text (CUDA, Triton, PyTorch, CUDA inside Python strings).
# No leading \b: Python's re scans ~5× faster from a literal, and the counts are coarse anyway.
CODE_PATTERNS: dict[str, _Count] = {
    "shared_decl": _pattern(r"__shared__"),
    "vector_types": _pattern(
        r"(?:float[24]|int[24]|uint[24]|half2|__half2|nv_bfloat162|__nv_bfloat162|double2)\b",
        "float2",
        "float4",
        "int2",
        "int4",
        "half2",
        "bfloat162",
        "double2",
    ),
    "mma": _pattern(r"wmma::|mma\.sync|wgmma|mma_sync\b|cublas\w*\(|cute::", "mma", "cublas", "cute::"),
    "syncs": _pattern(r"__syncthreads\s*\(|__syncwarp\s*\(|tl\.debug_barrier|\.sync\(\)", "__sync", "tl.debug_barrier", ".sync()"),
    "atomics": _pattern(r"atomic[A-Z]\w*\s*\(|tl\.atomic_\w+\(", "atomic"),
    "shuffles": _pattern(r"__shfl_\w*\s*\(|__reduce_\w+_sync\s*\(", "__shfl_", "__reduce_"),
    # A warp grouping its lanes by key before one atomic per group (pays only under contention).
    "warp_match": _pattern(r"__match_(?:any|all)_sync\s*\("),
    # Atomics that order nothing around them: Triton's sem="relaxed", CUDA's block-scoped ones.
    "relaxed_atomics": _pattern(r"sem\s*=\s*[\"']relaxed|atomic[A-Z]\w*_block\s*\(", "relaxed", "_block"),
    # Loads and stores told which caches to use or skip (streaming, L2 only, evict first).
    "cache_hints": _pattern(
        r"__(?:ld|st)(?:cg|ca|cs|lu|cv|wt)\s*\(|cache_modifier\s*=\s*[\"']\.\w|eviction_policy\s*=\s*[\"']evict",
        "__ld",
        "__st",
        "cache_modifier",
        "eviction_policy",
    ),
    # Which way the hint points: a gather that re-reads its lines loses what streaming or L2-only loads
    # drop (`__ldcs` against `__ldca` read the same as hints alone).
    "streaming_hints": _pattern(r"__(?:ld|st)(?:cs|lu)\s*\(|eviction_policy\s*=\s*[\"']evict_first", "__ld", "__st", "eviction_policy"),
    "l1_bypass_hints": _pattern(r"__(?:ld|st)(?:cg|cv|wt)\s*\(|cache_modifier\s*=\s*[\"']\.c[gv]", "__ld", "__st", "cache_modifier"),
    "loops": _pattern(r"for\s*\(|while\s*\(|for\s+\w+\s+in\b", "for", "while"),
    "unroll": _pattern(r"#pragma\s+unroll|tl\.static_range", "unroll", "tl.static_range"),
    "half_types": _pattern(
        r"(?:half|__half|__nv_bfloat16|bfloat16|float16|fp16|bf16|\.half\(\))\b", "half", "bfloat16", "float16", "fp16", "bf16"
    ),
    "double_types": _pattern(r"double\b|float64", "double", "float64"),
    "strided_index": _pattern(r"\[\s*\w+\s*\*\s*(?:stride|ld|lda|ldb|n|N|cols|width|K|M)\w*\s*[\]+]"),
    "grid_stride": _pattern(r"gridDim\.x\s*\*\s*blockDim\.x|blockDim\.x\s*\*\s*gridDim\.x", "gridDim.x"),
    "restrict_ldg": _pattern(r"__restrict__|__ldg\s*\("),
    "async_copy": _any_of("cp.async", "memcpy_async", "cuda::pipeline", "make_block_ptr", "make_tensor_descriptor", "_tma_"),
    "fast_math": _any_of("__expf", "__fdividef", "__frcp", "rsqrtf", "__logf", "__sinf", "__cosf", "__tanhf", "tl.math.", "libdevice"),
    "branches": _pattern(r"if\s*\(|if\s+[^\n:]+:"),
    "cuda_launch_sites": _pattern(r"<<<"),
    "tl_dot": _pattern(r"tl\.dot\b"),
    "tl_loads": _pattern(r"tl\.load\("),
    "tl_stores": _pattern(r"tl\.store\("),
    "tl_reductions": _pattern(r"tl\.(?:sum|max|min|reduce|cumsum|argmax|argmin)\("),
    # `kernel[grid](`: found from its `[` (a literal start scans ~7× faster), a word character before it;
    # the grid may span lines and index a shape (`[(x.shape[0],)]`), the call opens on the line it ends.
    "triton_launch_sites": _pattern(r"\[(?<=\w\[)(?:[^\[\]]|\[[^\[\]]*\])*\][ \t]*\("),
    "autotune": _pattern(r"@triton\.autotune"),
    "cuda_graph": _pattern(
        r"CUDAGraph|torch\.cuda\.graph\b|make_graphed_callables", "CUDAGraph", "torch.cuda.graph", "make_graphed_callables"
    ),
    "torch_compile": _pattern(r"torch\.compile\(|torch\.jit\.(?:script|trace)"),
    "cudnn_flags": _any_of("cudnn.benchmark", "allow_tf32", "set_float32_matmul_precision"),
    "channels_last": _pattern(r"channels_last"),
    "streams": _any_of("torch.cuda.Stream", "cudaStream"),
    "inline_extension": _any_of("load_inline", "RawKernel", "RawModule", "cpp_extension"),
}
# PyTorch calls by what they cost: each is (at least) one launch and one pass over its data.
# Names are matched after a dot (torch.X, F.X, x.X, nn.X), never after `tl.`.
TORCH_OPS: dict[str, frozenset[str]] = {
    "heavy": frozenset(
        "matmul mm bmm einsum addmm baddbmm addbmm tensordot linear bilinear conv1d conv2d conv3d conv_transpose1d "
        "conv_transpose2d conv_transpose3d scaled_dot_product_attention Linear Bilinear Conv1d Conv2d Conv3d "
        "ConvTranspose1d ConvTranspose2d ConvTranspose3d LSTM GRU RNN MultiheadAttention Transformer".split()
    ),
    "reduction": frozenset(
        "sum mean max min amax amin softmax log_softmax norm vector_norm matrix_norm nansum nanmean var std argmax "
        "argmin logsumexp prod layer_norm group_norm batch_norm instance_norm rms_norm normalize all any kl_div cross_entropy "
        "mse_loss nll_loss smooth_l1_loss huber_loss triplet_margin_loss cosine_similarity max_pool1d max_pool2d "
        "max_pool3d avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool2d adaptive_max_pool2d LayerNorm BatchNorm1d "
        "BatchNorm2d BatchNorm3d GroupNorm InstanceNorm1d InstanceNorm2d InstanceNorm3d RMSNorm Softmax LogSoftmax "
        "MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d AdaptiveAvgPool2d AdaptiveMaxPool2d".split()
    ),
    "movement": frozenset(
        "t transpose permute contiguous cat concat stack split chunk index_select gather scatter take "
        "take_along_dim flip roll repeat repeat_interleave expand unfold fold pad embedding interpolate clone "
        "copy_ masked_fill tril triu diag pixel_shuffle Embedding Upsample PixelShuffle".split()
    ),
    # Library calls whose cost is neither a pass over memory nor FLOPs: sorting networks and
    # radix passes, scans (and the count-scan-scatter of compaction), atomics into bins.
    "sort": frozenset("sort argsort msort topk kthvalue median nanmedian mode quantile nanquantile unique searchsorted bucketize".split()),
    "scan": frozenset("cumsum cumprod cummax cummin logcumsumexp nonzero masked_select unique_consecutive".split()),
    "scatter": frozenset(
        "scatter_add scatter_add_ scatter_reduce scatter_reduce_ index_add index_add_ index_put_ index_reduce index_reduce_ "
        "bincount histc histogram embedding_bag EmbeddingBag segment_reduce".split()
    ),
    "elementwise": frozenset(
        "relu relu_ gelu sigmoid tanh exp log log1p add add_ mul mul_ sub div clamp clamp_ clip where abs sqrt rsqrt "
        "pow silu leaky_relu elu selu celu softplus softsign hardtanh hardswish hardsigmoid mish dropout maximum "
        "minimum neg sin cos erf sign reciprocal square lerp addcmul addcdiv float half bfloat16 "
        "ReLU GELU Sigmoid Tanh SiLU LeakyReLU ELU SELU Softplus Hardtanh Hardswish Mish Dropout".split()
    ),
    # A fill is a launch too: `out.zero_()`, `out.fill_(v)`, and cudaMemset in a C++ wrapper.
    "creation": frozenset(
        "zeros ones full zeros_like ones_like full_like arange rand randn zero_ fill_ cudaMemset cudaMemsetAsync".split()
    ),
}
_CALL = re.compile(r"(?<!tl)\.(\w+)\s*\(")
# The same calls in the C++ wrapper of a load_inline module (`torch::zeros_like(x)`, `at::matmul(a, b)`)
# and its memsets: a wrapper that zero-fills its output launches a fill before the kernel.
_CPP_CALL = re.compile(r"\b(?:(?:torch|at)::|(?=cudaMemset))(\w+)\s*\(")
# A Python def's parameters, over several lines too, to the end of its line; then each line of its
# body (indented deeper than the `indent` group the def starts at, or blank).
_PARAMETERS = r"\((?:[^()]|\([^()]*\))*\)[^\n]*\n"
_BODY_LINES = r"(?:(?P=indent)[ \t]+[^\n]*\n|[ \t]*\n)*"
# Functions whose calls are not part of the timed call: a KernelBench file's `get_inputs` makes the
# inputs (`torch.randn`) and `__init__` the parameters, once, before any timing.
_UNTIMED = re.compile(r"^(?P<indent>[ \t]*)def (?:get_inputs|get_init_inputs|__init__)\b[^\n]*\n" + _BODY_LINES, re.M)
# A Helion file's timed call runs one of its kernels (`@helion.kernel`), each one generated Triton
# kernel: the torch calls in a kernel's body are tile operations, its matmuls tensor-core dots, and
# the torch calls around the kernels set up and check them (Helion's examples verify themselves).
_HELION_KERNEL = re.compile(
    r"^(?P<indent>[ \t]*)@helion\.kernel\b[^\n]*\n(?:(?P=indent)@[^\n]*\n)*(?P=indent)def \w+" + _PARAMETERS + _BODY_LINES, re.M
)
# The backward pass (timed_path.BACKWARD_NAME) is read out, with its functions' decorators
# (`@staticmethod`: left behind, the text would no longer parse) and the lines of their bodies.
_BACKWARD = re.compile(r"^(?P<indent>[ \t]*)(?:@[^\n]*\n(?P=indent))*def " + BACKWARD_NAME + _PARAMETERS + _BODY_LINES, re.M | re.I)
# Tensor arithmetic in a forward/reference body: each binary operator is an elementwise launch.
_BODY = re.compile(r"def (?:forward|reference)\(.*?(?=\n\S|\Z)", re.S)
_ARITHMETIC = re.compile(r"[\w)\]]\s*(?:[-+*/]|\*\*)=?\s*[\w(]")
_MATMUL_OPERATOR = re.compile(" @ ")


# A module the model builds once in `__init__` (`self.conv = nn.Conv2d(...)`, or a `nn.Sequential` of
# several) and calls in its timed path (`self.conv(x)`): each call launches what the module's type
# does (TORCH_OPS names the types too), whatever the attribute is called.
_MODULE = re.compile(r"self\.(\w+)\s*(?::[^=\n]*)?=\s*(?:torch\.)?nn\.(\w+)\s*\(")
_MODULE_TYPE = re.compile(r"\bnn\.(\w+)\s*\(")
_MODULE_CALL = re.compile(r"self\.(\w+)(?=\s*\()")


def _module_types(text: str) -> dict[str, list[str]]:
    """Each module attribute `__init__` assigns, with the module types one call of it runs."""
    types: dict[str, list[str]] = {}
    for found in _MODULE.finditer(text):
        name, kind = found.groups()
        if kind == "Sequential":
            # The modules inside its parentheses, each run once a call.
            depth, end = 0, found.end() - 1
            for end in range(found.end() - 1, len(text)):
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                if depth == 0:
                    break
            types[name] = _MODULE_TYPE.findall(text, found.end(), end)
        else:
            types[name] = [kind]
    return types


def _calls_as_module_types(timed: str, types: dict[str, list[str]]) -> str:
    """The timed text with each call of a module attribute spelt as its types' calls (`self.conv(` → `.Conv2d(`)."""

    def spelt(found: re.Match[str]) -> str:
        kinds = types.get(found.group(1))
        return found.group(0) if kinds is None else "(.".join(f".{kind}" for kind in kinds)

    return _MODULE_CALL.sub(spelt, timed) if types else timed


def _torch_counts(text: str, repeats: dict[int, float]) -> dict[str, float]:
    """Each torch call in the timed text by kind, counted as many times as its line runs a call."""
    counts = dict.fromkeys(TORCH_OPS, 0.0)
    # Blanked, not cut out, so that line numbers still point where `repeats` says.
    text = _calls_as_module_types(blank(text, [found.span() for found in _UNTIMED.finditer(text)]), _module_types(text))
    runs = _runs_at(text, repeats)
    for found in [*_CALL.finditer(text), *_CPP_CALL.finditer(text)]:
        for kind, names in TORCH_OPS.items():
            if found.group(1) in names:
                counts[kind] += runs(found.start())
                break
    for body in _BODY.finditer(text):
        counts["elementwise"] += sum(runs(body.start() + found.start()) for found in _ARITHMETIC.finditer(body.group()))
        counts["heavy"] += sum(runs(body.start() + found.start()) for found in _MATMUL_OPERATOR.finditer(body.group()))
    return counts


def _runs_at(text: str, repeats: dict[int, float]) -> Callable[[int], float]:
    """Offset → how many times a call runs the line there (1 where `repeats` does not say)."""
    if not repeats:
        return lambda offset: 1.0
    starts = line_offsets(text)
    return lambda offset: repeats.get(bisect.bisect_right(starts, offset), 1.0)


# Python-only constructs: not looked for in C++ text (a .cu file; "cuda" sides in Python, such
# as KernelBench files with load_inline, are searched for them too).
_PYTHON_ONLY = frozenset(name for name in CODE_PATTERNS if name.startswith(("tl_", "triton_"))) | {
    "autotune",
    "cuda_graph",
    "cudnn_flags",
    "channels_last",
    "inline_extension",
}
_LANGUAGES = ("cuda", "triton", "pytorch")
_LIMITERS = ("registers", "shared", "blocks", "warps")
_SASS_COUNTS = ("total", "tensor_core", "global_loads", "global_stores", "shared_loads", "shared_stores", "barriers", "shuffles", "atomics")

LAUNCH_NAMES = (
    "launches",
    "zero_fills",
    "launch_from_facts",
    "launch_from_pragma",
    "launch_from_code",
    "blocks",
    "threads_per_block",
    "total_threads",
    "blocks_per_sm",
    "dynamic_shared",
    "num_warps",
    "num_stages",
    "largest_constexpr",
    "waves",
    "elements_per_thread",
    "loop_iterations",
    "global_accesses",
    "shared_accesses",
    "network_stages",
    "network_steps",
    "global_atomics",
    "shared_atomics",
    "bytes_in_flight",
    "instructions_per_sm",
    "serial_instructions",
    "accesses_per_thread",
    "wave_fill",
    "atomics_per_output_word",
)
FACT_NAMES = (
    "has_facts",
    "registers",
    "shared_bytes",
    "spill_bytes",
    "occupancy",
    *(f"limited_by_{name}" for name in _LIMITERS),
    *(f"sass_{name}" for name in _SASS_COUNTS),
    "sass_local",
    "sass_vector128_share",
    "sass_vector64_share",
)
PHYSICS_NAMES = ("floor_log2_us", "launch_log2_us", "memory_log2_us", "compute_log2_us", "passes", "tensor_core_peak", "library")
SIDE_NAMES: tuple[str, ...] = (
    *(f"lang_{name}" for name in _LANGUAGES),
    *(f"code_{name}" for name in CODE_PATTERNS),
    *(f"torch_{kind}" for kind in TORCH_OPS),
    *ACCESS_NAMES,
    *LAUNCH_NAMES,
    *FACT_NAMES,
    *PHYSICS_NAMES,
)
CONTEXT_NAMES: tuple[str, ...] = (
    "problem_known",
    "threads_log2",
    "dtype_bytes",
    "matmul_like",
    "bytes_log2",
    "bytes_over_l2",
    "hw_bandwidth",
    "hw_fp32",
    "hw_bf16",
    "hw_tf32",
    "hw_sms",
    "hw_cc",
    "hw_l2",
    "hw_threads_per_sm",
    "output_log2",
    "bytes_per_output_log2",
)
FEATURE_NAMES: tuple[str, ...] = (*SIDE_NAMES, *CONTEXT_NAMES)
FLOOR_INDEX = SIDE_NAMES.index("floor_log2_us")


def _log2p(value: float) -> float:
    return math.log2(1.0 + max(value, 0.0))


def strip_comments(code: str, language: str) -> str:
    """Comments out, so a commented-out `__shared__` does not count; CUDA inside Python strings too."""
    if language == "cuda":
        return _C_COMMENT.sub("", code)
    return _PY_COMMENT.sub("", _C_COMMENT_IN_PYTHON.sub("", code))


# Torch ops that compute (not allocating, reshaping or copying): a side with none shows no work of its own.
_COMPUTING_OPS = ("heavy", "reduction", "elementwise", "sort", "scan", "scatter")


@functools.lru_cache(maxsize=256)
def _side_text(code: str, language: str) -> tuple[str, str, bool]:
    """The side's text with comments cut; the same as one timed call runs it (in Python: the backward
    pass cut, the functions the call never reaches blanked); and whether it is Python. Shared by the
    code counts and the calls out of sight, which read one side while typing."""
    text = strip_comments(code, language)
    python = language != "cuda" or "import " in text or "def " in text
    if not python:
        return text, text, python
    timed = _BACKWARD.sub("", text)
    return text, blank(timed, unreached_spans(timed)), python


@functools.lru_cache(maxsize=256)
def kernels_out_of_sight(code: str, language: str) -> tuple[str, ...]:
    """The calls into other packages (`callee (module)`) of a Python side whose timed path shows no
    work of its own (no kernel, no launch, no torch op that computes): what it runs is in code the
    forecast never sees. Allocating and reshaping tensors around such calls is no work."""
    if "import" not in code:
        return ()
    text, timed, _ = _side_text(code, language)
    hidden = calls_out_of_sight(timed, text)
    if not hidden:
        return ()
    counts = read_code(code, language)
    kernels = len(triton_kernels(timed)) + timed.count("__global__") + timed.count("@helion.kernel")
    shown = kernels + counts["triton_launch_sites"] + counts["cuda_launch_sites"] + sum(counts[f"torch_{op}"] for op in _COMPUTING_OPS)
    return hidden if not shown else ()


# A CuTe or CUTLASS header, in CUDA or in a CUDA string of a Python side.
_TEMPLATE_LIBRARY_INCLUDE = re.compile(r'(?m)^[ \t]*#[ \t]*include[ \t]*[<"]((?:cute|cutlass)/[\w./]+)[>"]')


def templates_out_of_sight(code: str, language: str) -> tuple[str, ...]:
    """The CuTe and CUTLASS headers (`header (TEMPLATES_OUT_OF_SIGHT)`) a side's CUDA includes. A kernel
    built on them copies and multiplies through template calls (`cute::copy`, `cute::gemm`) whose trip
    counts, layouts and block size (`size(TiledMMA{})`) are fixed by template arguments the reader
    cannot evaluate: what it costs is as far out of sight as another package's kernel."""
    headers = _TEMPLATE_LIBRARY_INCLUDE.findall(strip_comments(code, language))
    return tuple(f"{header} ({TEMPLATES_OUT_OF_SIGHT})" for header in sorted(set(headers)))


@functools.lru_cache(maxsize=256)
def read_code(code: str, language: str, host_loops: bool = True) -> dict[str, float]:
    """Raw counts of CODE_PATTERNS in the side's text (cached: the reference rarely changes while typing);
    with `host_loops` off, a host loop's lines count once (the reading a guessed trip count is mixed with)."""
    stripped, text, python = _side_text(code, language)
    # The host cost of a library's dispatch layer around a Triton side's launch (the largest of those it uses).
    dispatch_us = max((DISPATCH_US[layer] for layer in _DISPATCH_LAYER.findall(stripped)), default=0.0) if python else 0.0
    text = one_path_each(text, python)
    if python:
        built_us = sum(DEFINED_IN_CALL_US + configs * AUTOTUNE_CONFIG_US for configs in kernels_built_each_call(text))
        tuned = tuned_share(text)
    else:
        built_us = tuned = 0.0
    counts = {name: 0.0 if name in _PYTHON_ONLY and not python else count(text) for name, count in CODE_PATTERNS.items()}
    repeats = line_repeats(text) if python and host_loops else {}
    if repeats:
        # A Triton kernel launched inside a host loop launches once a trip.
        runs = _runs_at(text, repeats)
        counts["triton_launch_sites"] = sum(runs(found.start()) for found in CODE_PATTERNS["triton_launch_sites"].regex.finditer(text))
    torch_counts = _torch_counts(text, repeats) if python else dict.fromkeys(TORCH_OPS, 0.0)
    if python and "@helion.kernel" in text:
        kernels = [found.group(0) for found in _HELION_KERNEL.finditer(text)]
        torch_counts = dict.fromkeys(TORCH_OPS, 0.0)
        counts["mma"] += max((_torch_counts(kernel, {})["heavy"] + kernel.count("hl.dot(") for kernel in kernels), default=0.0)
        counts["triton_launch_sites"] += 1.0
    # Read for the floor and the host shift, not fed to the weights as columns.
    physics = {
        "dispatch_us": dispatch_us,
        "built_us": built_us,
        "tuned_share": tuned,
        "fp32_dots": float(python and bool(FP32_DOT.search(text))),
    }
    return {**counts, **{f"torch_{kind}": value for kind, value in torch_counts.items()}, **physics}


@dataclass(frozen=True)
class Hardware:
    """The GPU numbers the floors need; an empty spec reads as the default target."""

    bandwidth_gbs: float
    fp32_tflops: float
    tf32_tflops: float
    bf16_tflops: float
    sm_count: int
    compute_capability: float
    l2_mb: float
    threads_per_sm: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Hardware:
        default = SPECS[DEFAULT_TARGET]

        def number(key: str, fallback: float) -> float:
            value = data.get(key)
            return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else fallback

        cc = data.get("compute_capability") or default.compute_capability
        return cls(
            number("peak_bandwidth_gbs", default.peak_bandwidth_gbs),
            number("fp32_tflops", default.fp32_tflops),
            number("tf32_tflops", default.tf32_tflops),
            number("bf16_tflops", default.bf16_tflops),
            int(number("sm_count", default.sm_count)),
            float(cc[0]) + float(cc[1]) / 10 if len(cc) >= 2 else 9.0,
            number("l2_mb", default.l2_mb),
            int(number("max_threads_per_sm", default.max_threads_per_sm)),
        )


@dataclass(frozen=True)
class Work:
    """What the problem asks of any implementation: the same for both sides."""

    known: bool
    dtype_bytes: int
    matmul_like: bool
    bytes: float
    flops: float


def _launches_of(side: KernelSide) -> tuple[list[dict[str, Any]], str]:
    """The side's launches and where they came from: facts, a launch pragma, or nothing."""
    facts = side.facts if isinstance(side.facts, dict) else {}
    launches = facts.get("launches")
    if isinstance(launches, list) and launches:
        return [launch for launch in launches if isinstance(launch, dict)], "facts"
    # Each pragma names the kernel under it, so the kernel's loops and accesses are read too.
    specs = launch_specs(side.code, "triton" if side.language == "triton" else "cuda").values()
    found = [spec.as_launch() for spec in specs if isinstance(spec, LaunchSpec)]
    return found, "pragma" if found else "code"


def _product(values: Any) -> float:
    total = 1.0
    for value in values or ():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            total *= float(value)
    return total


def _uses_tensor_cores(counts: dict[str, float], facts: dict[str, Any]) -> bool:
    sass = facts.get("sass") or {}
    return bool(sass.get("tensor_core")) or counts["mma"] > 0 or counts["tl_dot"] > 0


def work_of(request: ForecastRequest, counts: tuple[dict[str, float], dict[str, float]], pragma_bytes: float) -> Work:
    """Bytes and FLOPs from the problem sizes, symmetric in the two sides.

    Sizes name no roles, so the estimate is coarse: a matmul-like problem (either side
    multiplies matrices) is read as M·N·K from its three largest sizes; otherwise the
    data is the product of the two largest sizes. A launch pragma's arrays, when a side
    has one, give the bytes exactly.
    """
    problem = request.problem or {}
    sizes = _sizes(problem)
    dtype = problem.get("dtype")
    dtype_bytes = DTYPE_BYTES.get(dtype, 4) if isinstance(dtype, str) else 4
    facts = [side.facts if isinstance(side.facts, dict) else {} for side in (request.reference, request.candidate)]
    matmul_like = any(c["torch_heavy"] > 0 or _uses_tensor_cores(c, f) for c, f in zip(counts, facts))
    if not sizes and not pragma_bytes:
        return Work(False, dtype_bytes, matmul_like, 0.0, 0.0)
    if matmul_like and len(sizes) >= 3:
        m, n, k = sizes[:3]
        elements = m * k + k * n + m * n
        flops = 2.0 * m * n * k
    else:
        elements = problem_elements(problem)
        flops = elements
    data = pragma_bytes or 2.0 * elements * dtype_bytes
    return Work(True, dtype_bytes, matmul_like, data, flops)


def _sizes(problem: dict[str, Any]) -> tuple[float, ...]:
    """The problem's positive numbers, largest first."""
    numbers = (float(v) for v in problem.values() if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0)
    return tuple(sorted(numbers, reverse=True))


def problem_elements(problem: dict[str, Any]) -> float:
    """The elements of a problem that multiplies no matrices: the product of its two largest sizes (0 with none)."""
    sizes = _sizes(problem)
    return min(_product(sizes[:2]), MAX_ELEMENTS) if sizes else 0.0


def _total_threads(launches: list[dict[str, Any]]) -> float:
    return sum(_launch_threads(launch) for launch in _real(launches))


def _launch_threads(launch: dict[str, Any]) -> float:
    """All threads (CUDA) or all programs' threads (Triton) one launch starts."""
    return _product(launch.get("grid")) * _threads(launch)


def _torch_launches(counts: dict[str, float]) -> float:
    return sum(counts[f"torch_{kind}"] for kind in TORCH_OPS)


def _threads(launch: dict[str, Any]) -> float:
    """Threads per block; a Triton launch has num_warps instead of a block (its default is 4)."""
    if launch.get("num_warps") or _product(launch.get("block")) <= 1:
        return 32.0 * float(launch.get("num_warps") or 4)
    return _product(launch.get("block"))


def _real(launches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Kernel launches, without the corpus's zero fills (`__zero__`)."""
    return [launch for launch in launches if not str(launch.get("kernel", "")).startswith("__")]


def _heaviest(side: KernelSide, launches: list[dict[str, Any]], facts: dict[str, Any]) -> dict[str, Any] | None:
    """The launch whose shape is the side's: the most instructions issued (threads × loop trips × its
    kernel's SASS count where the facts give it), not the most threads.

    A one-block kernel looping over all rows after a wide column-means pass is what takes the time,
    and so is a Triton attention's tile product (thousands of instructions a thread) beside its
    wider row softmax.
    """

    def issued(launch: dict[str, Any]) -> float:
        per_thread = float((_kernel_facts(facts, launch).get("sass") or {}).get("total") or 0) or 1.0
        return _launch_threads(launch) * max(1.0, _iterations(side, launch)) * per_thread

    return max(_real(launches), key=issued, default=None)


def _kernel_facts(facts: dict[str, Any], main: dict[str, Any] | None) -> dict[str, Any]:
    """The heaviest launch's own compiler facts where the side lists each kernel's (a corpus side
    of several kernels); else the side's (the editor's: one kernel, its own)."""
    kernels = facts.get("kernels")
    own = kernels.get(main.get("kernel")) if isinstance(kernels, dict) and main else None
    return own if isinstance(own, dict) and not own.get("error") else facts


def _launch_vector(
    side: KernelSide,
    launches: list[dict[str, Any]],
    main: dict[str, Any] | None,
    origin: str,
    counts: dict[str, float],
    facts: dict[str, Any],
    work: Work,
    hardware: Hardware,
) -> list[float]:
    real = _real(launches)
    if launches:
        count = float(len(launches))
    else:
        count = max(1.0, counts["cuda_launch_sites"] + counts["triton_launch_sites"] + _torch_launches(counts))
    blocks = _product(main.get("grid")) if main else 0.0
    threads = _threads(main) if main else 0.0
    total_threads = _total_threads(real)
    constexprs = [v for launch in real for v in (launch.get("constexprs") or {}).values() if isinstance(v, int) and not isinstance(v, bool)]
    # Waves: how many times the GPU is filled with resident blocks (tail effects, idle SMs below 1).
    blocks_per_sm = float((facts.get("occupancy") or {}).get("active_blocks_per_sm") or 1)
    waves = blocks / (blocks_per_sm * hardware.sm_count)
    traffic = _all_threads_work(side, real)
    iterations = _iterations(side, main)
    elements = work.bytes / work.dtype_bytes
    return [
        math.log2(count),
        float(len(launches) - len(real)),
        float(origin == "facts"),
        float(origin == "pragma"),
        float(origin == "code"),
        _log2p(blocks),
        _log2p(threads),
        _log2p(total_threads),
        _log2p(blocks / hardware.sm_count),
        _log2p(float(main.get("shared_bytes") or 0) if main else 0.0),
        _log2p(float(main.get("num_warps") or 0) if main else 0.0),
        _log2p(float(main.get("num_stages") or 0) if main else 0.0),
        _log2p(float(max(constexprs, default=0))),
        _log2p(waves),
        _log2p(elements / total_threads) if total_threads and elements else 0.0,
        _log2p(iterations),
        _log2p(traffic.global_accesses),
        _log2p(traffic.shared_accesses),
        _log2p(traffic.network_stages),
        _log2p(traffic.network_steps),
        _log2p(traffic.global_atomics),
        _log2p(traffic.shared_atomics),
        *_parallelism(
            facts.get("sass") or {},
            min(blocks / hardware.sm_count, blocks_per_sm) * threads,
            waves,
            iterations,
            total_threads,
            traffic.global_accesses,
            hardware,
        ),
        # How many updates each written word takes: a scatter into 16 keys serialises on them, one into a million does not.
        _log2p(traffic.global_atomics / (output / 4)) if (output := _output_bytes(real)) else 0.0,
    ]


def _output_bytes(launches: list[dict[str, Any]]) -> float:
    """Bytes of the outputs the launches name (a launch pragma's `:out` arrays, the corpus's outputs)."""
    return sum(float(launch.get("output_bytes") or 0) for launch in launches)


def _iterations(side: KernelSide, launch: dict[str, Any] | None) -> float:
    return thread_work(side.code, side.language, launch).iterations


def _parallelism(
    sass: dict[str, Any],
    resident_threads: float,
    waves: float,
    iterations: float,
    total_threads: float,
    global_accesses: float,
    hardware: Hardware,
) -> list[float]:
    """What the SMs have in flight and how much each must issue, as products a model cannot form from their logs.

    A block-size, num_warps or vector-width edit moves a memory-bound kernel by how many bytes
    each SM has outstanding (its resident threads times each thread's loads and their width,
    Little's law), and a compute-bound one by the instructions each SM issues; a tail of
    blocks that only part-fills the last wave idles SMs. Static SASS counts stand in for one
    pass of the loop body; without the SASS mix the first three read 0.
    """
    wide, medium = _vector_shares(sass)
    load_bytes = float(sass.get("global_loads") or 0) * (16.0 * wide + 8.0 * medium + 4.0 * (1.0 - wide - medium))
    instructions = float(sass.get("total") or 0)
    return [
        _log2p(resident_threads * load_bytes),
        _log2p(total_threads * instructions * max(iterations, 1.0) / hardware.sm_count),
        _log2p(max(waves, 1.0) * max(iterations, 1.0) * instructions),
        _log2p(global_accesses / total_threads) if total_threads else 0.0,
        waves / math.ceil(waves) if waves >= 1.0 else waves,
    ]


def _all_threads_work(side: KernelSide, launches: list[dict[str, Any]]) -> ThreadWork:
    """The memory accesses of every thread (CUDA) or program (Triton) of every launch: the traffic the caches see."""
    total = NO_WORK
    for launch in launches:
        workers = _product(launch.get("grid")) * (1.0 if side.language == "triton" else _threads(launch))
        total = total + thread_work(side.code, side.language, launch).times(workers)
    return total


def _fact_vector(facts: dict[str, Any]) -> list[float]:
    if not facts or facts.get("registers") is None and not facts.get("sass"):
        return [0.0] * len(FACT_NAMES)
    occupancy = facts.get("occupancy") or {}
    sass = facts.get("sass") or {}
    limited = str(occupancy.get("limited_by") or "")
    return [
        1.0,
        float(facts.get("registers") or 0) / 64.0,
        _log2p(float(facts.get("shared_static_bytes") or 0) + float(facts.get("shared_dynamic_bytes") or 0)),
        _log2p(float(facts.get("spill_store_bytes") or 0) + float(facts.get("spill_load_bytes") or 0)),
        float(occupancy.get("fraction") or 0.0),
        *(float(name in limited) for name in _LIMITERS),
        *(_log2p(float(sass.get(name) or 0)) for name in _SASS_COUNTS),
        _log2p(float(sass.get("local_loads") or 0) + float(sass.get("local_stores") or 0)),
        *_vector_shares(sass),
    ]


def _vector_shares(sass: dict[str, Any]) -> tuple[float, float]:
    """The shares of global loads that are 128-bit and 64-bit wide."""
    loads = float(sass.get("global_loads") or 0)
    if not loads:
        return 0.0, 0.0
    return float(sass.get("vector_loads_128") or 0) / loads, float(sass.get("vector_loads_64") or 0) / loads


def _physics(
    side: KernelSide, counts: dict[str, float], facts: dict[str, Any], traffic: float, launches: float, work: Work, hardware: Hardware
) -> list[float]:
    """Roofline floor of this side in log2 µs, and its parts.

    `traffic` is the bytes this side's launches name, summed over launches (a launch pragma
    gives them; else 0 and every pass reads the problem's bytes): the two sides of a
    float → half edit move different bytes on one shape, and a small second pass (a
    tile-count scan, a finishing sum of partials) adds its own few bytes, not a full pass.
    """
    library = side.language == "pytorch" and counts["torch_heavy"] > 0 and counts["inline_extension"] == 0
    tensor_cores = _uses_tensor_cores(counts, facts) or (library and work.dtype_bytes <= 2)
    if tensor_cores and work.dtype_bytes <= 2:
        peak = hardware.bf16_tflops
    elif tensor_cores and not counts["fp32_dots"]:
        peak = hardware.tf32_tflops
    else:
        peak = hardware.fp32_tflops
    efficiency = LIBRARY_EFFICIENCY if library else 1.0
    if _compiled(side, counts):
        passes = _compiled_kernels(counts)
        launch_us = COMPILED_CALL_US + passes * LAUNCH_US
    elif side.language == "pytorch":
        passes = max(1.0, _torch_launches(counts))
        launch_us = launches * TORCH_OP_US
    else:
        passes = launches
        launch_us = launches * LAUNCH_US
    memory_us = (traffic or passes * work.bytes) / (hardware.bandwidth_gbs * 1e3)
    compute_us = work.flops / (peak * efficiency * 1e6) if work.matmul_like else 0.0
    if side.language == "triton" and counts["tl_dot"] + counts["tl_reductions"] > 0:
        # Its tuned kernels run their fastest config; the weights learnt kernels of one config.
        tuned = 2.0 ** (AUTOTUNE_GAIN_LOG2 * counts["tuned_share"])
        memory_us, compute_us = memory_us / tuned, compute_us / tuned
    floor = launch_us + max(memory_us, compute_us)
    return [
        math.log2(floor),
        math.log2(launch_us),
        _log2p(memory_us),
        _log2p(compute_us),
        math.log2(passes),
        float(tensor_cores),
        float(library),
    ]


def host_shift(request: ForecastRequest, rows: np.ndarray) -> np.ndarray:
    """(2,) octaves by which work no training row had lengthens each Triton side's call beyond what
    the weights forecast, `rows` the pair's features. Host work adds log2((floor + host µs) / floor):
    a library's dispatch layer (DISPATCH_US) and kernels built, or autotuned, inside the call
    (DEFINED_IN_CALL_US, AUTOTUNE_CONFIG_US). It is added to the weights' forecast, not fed to them
    in the floor: the weights follow a floor's move by about three quarters and then pull part of it
    back, so read through the floor FlagGems' abs at 64×64 was forecast 2.2× slower than eager where
    its floor said 4.5× (measured 7.7×), and LLMKernel's solutions that build their kernel each call
    about 2.5× slower than eager where they measured 45×. A grid that repeats its work adds
    repeated_grid_octaves."""
    hardware = Hardware.from_json(request.hardware or {})
    shifts = []
    for side, row in zip((request.reference, request.candidate), rows):
        if side.language != "triton":
            shifts.append(0.0)
            continue
        counts = read_code(side.code, side.language)
        host_us = counts.get("dispatch_us", 0.0) + counts.get("built_us", 0.0)
        host_us += few_value_program_us(side.code, hardware, problem_elements(request.problem or {}))
        floor_us = 2.0 ** float(row[FLOOR_INDEX])
        shifts.append(math.log2((floor_us + host_us) / floor_us) + repeated_grid_octaves(side.code, hardware))
    return np.array(shifts)


def programs_at_once(hardware: Hardware) -> int:
    """The Triton programs of the default 4 warps the GPU holds at once: a wave."""
    return hardware.sm_count * max(1, hardware.threads_per_sm // (32 * TRITON_DEFAULT_WARPS))


def few_value_program_us(code: str, hardware: Hardware, elements: float) -> float:
    """µs the side's launches of programs that each work on a few values (host_launch.few_value_programs)
    take: FEW_VALUE_WAVE_US a wave of the programs they start on a problem of `elements` elements. The
    weights learnt kernels whose programs take a block of hundreds of values or more, so they read such
    a side as moving its bytes at bandwidth; TritonBench's ReLU and abs written with one value a
    program measured about 100x slower than eager at 2^20 elements, and its sine with blocks of 4
    values on a program per element took as long as one value a program does."""
    at_once = programs_at_once(hardware)
    return sum(math.ceil(launch.programs_at(elements) / at_once) for launch in few_value_programs(code)) * FEW_VALUE_WAVE_US


def repeated_grid_octaves(code: str, hardware: Hardware) -> float:
    """Octaves by which the side's most repeated launch (host_launch.repeated_grids) lengthens it: its
    grid runs in waves of the programs the GPU holds at once, so the copies cost the waves they add;
    as many times over as there are copies where the text does not fix the grid the kernel reads.
    No generated kernel the weights learnt from repeats its grid. On the H200 (bench_repeated_grid.py)
    this is within 0.2 octaves of the measured cost from 2^24 elements up, 1.2-1.6 octaves above it
    at 2^20 (a grid of half a wave, whose copies read from L2) and 0.6 below at 4,096 elements; on
    TritonBench's LLM-written Triton, `kernel[grid, BLOCK_SIZE]` with 1,024 over 2^27 and 2^28
    elements measured 1,000-1,070x slower than `kernel[grid]`."""
    at_once = programs_at_once(hardware)
    worst = 1.0
    for grid in repeated_grids(code):
        if grid.programs is None:
            worst = max(worst, float(grid.copies))
        else:
            worst = max(worst, math.ceil(grid.copies * grid.programs / at_once) / math.ceil(grid.programs / at_once))
    return math.log2(worst)


def _compiled(side: KernelSide, counts: dict[str, float]) -> bool:
    """A PyTorch side that runs its ops through torch.compile (a `ModelNew(Model)` compiling the problem)."""
    return side.language == "pytorch" and counts["torch_compile"] > 0


def _compiled_kernels(counts: dict[str, float]) -> float:
    """The kernels torch.compile makes of a side's eager ops: GEMMs and convolutions stay library
    calls, each reduction, sort, scan or scatter is a kernel with the elementwise work around it
    fused in, and elementwise and data-movement ops with no reduction to join fuse into one more."""
    separate = sum(counts[f"torch_{kind}"] for kind in ("heavy", "reduction", "sort", "scan", "scatter"))
    pointwise = sum(counts[f"torch_{kind}"] for kind in ("elementwise", "movement", "creation"))
    return max(1.0, separate + float(pointwise > 0 and counts["torch_reduction"] == 0))


def _with_input_bytes(work: Work, sides: tuple[KernelSide, KernelSide]) -> Work:
    """The work with its bytes read from the shapes a KernelBench file's `get_inputs()` makes (read
    and written once), where that is more than the sizes say. Two named sizes undercount a problem
    of four dimensions (a batch of images) by orders of magnitude, and then a compiled call's fixed
    cost would swamp work that in truth takes milliseconds."""
    numel = 0
    for side in sides:
        spec = find_launch_spec(side.code, "Model", "pytorch") if side.language == "pytorch" else None
        numel = max(numel, sum(math.prod(shape) for shape in spec.inputs) if spec else 0)
    if not numel:
        return work
    return replace(work, known=True, bytes=max(work.bytes, 2.0 * numel * work.dtype_bytes))


def _context_vector(work: Work, hardware: Hardware, threads: float, output: float) -> list[float]:
    """`threads`: the most threads either side launches, a second reading of the problem's scale;
    `output`: the most output bytes either side's launches name (0: unknown), against which the
    bytes say how many inputs each output element reduces or gathers.

    Single sizes are left out on purpose: their sorted values name the operation (and let a
    model memorise it) more than they describe work on an operation it has not seen. So are
    their product and the FLOPs read from them: an editor's problem often names fewer sizes
    than its tensors have (a square SGEMM as one N), which read 2^20 times smaller than the
    same problem in the corpus, and the README's SGEMM edit was forecast the wrong way round.
    Bytes (exact from a launch pragma's arrays) and threads carry the scale instead.
    """
    return [
        float(work.known),
        _log2p(threads),
        math.log2(work.dtype_bytes),
        float(work.matmul_like),
        _log2p(work.bytes),
        _log2p(work.bytes / (hardware.l2_mb * 2**20)),
        math.log2(hardware.bandwidth_gbs),
        math.log2(hardware.fp32_tflops),
        math.log2(hardware.bf16_tflops),
        math.log2(hardware.tf32_tflops),
        math.log2(hardware.sm_count),
        hardware.compute_capability,
        math.log2(hardware.l2_mb),
        hardware.threads_per_sm / 1024.0,
        _log2p(output),
        _log2p(work.bytes) - _log2p(output) if output else 0.0,
    ]


def without_launches(request: ForecastRequest) -> ForecastRequest:
    """The request with neither side's launch list: each side read from its code alone."""

    def side(kernel: KernelSide) -> KernelSide:
        facts = {key: value for key, value in (kernel.facts or {}).items() if key != "launches"}
        return replace(kernel, facts=facts or None)

    return replace(request, reference=side(request.reference), candidate=side(request.candidate))


def pair_features(request: ForecastRequest, host_loops: bool = True) -> np.ndarray:
    """(2, len(FEATURE_NAMES)) rows for the reference and the candidate, each with the shared context
    (`host_loops`: see read_code).

    Swapping the sides swaps the rows and nothing else: the model that reads them is
    antisymmetric by construction. A KernelBench pair read through a fitted line
    (`kernelbench_prior.py`) is read as the lines were fitted, without the launches its
    ModelNew makes of its own kernels; an edit of one solution is read from them. The trees
    given those launches (the weights not), each source held out, read LLMKernel's Triton
    solutions worse (direction 0.649 -> 0.586): what block sizes and access patterns mean was
    learnt from the CUDA sources and does not carry over. With a load_inline wrapper's sizes read off
    what its caller passes it, the trees and lines refitted on those launches read the ten sources
    at 0.769 where they read them at 0.771 without (LLMKernel 0.676 -> 0.651, TritonBench 0.606 ->
    0.564, technoabsurdist 0.859 -> 0.879). Nor does the ModelNew side get the compiler facts of its
    own kernels (its heaviest kernel's registers, spills, occupancy and SASS mix), though the editor
    shows them on each kernel: the trees given them read
    LLMKernel at 0.647-0.656 where they read it at 0.677 without, and seven KernelBench-style
    sources at 0.716-0.731 where they read them at 0.743 (six seeds each). Nor do the Triton
    choices a solution's text states without its launch (the smallest and largest BLOCK constant,
    num_warps, num_stages, how many autotune configs, tl.dot operand precision): given to the
    trees they moved the six KernelBench-style sources other than fla by -0.004 to +0.005,
    LLMKernel not at all (0.677 either way), and fla's 46 pairs by -0.26 to +0.13 from one choice to the next.
    Nor what one Triton program does in its loop nest (how deep it loads; loads in loops of one value
    against a block; the accumulator's rank; `a[:, None] * b[None, :]` outer products): given to the
    trees alone (workshop/training/kernelbench_probe.py, mean of twelve sources), they moved the
    sources held out 0.751 -> 0.759-0.764, most of it helion's 57 pairs (0.596 -> 0.70-0.72) while
    LLMKernel fell (0.650 -> 0.638-0.644), and the problems held out 0.789 -> 0.780-0.786.
    Nor are two solutions whose rows match once their launches are dropped (most differ only in
    autotune configs or block constants) read as a launch edit, launches and edit flag included: the
    trees alone moved the twelve sources held out 0.745 -> 0.747, and read those pairs at 0.45
    (LLMKernel's 239), 0.58 (TritonBench's 791) and 0.55 (eh_kernelbench's 96, its edits among them).
    """
    if pair_kind(request) in SOLUTION_KINDS:
        request = without_launches(request)
    sides = (request.reference, request.candidate)
    hardware = Hardware.from_json(request.hardware or {})
    counts = tuple(read_code(side.code, side.language, host_loops) for side in sides)
    launches = tuple(_launches_of(side) for side in sides)
    bytes_per_launch = tuple([float(launch.get("bytes") or 0) for launch in found] for found, _ in launches)
    work = work_of(request, counts, max(max(side, default=0.0) for side in bytes_per_launch))
    if any(_compiled(side, side_counts) for side, side_counts in zip(sides, counts)):
        # Few pairs the weights learnt from have a compiled side (48 of CUDA-L1's 6,784, none generated),
        # so these can read sizes better than the weights were fitted with.
        work = _with_input_bytes(work, sides)
    output = max(_output_bytes(_real(found)) for found, _ in launches)
    context = _context_vector(work, hardware, max(_total_threads(found) for found, _ in launches), output)
    rows = []
    for side, side_counts, (found, origin), launch_bytes in zip(sides, counts, launches, bytes_per_launch):
        side_facts = side.facts if isinstance(side.facts, dict) else {}
        main = _heaviest(side, found, side_facts)
        facts = _kernel_facts(side_facts, main)
        launch_part = _launch_vector(side, found, main, origin, side_counts, facts, work, hardware)
        rows.append(
            [
                *(float(side.language == name) for name in _LANGUAGES),
                *(_log2p(side_counts[name]) for name in CODE_PATTERNS),
                *(_log2p(side_counts[f"torch_{kind}"]) for kind in TORCH_OPS),
                *access_summary(side.code, side.language, found),
                *launch_part,
                *_fact_vector(facts),
                *_physics(side, side_counts, facts, sum(launch_bytes), 2.0 ** launch_part[0], work, hardware),
                *context,
            ]
        )
    return np.asarray(rows, dtype=np.float64)


# Library calls (`tl.dot`, `torch.empty_like`), CUDA qualifiers and builtins, atomics, loops and
# block-size names as written: the KernelBench trees read how often each of the commonest ones a side
# writes, which tells them apart where the counts above agree (two agents' rewrites of one problem).
_API_TOKEN = re.compile(
    r"\b(?:tl|triton|torch|F|nn|libdevice|cute|wmma|cuda)\.[A-Za-z_][\w.]*|\b__\w+\b|\batomic\w+\b"
    r"|\b(?:for|while|if|range|static_range|multiple_of|max_contiguous|num_warps|num_stages|BLOCK\w*|threadIdx|blockIdx)\b"
)
_HASH_COMMENT = re.compile(r"(?m)#[^\n]*")


@functools.lru_cache(maxsize=256)
def api_tokens(code: str) -> Counter[str]:
    """How often the side's text writes each API token (`_API_TOKEN`), `#` comments and directives cut.
    A side that imports is read as Python: its string literals are read as the text they hold, so a
    kernel kept in a one-line literal (`KERNEL_SOURCE = '#include …\\n…'`) counts its own tokens,
    not only its wrapper's.
    Not `strip_comments`: the shipped trees learnt these counts, and that cut (`//`, `/* */` too)
    would move them."""
    readable = _python_text(code) if "import " in code else None
    text = readable if readable is not None else _HASH_COMMENT.sub("", code)
    return Counter(token.rstrip(".") for token in _API_TOKEN.findall(text))


def _python_text(code: str) -> str | None:
    """The code with its comments cut and each string literal replaced by its value, that value's
    `#` lines cut too; None where Python's tokenizer cannot read it (a CUDA file, an unclosed string or bracket)."""
    starts = line_offsets(code)
    lines = [code[begin:end] for begin, end in zip(starts, starts[1:])]
    pieces, done = [], 0
    try:
        for token in tokenize.generate_tokens(iter(lines).__next__):
            if token.type not in (tokenize.COMMENT, tokenize.STRING):
                continue
            begin = starts[token.start[0] - 1] + token.start[1]
            pieces.append(code[done:begin])
            if token.type == tokenize.STRING:
                pieces.append(f" {_HASH_COMMENT.sub('', _string_value(token.string))} ")
            done = starts[token.end[0] - 1] + token.end[1]
    except (tokenize.TokenError, SyntaxError, StopIteration):
        return None
    pieces.append(code[done:])
    return "".join(pieces)


def _string_value(literal: str) -> str:
    """A string literal's value; an f-string or a literal that does not evaluate stays as written,
    a bytes literal holds no text."""
    try:
        value = parse_python_expression(literal)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return literal
    if not isinstance(value, ast.Constant):
        return literal
    return value.value if isinstance(value.value, str) else ""


def token_counts(codes: Sequence[tuple[str, str]], vocabulary: Sequence[str]) -> np.ndarray:
    """(N, 2, len(vocabulary)) log(1 + count) of each vocabulary token in each (reference, candidate) text."""
    counts = np.zeros((len(codes), 2, len(vocabulary)))
    for i, sides in enumerate(codes):
        for side, code in enumerate(sides):
            written = api_tokens(code)
            counts[i, side] = [math.log1p(written[token]) for token in vocabulary]
    return counts
