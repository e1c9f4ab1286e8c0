"""Library operators: a library's Triton kernel for one op, shape and dtype, measured as a KernelBench pair.

For each (library, op, shape, dtype) two files are generated here from our own templates: a
reference (`Model.forward` calls the eager torch op; `get_inputs()` builds inputs of that shape
and dtype) and a candidate (the reference's text and a `ModelNew(Model)` whose forward calls the
library's function instead). Both go through the runner and worker like any KernelBench file, so a
library kernel is checked for correctness first and timed the same way; a second entry per
operator-shape times the reference under torch.compile, the other reference.

The manifest (`data/library_manifest.jsonl.gz`) holds no code: per entry the library file that
implements the op (repository, pinned commit, path, SHA-256), op, shape, dtype, the group id of
the operator-shape (`problem`) and the digests of the two generated files. `pack` regenerates the
files, checks their digests, and copies the library's package from the mirror into `BATCH/lib/`,
which the runner puts on the worker's PYTHONPATH.

    python -m workshop realworld library-manifest --mirrors /work/.mirror
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import re
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelcast.kernels_runtime.source.launch_spec import kernelbench_problem
from workshop.realworld.manifest import DATA, INDUCTOR, Mirror, write_rows

LIBRARY_MANIFEST = DATA / "library_manifest.jsonl.gz"
# Inputs above this many elements are left out: at 4 bytes each a tensor stays under 1 GiB, so a
# call takes milliseconds and the worker's clones and checks fit the GPU many times over.
MAX_ELEMENTS = 2**28
# The keys a library entry adds to the KernelBench entry's (manifest.Entry); records keep them.
LIBRARY_KEYS = ("op", "shape", "dtype", "candidate_sha256")
TORCH_DTYPES = {"float32": "torch.float32", "bfloat16": "torch.bfloat16", "int32": "torch.int32", "bool": "torch.bool"}
FLOATS = ("float32", "bfloat16")


@dataclass(frozen=True)
class Library:
    """A listed library, pinned, and what the GPU host needs to import it."""

    name: str
    repo: str
    commit: str
    licence: str
    package: str  # the package's folder in the repository, carried to the GPU host as BATCH/lib/<its last part>
    wheels: tuple[str, ...]  # what its import needs beyond torch, triton and numpy: wheels for .dev/rw/whl
    preamble: str = ""  # lines a candidate runs before it imports the library
    carried: tuple[str, ...] = ()  # the package's files and folders its imports need; none named: all of it

    @property
    def module(self) -> str:
        return self.package.rsplit("/", 1)[-1]

    @property
    def prefix(self) -> str:
        """The folder that holds the package in the repository ('src/'), empty where it is at the root."""
        return self.package[: -len(self.module)]


@dataclass(frozen=True)
class Op:
    """One operator of a library, written as templates over module constants.

    `inputs` builds get_inputs()' list, `eager` is Model.forward's expression over `args`,
    `library` is ModelNew.forward's, calling the library's `function` as `library_op`;
    `parameters` are Model's own (ModelNew subclasses it, so both hold the same values).
    Templates name the shape's dims as Python constants; `{dtype}` is the torch dtype,
    `{shape}` the dims in order and `{last}` the last dim's name."""

    name: str
    function: str
    args: str
    inputs: str
    eager: str
    library: str
    shapes: str  # FlagGems: a key of benchmark/core_shapes.yaml; Liger: a key of LIGER_SHAPES
    dtypes: tuple[str, ...] = FLOATS
    parameters: str = ""


# FlagGems' launch cache (utils/libentry.py) at this commit hands a cached kernel its constexprs
# only when it sees Triton 3.3-3.5; Triton 3.6's launcher takes the same arguments, so on 3.6 and
# later the cache is told 3.5. Without this every cached launch fails with "takes exactly N arguments".
FLAGGEMS_ON_NEWER_TRITON = """import importlib  # noqa: E402

import triton  # noqa: E402

# flag_gems.utils re-exports the decorator under the module's name: the module itself is wanted.
flaggems_libentry = importlib.import_module("flag_gems.utils.libentry")

if tuple(int(part) for part in triton.__version__.split(".")[:2]) >= (3, 6):
    flaggems_libentry.major_version, flaggems_libentry.minor_version = 3, 5
"""
FLAGGEMS = Library(
    "flaggems",
    "FlagOpen/FlagGems",
    "532ff438c70343d7aec9becdabb76a71225a0553",
    "Apache-2.0",
    "src/flag_gems",
    ("PyYAML",),
    FLAGGEMS_ON_NEWER_TRITON,
)
LIGER = Library("liger", "linkedin/Liger-Kernel", "ead96b618e5c67bddc6a6e9bcb99bfe6b5ab661c", "BSD-2", "src/liger_kernel", ("packaging",))
LIBRARIES = (FLAGGEMS, LIGER)

