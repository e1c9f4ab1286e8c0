"""Host code that picks one of several launches is read as one call on the GPU takes it."""

from __future__ import annotations

from kernelcast.kernels_runtime.source.alternatives import one_path_each
from kernelcast.models.embedded.features import read_code

ALIGNED_OR_NOT = """
torch::Tensor swish(torch::Tensor x) {
    auto out = torch::empty_like(x);
    if ((n % 4 == 0) && aligned(x)) {
        swish4<<<(n / 4 + 255) / 256, 256>>>(x4, out4, n / 4);
    } else if (n > (1 << 20)) {
        swish_wide<<<n / 1024, 1024>>>(x, out, n);
    } else {
        swish1<<<(n + 255) / 256, 256>>>(x, out, n);
        tail<<<1, 32>>>(out, n);
    }
    return out;
}
"""


def test_an_if_else_chain_of_cuda_launches_counts_its_busiest_branch() -> None:
    blanked = one_path_each(ALIGNED_OR_NOT, python=False)
    assert len(blanked) == len(ALIGNED_OR_NOT) and blanked.count("\n") == ALIGNED_OR_NOT.count("\n")
    assert "swish4<<<" not in blanked and "swish_wide<<<" not in blanked
    assert "swish1<<<" in blanked and "tail<<<" in blanked
    assert read_code(ALIGNED_OR_NOT, "cuda")["cuda_launch_sites"] == 2


def test_launches_that_all_run_are_all_counted() -> None:
    sequential = "void f() {\n  if (n > 0) first<<<g, b>>>(x);\n  second<<<g, b>>>(x);\n  if (m) { third<<<g, b>>>(x); }\n}\n"
    assert one_path_each(sequential, python=False) == sequential
    assert read_code(sequential, "cuda")["cuda_launch_sites"] == 3
    one_side = "if (n % 4 == 0) { k4<<<g, b>>>(x); } else { cudaMemset(out, 0, n); }\n"
    assert one_path_each(one_side, python=False) == one_side


CPU_FALLBACK = """
import torch
import torch.nn.functional as F
import triton


class ModelNew(torch.nn.Module):
    def forward(self, x, weight):
        if not x.is_cuda:
            y = F.conv2d(x, weight)
            return torch.tanh(y)
        return conv_tanh(x, weight)


def conv_tanh(x, weight):
    out = torch.empty_like(x)
    if x.numel() >= 1 << 20:
        conv_tanh_wide[grid](x, weight, out, BLOCK=1024)
    elif x.numel() >= 1 << 10:
        conv_tanh_kernel[grid](x, weight, out, BLOCK=256)
    else:
        conv_tanh_kernel[grid](x, weight, out, BLOCK=32)
        finish[(1,)](out)
    return out
"""


def test_a_cpu_fallback_is_not_a_cudnn_call_and_one_triton_branch_runs() -> None:
    counts = read_code(CPU_FALLBACK, "triton")
    assert counts["torch_heavy"] == 0 and counts["torch_elementwise"] == 0
    assert counts["triton_launch_sites"] == 2  # the busiest branch: a kernel and its finishing pass
    blanked = one_path_each(CPU_FALLBACK, python=True)
    assert "F.conv2d" not in blanked and "BLOCK=1024" not in blanked and "BLOCK=32" in blanked


def test_the_gpu_branch_of_an_is_cuda_test_is_kept() -> None:
    text = "def forward(self, x):\n    if x.is_cuda:\n        kernel[grid](x)\n    else:\n        x = torch.matmul(x, x)\n    return x\n"
    assert one_path_each(text, python=True) == text.replace("        x = torch.matmul(x, x)", "        pass" + " " * 18)
    assert read_code(text, "triton")["torch_heavy"] == 0


def test_text_that_does_not_parse_or_close_is_left_as_it_is() -> None:
    half_typed = "def f(x):\n    if x.is_cuda:\n        k[grid](x\n    else:\n        g[grid](x)\n"
    assert one_path_each(half_typed, python=True) == half_typed
    unclosed = "void f() { if (a) { k<<<1, 1>>>(); } else { g<<<1, 1>>>(); "
    assert one_path_each(unclosed, python=False) == unclosed


