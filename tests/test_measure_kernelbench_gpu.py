"""KernelBench files on a real GPU: TF32-size errors, same-seed weights, huge outputs, and compiles that are not hangs."""

from __future__ import annotations

import re
import uuid

import pytest

from kernelcast.kernels_runtime.measure import MeasureFailure, Timeouts, measure_pair
from kernelcast.kernels_runtime.worker import extensions_root
from kernelcast.wire import Measurement

pytestmark = pytest.mark.gpu

LINEAR_REFERENCE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))

def get_inputs():
    return [torch.rand(512, 2048)]

def get_init_inputs():
    return [2048, 1024]
"""

# A Triton GEMM whose tl.dot on fp32 inputs runs in TF32, as Triton does by default.
LINEAR_TRITON = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def linear_relu(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + (k + rk)[:, None], mask=(rn[None, :] < N) & ((k + rk)[:, None] < K), other=0.0)
        acc += tl.dot(x, w)
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tl.maximum(acc, 0.0), mask=(rm[:, None] < M) & (rn[None, :] < N))

class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        weight, bias = self.linear.weight, self.linear.bias
        out = torch.empty((x.shape[0], weight.shape[0]), device=x.device, dtype=torch.float32)
        grid = (triton.cdiv(x.shape[0], 64), triton.cdiv(weight.shape[0], 64))
        linear_relu[grid](x, weight, bias, out, x.shape[0], weight.shape[0], x.shape[1], BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
        return out
"""

# The same kernel, but ModelNew declares its own weights (randn * 0.02), as LLM-written files often do.
OWN_WEIGHTS = LINEAR_TRITON.replace(
    "        self.linear = nn.Linear(in_features, out_features)\n",
    "        self.linear = nn.Module()\n"
    "        self.linear.weight = nn.Parameter(torch.randn(out_features, in_features) * 0.02)\n"
    "        self.linear.bias = nn.Parameter(torch.zeros(out_features))\n",
)

# 2048 x 131072 fp32: a 1 GiB output, compared in 16 chunks on the GPU.
HUGE_REFERENCE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.rand(2048, 131072) - 0.5]

def get_init_inputs():
    return []
"""

HUGE_TRITON = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def relu(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=offsets < n)

class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu[(triton.cdiv(x.numel(), 4096),)](x, out, x.numel(), BLOCK=4096)
        return out
"""

HUGE_OFF_BY_ONE_AT_THE_END = HUGE_TRITON.replace("        return out\n", "        out.view(-1)[-1] += 1.0\n        return out\n")


def kernelbench(code: str, name: str) -> dict[str, str]:
    return {"code": code, "language": "pytorch", "name": name}


def test_a_tf32_gemm_is_measured_under_kernelbench_rule_and_its_error_named() -> None:
    outcome = measure_pair(kernelbench(LINEAR_TRITON, "ModelNew"), kernelbench(LINEAR_REFERENCE, "Model"))
    assert isinstance(outcome, Measurement), outcome
    checked = outcome.details["correctness"]["out"]
    print(f"\nTF32 GEMM: {outcome.message()}; {checked}")
    assert outcome.details["tolerance"] == {"rule": "kernelbench", "atol_rtol": {"f32": 0.01}}
    assert 1e-4 < checked["max_abs_err"] < 1e-2 and "parameters" not in checked
    assert "the size TF32 gives: a Triton tl.dot on fp32 inputs uses TF32 by default" in checked["note"]


def test_the_strict_table_rejects_the_same_gemm_and_says_tf32_explains_it() -> None:
    outcome = measure_pair(kernelbench(LINEAR_TRITON, "ModelNew"), kernelbench(LINEAR_REFERENCE, "Model"), tolerance="strict")
    assert isinstance(outcome, MeasureFailure) and outcome.kind == "wrong", outcome
    assert "(tolerance 1e-04)" in outcome.message and "the size TF32 gives" in outcome.message


def test_a_model_new_with_its_own_weights_is_told_apart_from_a_wrong_kernel() -> None:
    outcome = measure_pair(kernelbench(OWN_WEIGHTS, "ModelNew"), kernelbench(LINEAR_REFERENCE, "Model"))
    assert isinstance(outcome, MeasureFailure) and outcome.kind == "parameters", outcome
    assert outcome.message.startswith(
        "ModelNew's parameters differ from Model's although both were built right after torch.manual_seed(42), as KernelBench "
        "builds them: linear.weight [1024, 2048] differs by up to"
    )
    assert "so the outputs differ too (max abs err" in outcome.message


def test_a_huge_output_is_compared_on_the_gpu_in_chunks() -> None:
    seen: list[str] = []
    outcome = measure_pair(
        kernelbench(HUGE_TRITON, "ModelNew"),
        kernelbench(HUGE_REFERENCE, "Model"),
        progress=lambda text, percent: seen.append(text),
        rounds=2,
    )
    assert isinstance(outcome, Measurement), outcome
    assert "comparing out (0.27e9 elements)" in seen
    assert "making inputs for seed 11 (get_inputs())" in seen

    wrong = measure_pair(kernelbench(HUGE_OFF_BY_ONE_AT_THE_END, "ModelNew"), kernelbench(HUGE_REFERENCE, "Model"))
    assert isinstance(wrong, MeasureFailure) and wrong.kind == "wrong", wrong
    assert wrong.message.startswith("wrong results: max abs err 1.0e+00 at index (2047, 131071) (tolerance 1e-02, KernelBench's rule)")