X = "torch.randn({shape}, dtype={dtype})"
# A library kernel and eager PyTorch round bf16 at different steps, so their outputs differ by a
# bf16 ulp or two (2^-7 = 7.8e-3 relative each) where KernelBench's 1e-2 allows about one:
# bf16 entries are checked at atol = rtol = 2e-2, as kernelcast measure --tolerance 2e-2 would.
CHECK_TOLERANCE = {"bfloat16": "2e-2"}


def _vectors(size: str, *names: str) -> str:
    """Model.__init__ lines: one random parameter vector of `size` elements per name."""
    return "\n        ".join(f"self.{name} = nn.Parameter(torch.randn({size}, dtype={{dtype}}))" for name in names)


POSITIVE = "torch.rand({shape}, dtype={dtype}) + 0.5"
BOOLS = "torch.rand({shape}) > 0.5"
INTS = "torch.randint(-1000, 1000, ({shape},), dtype=torch.int32)"


def _unary(name: str, eager: str, function: str | None = None, inputs: str = X, dtypes: tuple[str, ...] = FLOATS, call: str = "x") -> Op:
    return Op(name, function or name, "x", inputs, eager, f"library_op({call})", "UnaryPointwiseBenchmark", dtypes)


def _binary(name: str, eager: str, function: str | None = None, inputs: str = f"{X}, {X}", dtypes: tuple[str, ...] = FLOATS) -> Op:
    return Op(name, function or name, "x, y", inputs, eager, "library_op(x, y)", "Benchmark", dtypes)


def _reduction(name: str, eager: str, library: str, function: str | None = None, inputs: str = X, dtypes: tuple[str, ...] = FLOATS) -> Op:
    return Op(name, function or name, "x", inputs, eager, library, "UnaryReductionBenchmark", dtypes)