LOOPED_BRANCH = """
import torch.nn as nn


def run(x, big):
    if big:
        wide[(1,)](x)
    else:
        for _ in range(4):
            narrow[(1,)](x)
            narrow[(1,)](x)
    return x


class ModelNew(nn.Module):
    def forward(self, x):
        return run(x, x.numel() > 4096)
"""


def test_a_blanked_python_branch_keeps_the_text_parsing_for_the_readers_after_it() -> None:
    # The `if` branch is blanked to a `pass`: the file still parses, so the kept branch's host loop
    # is read, and its two launches run four times a call.
    blanked = one_path_each(LOOPED_BRANCH, python=True)
    assert len(blanked) == len(LOOPED_BRANCH) and "wide[" not in blanked
    compile(blanked, "blanked", "exec")
    assert read_code(LOOPED_BRANCH, "triton")["triton_launch_sites"] == 8
    # A choice inside a blanked branch goes with it: one `pass`, at the outer branch's indent.
    inner = "        if x.is_cuda:\n            wide[(1,)](x)\n        else:\n            torch.relu(x)\n"
    nested = LOOPED_BRANCH.replace("        wide[(1,)](x)\n", inner)
    compile(one_path_each(nested, python=True), "nested", "exec")
    assert read_code(nested, "triton")["triton_launch_sites"] == 8


BY_RANK = """
import torch
import torch.nn as nn
import triton


def gelu(x):
    if x.dim() == 1:
        @triton.jit
        def flat(x_ptr):
            pass

        flat[(1,)](x)
    elif x.ndim == 2:
        rows[(1,)](x)
    elif len(x.shape) >= 3:
        batched[(1,)](x)
        batched[(1,)](x)
    return x


class ModelNew(nn.Module):
    def forward(self, x):
        return gelu(x)


def get_inputs():
    return [torch.rand(8192, 8192)]
"""


def test_a_chain_over_the_inputs_rank_keeps_the_branch_the_inputs_take() -> None:
    """A 2-D input takes the `x.ndim == 2` branch: not the busiest one, and not the 1-D branch that
    defines a kernel each call (charged as one), which an LLM's GELU carried and measured 8x faster."""
    blanked = one_path_each(BY_RANK, python=True)
    assert "rows[" in blanked and "flat[" not in blanked and "batched[" not in blanked
    counts = read_code(BY_RANK, "triton")
    assert counts["triton_launch_sites"] == 1 and counts["built_us"] == 0
    # Without get_inputs the rank is not known: no chain without an else is pruned, as before.
    unknown = BY_RANK.split("\n\ndef get_inputs")[0]
    assert read_code(unknown, "triton")["triton_launch_sites"] == 4


GUARDED = """
import torch
import torch.nn as nn
import triton


def mean_dim(x, dim=None, keepdim=False, bias=None):
    if dim is None or x.numel() == 0:
        return torch.mean(x)
    if not keepdim:
        x = x.contiguous()
    else:
        x = x.unsqueeze(-1)
    if bias is not None:
        x = torch.add(x, bias)
    row_means[(1,)](x)
    return x


class ModelNew(nn.Module):
    def forward(self, x):
        return mean_dim(x, dim=-1)


def get_inputs():
    return [torch.rand(512, 4096)]
"""


def test_guards_on_what_the_timed_call_passes_keep_the_branch_it_takes() -> None:
    """`mean_dim(x, dim=-1)`: dim is not None, keepdim and bias keep the defaults no call overrides.
    TritonBench's mean reduction guarded a whole-tensor `mean` so, and was read as running it too."""
    blanked = one_path_each(GUARDED, python=True)
    assert "torch.mean" not in blanked and "unsqueeze" not in blanked and "torch.add" not in blanked
    assert "contiguous" in blanked and "row_means[" in blanked
    assert read_code(GUARDED, "triton")["torch_reduction"] == 0
    # Called without dim, the guard's branch runs (and the lines after it are read as written).
    no_dim = GUARDED.replace("mean_dim(x, dim=-1)", "mean_dim(x)")
    assert "torch.mean" in one_path_each(no_dim, python=True)
    # Reached through a method of a module-level object (`_perf.call_op(x)`, as TritonBench's perf
    # scripts are run), the call is followed all the same.
    metrics = "class Metrics:\n    def call_op(self, x):\n        return mean_dim(x, dim=-1)\n\n\n_perf = Metrics()\n\n\n"
    through_object = GUARDED.replace("class ModelNew(nn.Module):", metrics + "class ModelNew(nn.Module):")
    through_object = through_object.replace("return mean_dim(x, dim=-1)\n\n\ndef get_inputs", "return _perf.call_op(x)\n\n\ndef get_inputs")
    assert "_perf.call_op(x)" in through_object and "torch.mean" not in one_path_each(through_object, python=True)
    # A dim the text does not fix leaves its guard undecided; the defaults still decide theirs.
    unknown = GUARDED.replace(
        "def forward(self, x):\n        return mean_dim(x, dim=-1)", "def forward(self, x, d):\n        return mean_dim(x, d)"
    )
    undecided = one_path_each(unknown, python=True)
    assert "torch.mean" in undecided and "unsqueeze" not in undecided