# Straight-line code long enough that compiling it takes longer than the 1.5 s a launch may take below.
SLOW_TO_COMPILE = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def long_identity(x_ptr, out_ptr, n, VARIANT: tl.constexpr, BLOCK: tl.constexpr):
    # SALT: a fresh kernel source each run, so no Triton cache holds it
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    acc = x
    for i in tl.static_range(3000):
        acc = acc * 0.5 + x * 0.5
    tl.store(out_ptr + offsets, acc, mask=offsets < n)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        out = torch.empty_like(x)
        # The second call (seed 22, no longer the first-call compile) needs a new specialisation.
        long_identity[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), VARIANT=min(self.calls, 1), BLOCK=1024)
        self.calls += 1
        return out
"""

IDENTITY_REFERENCE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x.clone()

def get_inputs():
    return [torch.rand(1 << 20)]
"""


def test_a_triton_compile_on_a_later_call_is_not_taken_for_a_hang() -> None:
    triton = pytest.importorskip("triton")
    if not hasattr(getattr(getattr(triton, "knobs", None), "runtime", None), "jit_post_compile_hook"):
        pytest.skip("this Triton has no JIT compile hooks (Triton >= 3.4 has them)")
    seen: list[str] = []
    candidate = kernelbench(SLOW_TO_COMPILE.replace("SALT", uuid.uuid4().hex), "ModelNew")
    outcome = measure_pair(
        candidate,
        kernelbench(IDENTITY_REFERENCE, "Model"),
        progress=lambda text, percent: seen.append(text),
        timeouts=Timeouts(kernel_s=0.5),
        rounds=2,
    )
    compiles = [text for text in seen if text.startswith("compiling Triton kernel long_identity")]
    print(f"\n{len(compiles)} compiles announced; {outcome}")
    assert isinstance(outcome, Measurement), outcome
    assert len(compiles) == 2


BATCH_NORM_REFERENCE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        return self.bn(x)

def get_inputs():
    return [torch.rand(256, 512) * 4 + 1]

def get_init_inputs():
    return [512]
"""

BATCH_NORM_CANDIDATE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        return F.batch_norm(x, None if TRAINING else self.bn.running_mean, None if TRAINING else self.bn.running_var,
                            self.bn.weight, self.bn.bias, training=TRAINING)
"""


def test_models_run_in_training_mode_as_kernelbench_runs_them() -> None:
    """KernelBench never calls .eval(): batch norm normalises with the batch's statistics, so a
    ModelNew that uses the running statistics (inference style) is wrong there, and here."""
    reference = kernelbench(BATCH_NORM_REFERENCE, "Model")
    inference = measure_pair(kernelbench(BATCH_NORM_CANDIDATE.replace("TRAINING", "False"), "ModelNew"), reference, rounds=2)
    assert isinstance(inference, MeasureFailure) and inference.kind == "wrong", inference
    batch = measure_pair(kernelbench(BATCH_NORM_CANDIDATE.replace("TRAINING", "True"), "ModelNew"), reference, rounds=2)
    assert isinstance(batch, Measurement), batch


SCALED_RELU_REFERENCE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * SCALE

def get_inputs():
    return [torch.randn(1 << 20)]

def get_init_inputs():
    return []
"""

# Two files that both call their extension `twin_relu`, as many LLM-written files do.
SCALED_RELU_EXTENSION = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
__global__ void scaled_relu(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(x[i], 0.0f) * SCALEf;
}
torch::Tensor run(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    scaled_relu<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""
twin = load_inline("twin_relu", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=CUDA, functions=["run"])

class ModelNew(nn.Module):
    def forward(self, x):
        return twin.run(x)
'''


def test_two_files_naming_their_extension_alike_each_keep_their_own_build() -> None:
    """Each file runs its own kernel, and the worker that loaded one `twin_relu` does not build the
    other's again as `twin_relu_v1`."""
    for scale in ("1.0", "2.0"):
        code = SCALED_RELU_EXTENSION.replace("SCALE", scale)
        outcome = measure_pair(kernelbench(code, "ModelNew"), kernelbench(SCALED_RELU_REFERENCE.replace("SCALE", scale), "Model"), rounds=2)
        assert isinstance(outcome, Measurement), outcome
    built = sorted(path.name for path in extensions_root().rglob("twin_relu*.so"))
    print(f"\nbuilt: {built}")
    assert len(built) == 2 and all(re.fullmatch(r"twin_relu_[0-9a-f]{12}\.so", name) for name in built), built


def test_a_build_killed_midway_leaves_nothing_that_stalls_the_next() -> None:
    """A load_inline build cut off by the load limit leaves torch's `lock` in its folder; the next
    measure of the file builds and measures it, where it used to wait on that lock until its own limit."""
    code = SCALED_RELU_EXTENSION.replace("SCALE", "3.0").replace("twin_relu", f"cut_relu_{uuid.uuid4().hex[:8]}")
    candidate, reference = kernelbench(code, "ModelNew"), kernelbench(SCALED_RELU_REFERENCE.replace("SCALE", "3.0"), "Model")
    cut = measure_pair(candidate, reference, rounds=2, timeouts=Timeouts(load_s=3.0))
    assert isinstance(cut, MeasureFailure), cut
    left = [path.parent.name for path in extensions_root().glob("cut_relu_*/lock")]
    print(f"\ncut off: {cut.message}; locks left: {left}")
    outcome = measure_pair(candidate, reference, rounds=2, timeouts=Timeouts(load_s=240.0))
    assert isinstance(outcome, Measurement), outcome