# FlagGems: each op's function as flag_gems.ops exports it, called with aten's arguments.
FLAGGEMS_OPS: tuple[Op, ...] = (
    _unary("abs", "torch.abs(x)"),
    _unary("neg", "torch.neg(x)"),
    _unary("exp", "torch.exp(x)"),
    _unary("exp2", "torch.exp2(x)"),
    _unary("log", "torch.log(x)", inputs=POSITIVE),
    _unary("sqrt", "torch.sqrt(x)", inputs=POSITIVE),
    _unary("rsqrt", "torch.rsqrt(x)", inputs=POSITIVE),
    _unary("reciprocal", "torch.reciprocal(x)", inputs=POSITIVE),
    _unary("sin", "torch.sin(x)"),
    _unary("cos", "torch.cos(x)"),
    _unary("atan", "torch.atan(x)"),
    _unary("tanh", "torch.tanh(x)"),
    _unary("erf", "torch.erf(x)"),
    _unary("sigmoid", "torch.sigmoid(x)"),
    _unary("log_sigmoid", "F.logsigmoid(x)"),
    _unary("silu", "F.silu(x)"),
    _unary("relu", "torch.relu(x)"),
    _unary("gelu", "F.gelu(x)"),
    _unary("gelu_tanh", "F.gelu(x, approximate='tanh')", "gelu", call="x, approximate='tanh'"),
    _unary("elu", "F.elu(x)"),
    _unary("celu", "F.celu(x)"),
    _unary("softplus", "F.softplus(x)"),
    _unary("nan_to_num", "torch.nan_to_num(x)"),
    _unary("isnan", "torch.isnan(x)"),
    _unary("isinf", "torch.isinf(x)"),
    _unary("isfinite", "torch.isfinite(x)"),
    _unary("logical_not", "torch.logical_not(x)", inputs=BOOLS, dtypes=("bool",)),
    _unary("bitwise_not", "torch.bitwise_not(x)", inputs=INTS, dtypes=("int32",)),
    _unary("clamp", "torch.clamp(x, -0.5, 0.5)", call="x, -0.5, 0.5"),
    _unary("threshold", "F.threshold(x, 0.1, 20.0)", call="x, 0.1, 20.0"),
    _unary("mul_scalar", "torch.mul(x, 1.5)", "mul", call="x, 1.5"),
    _unary("pow_scalar", "torch.pow(x, 3.0)", "pow_tensor_scalar", call="x, 3.0"),
    _binary("add", "torch.add(x, y)"),
    _binary("sub", "torch.sub(x, y)"),
    _binary("mul", "torch.mul(x, y)"),
    _binary("div", "torch.div(x, y)", "true_divide", inputs=f"{X}, {POSITIVE}"),
    _binary("maximum", "torch.maximum(x, y)"),
    _binary("minimum", "torch.minimum(x, y)"),
    _binary("pow", "torch.pow(x, y)", "pow_tensor_tensor", inputs=f"{POSITIVE}, {X}"),
    _binary("eq", "torch.eq(x, y)", inputs=f"{INTS}, {INTS}", dtypes=("int32",)),
    _binary("ne", "torch.ne(x, y)", inputs=f"{INTS}, {INTS}", dtypes=("int32",)),
    _binary("gt", "torch.gt(x, y)"),
    _binary("ge", "torch.ge(x, y)"),
    _binary("lt", "torch.lt(x, y)"),
    _binary("le", "torch.le(x, y)"),
    _binary("logical_and", "torch.logical_and(x, y)", inputs=f"{BOOLS}, {BOOLS}", dtypes=("bool",)),
    _binary("logical_or", "torch.logical_or(x, y)", inputs=f"{BOOLS}, {BOOLS}", dtypes=("bool",)),
    _binary("bitwise_and", "torch.bitwise_and(x, y)", "bitwise_and_tensor", inputs=f"{INTS}, {INTS}", dtypes=("int32",)),
    _binary("bitwise_or", "torch.bitwise_or(x, y)", "bitwise_or_tensor", inputs=f"{INTS}, {INTS}", dtypes=("int32",)),
    Op("where", "where_self", "c, x, y", f"{BOOLS}, {X}, {X}", "torch.where(c, x, y)", "library_op(c, x, y)", "Benchmark"),
    Op(
        "addcmul",
        "addcmul",
        "x, y, z",
        f"{X}, {X}, {X}",
        "torch.addcmul(x, y, z, value=0.5)",
        "library_op(x, y, z, value=0.5)",
        "Benchmark",
    ),
    Op(
        "addcdiv",
        "addcdiv",
        "x, y, z",
        f"{X}, {X}, {POSITIVE}",
        "torch.addcdiv(x, y, z, value=0.5)",
        "library_op(x, y, z, value=0.5)",
        "Benchmark",
    ),
    Op("masked_fill", "masked_fill", "x, mask", f"{X}, {BOOLS}", "x.masked_fill(mask, 0.0)", "library_op(x, mask, 0.0)", "Benchmark"),
    _reduction("sum", "torch.sum(x)", "library_op(x)"),
    _reduction("sum_dim", "torch.sum(x, dim=-1)", "library_op(x, [-1])"),
    _reduction("mean_dim", "torch.mean(x, dim=-1)", "library_op(x, [-1])"),
    _reduction("amax", "torch.amax(x, dim=-1)", "library_op(x, [-1])"),
    _reduction("max_dim", "tuple(torch.max(x, dim=-1))", "tuple(library_op(x, -1))"),
    _reduction("min_dim", "tuple(torch.min(x, dim=-1))", "tuple(library_op(x, -1))"),
    _reduction("argmax", "torch.argmax(x, dim=-1)", "library_op(x, -1)"),
    _reduction("argmin", "torch.argmin(x, dim=-1)", "library_op(x, -1)"),
    _reduction("var_mean", "torch.var_mean(x, dim=-1)", "library_op(x, [-1])"),
    _reduction("count_nonzero", "torch.count_nonzero(x, dim=-1)", "library_op(x, -1)", inputs=f"torch.relu({X})"),
    _reduction("all_dim", "torch.all(x, dim=-1)", "library_op(x, -1)", inputs="torch.rand({shape}) > 0.01", dtypes=("bool",)),
    _reduction("any_dim", "torch.any(x, dim=-1)", "library_op(x, -1)", inputs="torch.rand({shape}) > 0.99", dtypes=("bool",)),
    _reduction("softmax", "torch.softmax(x, dim=-1)", "library_op(x, -1)"),
    _reduction("log_softmax", "torch.log_softmax(x, dim=-1)", "library_op(x, -1)"),
    _reduction("cumsum", "torch.cumsum(x, dim=-1)", "library_op(x, -1)"),
    Op(
        "layer_norm",
        "layer_norm",
        "x",
        X,
        "F.layer_norm(x, ({last},), self.weight, self.bias)",
        "library_op(x, ({last},), self.weight, self.bias)[0]",
        "NormBenchmark",
        parameters=_vectors("{last}", "weight", "bias"),
    ),
    Op(
        "rms_norm",
        "rms_norm",
        "x",
        X,
        "F.rms_norm(x, ({last},), self.weight, 1e-5)",
        "library_op(x, ({last},), self.weight, 1e-5)",
        "NormBenchmark",
        parameters=_vectors("{last}", "weight"),
    ),
    Op(
        "group_norm",
        "group_norm",
        "x",
        X,
        "F.group_norm(x, channels // 2, self.weight, self.bias)",
        "library_op(x, self.weight, self.bias, x.shape[0], channels, x[0, 0].numel(), channels // 2)[0]",
        "NormBenchmark",
        parameters=_vectors("channels", "weight", "bias"),
    ),
    Op(
        "mm",
        "mm",
        "a, b",
        "torch.randn(M, K, dtype={dtype}), torch.randn(K, N, dtype={dtype})",
        "torch.mm(a, b)",
        "library_op(a, b)",
        "BlasBenchmark",
    ),
    Op(
        "bmm",
        "bmm",
        "a, b",
        "torch.randn(batch, M, K, dtype={dtype}), torch.randn(batch, K, N, dtype={dtype})",
        "torch.bmm(a, b)",
        "library_op(a, b)",
        "BlasBenchmark",
    ),
    Op(
        "addmm",
        "addmm",
        "bias, a, b",
        "torch.randn(N, dtype={dtype}), torch.randn(M, K, dtype={dtype}), torch.randn(K, N, dtype={dtype})",
        "torch.addmm(bias, a, b)",
        "library_op(bias, a, b)",
        "BlasBenchmark",
    ),
    Op(
        "mv",
        "mv",
        "a, v",
        "torch.randn(rows, cols, dtype={dtype}), torch.randn(cols, dtype={dtype})",
        "torch.mv(a, v)",
        "library_op(a, v)",
        "MvAndOuterBenchmark",
    ),
    Op(
        "index_select",
        "index_select",
        "x, index",
        "torch.randn(rows, cols, dtype={dtype}), torch.randint(0, rows, (rows // 2,))",
        "torch.index_select(x, 0, index)",
        "library_op(x, 0, index)",
        "TensorSelectBenchmark",
    ),
    Op(
        "gather",
        "gather",
        "x, index",
        "torch.randn(rows, cols, dtype={dtype}), torch.randint(0, cols, (rows, cols // 2))",
        "torch.gather(x, 1, index)",
        "library_op(x, 1, index)",
        "TensorSelectBenchmark",
    ),
    Op("triu", "triu", "x", "torch.randn(rows, cols, dtype={dtype})", "torch.triu(x)", "library_op(x)", "TensorSelectBenchmark"),
    Op(
        "flip", "flip", "x", "torch.randn(rows, cols, dtype={dtype})", "torch.flip(x, [-1])", "library_op(x, [-1])", "TensorSelectBenchmark"
    ),
    Op("glu", "glu", "x", X, "F.glu(x, dim=-1)", "library_op(x, -1)", "glu"),
)