APPLIED = """
import torch
import triton


class Scaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, squared=False):
        if squared:
            x = torch.square(x)
        else:
            x = torch.abs(x)
        scale[(1,)](x)
        return x


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return Scaled.apply(x)
"""


def test_an_autograd_functions_default_is_passed_through_apply() -> None:
    """`Scaled.apply(x, flag)` passes `squared`, though no call names `forward`: its default then says nothing,
    and what the call passes decides the test where the text fixes it (`Scaled.apply(x, True)`)."""
    assert "torch.square" not in one_path_each(APPLIED, python=True)
    unknown = APPLIED.replace(
        "def forward(self, x):\n        return Scaled.apply(x)", "def forward(self, x, flag):\n        return Scaled.apply(x, flag)"
    )
    assert "flag)" in unknown and one_path_each(unknown, python=True) == unknown
    fixed = one_path_each(APPLIED.replace("Scaled.apply(x)", "Scaled.apply(x, True)"), python=True)
    assert "torch.square" in fixed and "torch.abs" not in fixed
    aliased = APPLIED.replace("return Scaled.apply(x)", "scaled = Scaled.apply\n        return scaled(x)")
    assert one_path_each(aliased, python=True) == aliased


LOG_SPACE = """
import triton
import triton.language as tl


@triton.jit
def kl_kernel(y_ptr, t_ptr, LOG: tl.constexpr = False):
    y = tl.load(y_ptr)
    if not LOG:
        y = tl.log(y)
    else:
        y = tl.exp(y)
    tl.store(t_ptr, y)


def kl(y, t, log_target=False):
    kl_kernel[(1,)](y, t, LOG=log_target)
"""


def test_a_kernel_parameter_its_launch_passes_is_not_its_default() -> None:
    """The launch `kl_kernel[(1,)](..., LOG=log_target)` passes LOG: both of the kernel's branches may run."""
    assert one_path_each(LOG_SPACE, python=True) == LOG_SPACE
    unpassed = LOG_SPACE.replace(", LOG=log_target)", ")")
    assert "tl.exp" not in one_path_each(unpassed, python=True)


MASKED = """
import torch
import torch.nn as nn


class Attention(nn.Module):
    def forward(self, x, mask=None):
        if mask is not None:
            x = torch.add(x, mask)
        return torch.softmax(x, -1)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()

    def forward(self, x, scale=None):
        if scale is not None:
            x = torch.mul(x, scale)
        return self.attn(x, mask=x)
"""


def test_a_submodules_forward_is_called_through_its_instance() -> None:
    """`self.attn(x, mask=x)` passes `mask` to `Attention.forward` without naming it: its default says
    nothing. The harness calls the model's own `forward` with the inputs alone: `scale` stays None."""
    blanked = one_path_each(MASKED, python=True)
    assert "torch.add" in blanked and "torch.mul" not in blanked


REBOUND = """
import torch
import torch.nn as nn


def mul_relu(x, y):
    use_triton = x.is_cuda
    if use_triton and x.shape != y.shape:
        use_triton = False
    if use_triton:
        kernel[(1,)](x, y)
        return x
    return torch.relu(torch.mul(x, y))


class ModelNew(nn.Module):
    def forward(self, x, y):
        return mul_relu(x, y)
"""


def test_a_name_bound_on_one_path_only_leaves_its_test_undecided() -> None:
    """`use_triton = False` under an `if` is the last binding above the test, but holds on one path
    only: TritonBench's mul_relu was read as never launching its kernel."""
    assert "kernel[" in one_path_each(REBOUND, python=True)