# Liger: each op's autograd Function from its ops module, forward only (the worker runs under no_grad).
TOKENS = "torch.randn(tokens, hidden, dtype={dtype})"
VOCAB_LOGITS = "torch.randn(tokens, vocab, dtype={dtype})"


def llama_rms_norm(value: str) -> str:
    """Llama's RMSNorm in eager PyTorch (the formula Liger's benchmark compares with), of one expression."""
    return f"self.weight * ({value}.float() * torch.rsqrt({value}.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)"


ROTATED = "torch.cat((-{0}[..., head_dim // 2:], {0}[..., :head_dim // 2]), dim=-1)"
LIGER_OPS: tuple[Op, ...] = (
    Op(
        "rms_norm",
        "LigerRMSNormFunction",
        "x",
        TOKENS,
        llama_rms_norm("x"),
        "library_op.apply(x, self.weight, 1e-6)",
        "tokens_hidden",
        ("bfloat16",),
        _vectors("hidden", "weight"),
    ),
    Op(
        "layer_norm",
        "LigerLayerNormFunction",
        "x",
        TOKENS,
        "F.layer_norm(x, (hidden,), self.weight, self.bias, 1e-6)",
        "library_op.apply(x, self.weight, self.bias, 1e-6)",
        "tokens_hidden",
        ("bfloat16",),
        _vectors("hidden", "weight", "bias"),
    ),
    Op(
        "fused_add_rms_norm",
        "LigerFusedAddRMSNormFunction",
        "x, r",
        f"{TOKENS}, {TOKENS}",
        f"({llama_rms_norm('(x + r)')}, x + r)",
        "tuple(library_op.apply(x, r, self.weight, 1e-6))",
        "tokens_hidden",
        ("bfloat16",),
        _vectors("hidden", "weight"),
    ),
    Op(
        "swiglu",
        "LigerSiLUMulFunction",
        "a, b",
        "torch.randn(tokens, intermediate, dtype={dtype}), torch.randn(tokens, intermediate, dtype={dtype})",
        "F.silu(a) * b",
        "library_op.apply(a, b)",
        "tokens_intermediate",
        ("bfloat16",),
    ),
    Op(
        "geglu",
        "LigerGELUMulFunction",
        "a, b",
        "torch.randn(tokens, intermediate, dtype={dtype}), torch.randn(tokens, intermediate, dtype={dtype})",
        "F.gelu(a, approximate='tanh') * b",
        "library_op.apply(a, b)",
        "tokens_intermediate",
        ("bfloat16",),
    ),
    Op("softmax", "LigerSoftmaxFunction", "x", TOKENS, "torch.softmax(x, dim=-1)", "library_op.apply(x)", "tokens_hidden", ("bfloat16",)),
    Op(
        "relu_squared",
        "LigerReLUSquaredFunction",
        "x",
        TOKENS,
        "torch.square(torch.relu(x))",
        "library_op.apply(x)",
        "tokens_hidden",
        ("bfloat16",),
    ),
    Op(
        "dyt",
        "LigerDyTFunction",
        "x",
        TOKENS,
        "self.gamma * torch.tanh(self.alpha * x) + self.beta",
        "library_op.apply(x, self.alpha, self.gamma, self.beta)",
        "tokens_hidden",
        ("bfloat16",),
        "self.alpha = nn.Parameter(torch.full((1,), 0.5, dtype={dtype}))\n        " + _vectors("hidden", "gamma", "beta"),
    ),
    Op(
        "group_norm",
        "LigerGroupNormFunction",
        "x",
        "torch.randn(rows, hidden, spatial, dtype={dtype})",
        "F.group_norm(x, hidden // 4, self.weight, self.bias, 1e-6)",
        "library_op.apply(x, self.weight, self.bias, hidden, hidden // 4, 1e-6)",
        "rows_hidden_spatial",
        ("bfloat16",),
        _vectors("hidden", "weight", "bias"),
    ),
    Op(
        "rope",
        "LigerRopeFunction",
        "q, k, cos, sin",
        # cos and sin as Hugging Face's rotary embedding builds them, each half a copy of the other:
        # Liger's kernel reads the first half only.
        "torch.randn(1, heads, tokens, head_dim, dtype={dtype}), torch.randn(1, kv_heads, tokens, head_dim, dtype={dtype}), "
        "torch.randn(1, tokens, head_dim // 2, dtype={dtype}).repeat(1, 1, 2), "
        "torch.randn(1, tokens, head_dim // 2, dtype={dtype}).repeat(1, 1, 2)",
        "(q * cos[:, None] + " + ROTATED.format("q") + " * sin[:, None], k * cos[:, None] + " + ROTATED.format("k") + " * sin[:, None])",
        "tuple(library_op.apply(q, k, cos, sin))",
        "tokens_heads",
        ("bfloat16",),
    ),
    Op(
        "cross_entropy",
        "LigerCrossEntropyFunction",
        "logits, target",
        f"{VOCAB_LOGITS}, torch.randint(0, vocab, (tokens,))",
        "F.cross_entropy(logits, target)",
        "library_op.apply(logits, target, None)[0]",
        "tokens_vocab",
        ("float32",),
    ),
    Op(
        "fused_linear_cross_entropy",
        "LigerFusedLinearCrossEntropyFunction",
        "x, target",
        f"{TOKENS}, torch.randint(0, vocab, (tokens,))",
        "F.cross_entropy((x @ self.weight.T).float(), target)",
        "library_op.apply(x, self.weight, target)[0]",
        "tokens_hidden_vocab",
        ("bfloat16",),
        "self.weight = nn.Parameter(torch.randn(vocab, hidden, dtype={dtype}) * hidden**-0.5)",
    ),
    Op(
        "kl_div",
        "LigerKLDivLossFunction",
        "log_p, q",
        f"torch.log_softmax({VOCAB_LOGITS}, dim=-1), torch.softmax({VOCAB_LOGITS}, dim=-1)",
        "F.kl_div(log_p, q, reduction='batchmean')",
        "library_op.apply(log_p, q, 'batchmean')",
        "tokens_vocab",
        ("float32",),
    ),
    Op(
        "tvd",
        "LigerTVDLossFunction",
        "p, q",
        f"torch.softmax({VOCAB_LOGITS}, dim=-1), torch.softmax({VOCAB_LOGITS}, dim=-1)",
        "0.5 * (p - q).abs().sum() / p.shape[0]",
        "library_op.apply(p, q)",
        "tokens_vocab",
        ("float32",),
    ),
)

# Liger's benchmarks sweep tokens over powers of two from 1024 to 8192 (the default model's longest
# sequence) at Llama-3-8B's sizes: hidden 4096, intermediate 14336, vocabulary 128256, 32 heads and
# 8 key-value heads of 128; group norm takes 4 channels a group over a spatial length of 512 and
# tokens // 512 rows. Numbers read from benchmark/scripts/benchmark_model_configs.py and the
# benchmark_<op>.py scripts at the pinned commit.
SWEEP = (1024, 2048, 4096, 8192)
LIGER_SHAPES: dict[str, list[dict[str, int]]] = {
    "tokens_hidden": [{"tokens": t, "hidden": 4096} for t in SWEEP],
    "tokens_intermediate": [{"tokens": t, "intermediate": 14336} for t in SWEEP],
    "tokens_vocab": [{"tokens": t, "vocab": 128256} for t in SWEEP],
    "tokens_hidden_vocab": [{"tokens": t, "hidden": 4096, "vocab": 128256} for t in SWEEP],
    "tokens_heads": [{"tokens": t, "heads": 32, "kv_heads": 8, "head_dim": 128} for t in SWEEP],
    "rows_hidden_spatial": [{"rows": t // 512, "hidden": 4096, "spatial": 512} for t in SWEEP],
}
# FlagGems' core_shapes.yaml lists bare dims; these name them for the templates.
FLAGGEMS_DIM_NAMES = {
    "BlasBenchmark": ("batch", "M", "N", "K"),
    "MvAndOuterBenchmark": ("rows", "cols"),
    "TensorSelectBenchmark": ("rows", "cols"),
}


def flaggems_shapes(core_shapes: dict[str, Any], key: str) -> list[dict[str, int]]:
    """The shapes of one core_shapes.yaml key as named dims, those over MAX_ELEMENTS left out."""
    named = []
    for dims in core_shapes[key]["shapes"]:
        if key == "NormBenchmark":
            names: tuple[str, ...] = ("batch", "channels", *(f"dim{i}" for i in range(2, len(dims))))
        else:
            names = FLAGGEMS_DIM_NAMES.get(key, tuple(f"dim{i}" for i in range(len(dims))))
        named.append(dict(zip(names, dims, strict=True)))
    return [shape for shape in named if _largest_tensor(shape) <= MAX_ELEMENTS]


def _largest_tensor(shape: dict[str, int]) -> int:
    """Elements of the largest input a shape makes (a matmul's operands, else the whole shape)."""
    if "K" in shape:
        return shape["batch"] * max(shape["M"], shape["N"]) * shape["K"]
    total = 1
    for value in shape.values():
        total *= value
    return total


def op_shapes(op: Op, shapes: list[dict[str, int]]) -> list[dict[str, int]]:
    """The op's distinct shapes, each cut to the dims its templates use (mm takes M, N, K of a
    batch, M, N, K shape), so that two shapes that differ only in an unused dim are one problem."""
    used_text = " ".join((op.inputs, op.eager, op.library, op.parameters))
    distinct: list[dict[str, int]] = []
    for shape in shapes:
        fill = _fill(shape, "float32")
        text = used_text.format(**fill)
        cut = {name: value for name, value in shape.items() if re.search(rf"\b{name}\b", text)}
        if cut not in distinct:
            distinct.append(cut)
    return distinct


def shape_tag(shape: dict[str, int]) -> str:
    return "x".join(str(value) for value in shape.values())


def _fill(shape: dict[str, int], dtype: str) -> dict[str, str]:
    return {"dtype": TORCH_DTYPES[dtype], "shape": ", ".join(shape), "last": list(shape)[-1]}


def reference_code(library: Library, op: Op, shape: dict[str, int], dtype: str) -> str:
    """The eager reference: a KernelBench problem file of one op, shape and dtype."""
    fill = _fill(shape, dtype)
    parameters = f"\n        {op.parameters.format(**fill)}" if op.parameters else ""
    return f'''"""{library.name} {op.name} at {shape_tag(shape)} in {dtype}: eager PyTorch (generated by kernelcast's workshop)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

{", ".join(shape)} = {", ".join(str(value) for value in shape.values())}


class Model(nn.Module):
    def __init__(self):
        super().__init__(){parameters}

    def forward(self, {op.args}):
        return {op.eager.format(**fill)}


def get_inputs():
    return [{op.inputs.format(**fill)}]


def get_init_inputs():
    return []
'''


def candidate_code(library: Library, op: Op, module: str, shape: dict[str, int], dtype: str, reference: str) -> str:
    """The reference's text and a ModelNew that calls the library's function in its forward."""
    fill = _fill(shape, dtype)
    preamble = f"\n{library.preamble}" if library.preamble else ""
    return f"""{reference}
{preamble}
from {module} import {op.function} as library_op  # noqa: E402  (BATCH/lib on the GPU host)


class ModelNew(Model):
    def forward(self, {op.args}):
        return {op.library.format(**fill)}
"""


def exported_modules(mirror: Mirror, library: Library) -> dict[str, str]:
    """Function name → the module that defines it, as the library's ops/__init__.py imports them."""
    tree = ast.parse(mirror.read(f"{library.package}/ops/__init__.py"))
    return {
        alias.asname or alias.name: node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


def module_path(library: Library, module: str) -> str:
    return f"{library.prefix}{module.replace('.', '/')}.py"


def ops_of(library: Library) -> tuple[Op, ...]:
    return FLAGGEMS_OPS if library is FLAGGEMS else LIGER_OPS


def shapes_of(library: Library, mirror: Mirror) -> dict[str, list[dict[str, int]]]:
    if library is LIGER:
        return LIGER_SHAPES
    import yaml

    core_shapes = yaml.safe_load(mirror.read("benchmark/core_shapes.yaml"))
    return {key: flaggems_shapes(core_shapes, key) for key in {op.shapes for op in FLAGGEMS_OPS}}


def entries(library: Library, mirrors: Path) -> Iterator[dict[str, Any]]:
    """Per op, shape and dtype: the library kernel's entry and torch.compile's, one group."""
    mirror = Mirror(mirrors, library.repo, library.commit)
    modules = exported_modules(mirror, library)
    shapes = shapes_of(library, mirror)
    digests: dict[str, str] = {}
    for op in ops_of(library):
        if op.function not in modules:
            raise KeyError(f"{library.repo}@{library.commit[:12]} exports no {op.function} from {library.package}/ops")
        path = module_path(library, modules[op.function])
        if path not in digests:
            digests[path] = hashlib.sha256(mirror.read(path)).hexdigest()
        for shape in op_shapes(op, shapes[op.shapes]):
            for dtype in op.dtypes:
                reference = reference_code(library, op, shape, dtype)
                candidate = candidate_code(library, op, modules[op.function], shape, dtype, reference)
                group = f"{library.name}/{op.name}/{shape_tag(shape)}/{dtype}"
                common = {
                    **entry_fields(library, path, digests[path], group, op.name, reference),
                    "op": op.name,
                    "shape": list(shape.values()),
                    "dtype": dtype,
                    "check_tolerance": CHECK_TOLERANCE.get(dtype, "auto"),
                }
                yield {
                    "id": f"{library.name}:{group.split('/', 1)[1]}",
                    **common,
                    "language": "triton",
                    "candidate_sha256": sha256_of(candidate),
                }
                yield {
                    "id": f"{library.name}:{group.split('/', 1)[1]}/compile",
                    **common,
                    "language": INDUCTOR,
                    "candidate_sha256": sha256_of(reference),
                }


def entry_fields(library: Library, path: str, digest: str, group: str, name: str, reference: str) -> dict[str, Any]:
    """What every generated entry of a library holds: the library file it runs (path and SHA-256 at the pinned
    commit), its group, and the generated reference's digest and sizes, as the KernelBench manifest's keys."""
    return {
        "source": library.name,
        "repo": library.repo,
        "commit": library.commit,
        "path": path,
        "sha256": digest,
        "run": "",
        "level": 0,
        "problem": group,
        "problem_name": name,
        "problem_path": "",
        "problem_sha256": sha256_of(reference),
        "sizes": kernelbench_problem(reference),
        "same_as": [],
    }


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def build(mirrors: Path, out: Path = LIBRARY_MANIFEST) -> dict[str, int]:
    """Write the library manifest; the count of entries per library."""
    return write_rows(out, (entry for library in LIBRARIES for entry in entries(library, mirrors)))


def by_name(name: str) -> Library:
    return next(library for library in LIBRARIES if library.name == name)


def is_library(entry: dict[str, Any]) -> bool:
    return entry["source"] in {library.name for library in LIBRARIES}


def generated(entry: dict[str, Any], mirror: Mirror) -> tuple[str, str]:
    """An entry's (reference, candidate) text, generated again; the candidate is what the worker loads
    as ModelNew (torch.compile's entry: the reference, which the runner compiles)."""
    library = by_name(entry["source"])
    modules, shapes = _read_once(mirror.git_dir, mirror.commit, library.name)
    op = next(op for op in ops_of(library) if op.name == entry["op"])
    shape = next(shape for shape in op_shapes(op, shapes[op.shapes]) if list(shape.values()) == entry["shape"])
    reference = reference_code(library, op, shape, entry["dtype"])
    if entry["language"] == INDUCTOR:
        return reference, reference
    return reference, candidate_code(library, op, modules[op.function], shape, entry["dtype"], reference)


@functools.cache
def _read_once(git_dir: Path, commit: str, name: str) -> tuple[dict[str, str], dict[str, list[dict[str, int]]]]:
    """A library's exported modules and shapes at one commit, read from its mirror once per process."""
    library = by_name(name)
    mirror = Mirror(git_dir.parent.parent, library.repo, commit)
    return exported_modules(mirror, library), shapes_of(library, mirror)


def extract_package(mirror: Mirror, library: Library, lib: Path) -> Path:
    """Copy the library's package (its `carried` parts, if named) at the pinned commit into lib/<package>; its folder."""
    paths = [f"{library.package}/{part}" for part in library.carried] or [library.package]
    archive = subprocess.run(["git", f"--git-dir={mirror.git_dir}", "archive", mirror.commit, *paths], capture_output=True, check=True)
    prefix = library.prefix
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        members = [member for member in tar.getmembers() if member.name.startswith(prefix)]
        for member in members:
            member.name = member.name[len(prefix) :]
        tar.extractall(lib, members=members, filter="data")
    return lib / library.module
