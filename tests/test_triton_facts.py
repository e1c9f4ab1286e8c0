"""Triton facts: source extraction and JIT-like specialization (pure), offline compiles (need triton)."""

from __future__ import annotations

from pathlib import Path

import pytest
from analysis_support import with_facts

from kernelcast.kernels_runtime import triton_facts
from kernelcast.kernels_runtime.facts import compile_facts
from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.kernels_runtime.triton_facts import NO_TRITON, extract_kernels, specialize

DATA = Path(__file__).parent / "data" / "facts"
H100 = SPECS["H100-SXM"]
FP16_MATMUL = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16"}


def source(name: str) -> str:
    return (DATA / name).read_text()


def test_extracted_module_holds_only_jit_functions():
    module_text, kernels = extract_kernels(source("triton_add.py"))
    assert "import torch" not in module_text and "def add(" not in module_text
    assert "def add_kernel(" in module_text and "@triton.jit" in module_text
    assert kernels["add_kernel"].constexpr_params == {"BLOCK_SIZE"}


def test_a_constexpr_annotated_as_a_string_is_specialized_as_one():
    """`BLOCK_SIZE: "tl.constexpr"`, which Triton reads as `tl.constexpr`: passed as a run-time int,
    the offline compile failed on `tl.arange(0, BLOCK_SIZE)`."""
    text = source("triton_add.py").replace("BLOCK_SIZE: tl.constexpr", 'BLOCK_SIZE: "tl.constexpr"')
    assert 'BLOCK_SIZE: "tl.constexpr"' in text
    _, kernels = extract_kernels(text)
    types, values, _, _ = specialize(kernels["add_kernel"], None, {"BLOCK_SIZE": 256})
    assert types["BLOCK_SIZE"] == "constexpr" and values["BLOCK_SIZE"] == 256


def test_autotune_decorator_gives_the_first_config():
    module_text, kernels = extract_kernels(source("triton_matmul.py"))
    kernel = kernels["matmul_kernel"]
    assert "autotune" not in module_text
    assert kernel.config_constexprs == {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}
    assert (kernel.config_num_warps, kernel.config_num_stages) == (8, 3)


def test_default_specialization_is_noted():
    _, kernels = extract_kernels(source("triton_add.py"))
    types, values, divisible, notes = specialize(kernels["add_kernel"], None, None)
    assert types == {"x_ptr": "*fp32", "y_ptr": "*fp32", "output_ptr": "*fp32", "n_elements": "i32", "BLOCK_SIZE": "constexpr"}
    assert values == {"BLOCK_SIZE": 1024} and divisible == [0, 1, 2, 3]
    assert "BLOCK_SIZE=1024" in notes[0]


def test_launch_values_specialize_like_the_jit():
    _, kernels = extract_kernels(source("triton_add.py"))
    spec = {"x_ptr": "*fp16", "y_ptr": "*fp16", "output_ptr": "*fp16", "n_elements": 1000}
    types, _, divisible, notes = specialize(kernels["add_kernel"], spec, {"BLOCK_SIZE": 256})
    assert types["n_elements"] == "i32" and divisible == [0, 1, 2] and notes == []
    types, values, divisible, _ = specialize(kernels["add_kernel"], {**spec, "n_elements": 1}, None)
    assert types["n_elements"] == "constexpr" and values["n_elements"] == 1


def test_innermost_strides_are_assumed_one():
    _, kernels = extract_kernels(source("triton_matmul.py"))
    types, values, _, notes = specialize(kernels["matmul_kernel"], FP16_MATMUL, None)
    assert {p for p, v in values.items() if v == 1 and types[p] == "constexpr"} == {"stride_ak", "stride_bn", "stride_cn"}
    assert types["K"] == "i32"  # upper-case K is a size, not the tensor `k`
    assert any("contiguous" in note for note in notes)


def test_missing_triton_is_a_readable_error(monkeypatch):
    monkeypatch.setattr(triton_facts, "triton_available", lambda: False)
    result = compile_facts(source("triton_add.py") + "# no triton\n", "triton", H100)
    assert result.error == NO_TRITON


def test_python_syntax_error_is_readable():
    if not triton_facts.triton_available():
        pytest.skip("triton not installed")
    result = compile_facts("@triton.jit\ndef k(x_ptr:\n", "triton", H100)
    assert result.error.startswith("Python syntax error, line") and result.kernels == {}


def test_add_kernel_offline():
    pytest.importorskip("triton")
    result = compile_facts(source("triton_add.py"), "triton", H100)
    assert result.error is None
    kernel = result.kernels["add_kernel"]
    assert kernel.compiler.startswith("triton 3") and kernel.arch == "sm_90"
    assert 0 < kernel.registers <= 64 and kernel.spill_store_bytes == 0
    assert kernel.threads_per_block == 4 * 32  # Triton's default num_warps
    assert kernel.occupancy is not None
    if kernel.sass is not None:
        assert kernel.sass.global_loads >= 2 and kernel.sass.vector_loads_128 >= 2  # 16-byte aligned fp32 ×4


def test_matmul_uses_hopper_tensor_cores_and_specialization_matters():
    pytest.importorskip("triton")
    aligned = compile_facts(source("triton_matmul.py"), "triton", H100, signature=FP16_MATMUL).kernels["matmul_kernel"]
    assert aligned.threads_per_block == 8 * 32 and aligned.shared_dynamic_bytes > 0
    if aligned.sass is not None:
        assert aligned.sass.tensor_core > 0 and "HGMMA" in aligned.sass.tensor_core_ops
    unaligned_spec = {**FP16_MATMUL, "M": 1000, "stride_am": 1000, "stride_ak": 7}
    unaligned = compile_facts(source("triton_matmul.py"), "triton", H100, signature=unaligned_spec).kernels["matmul_kernel"]
    assert (unaligned.registers, unaligned.shared_dynamic_bytes) != (aligned.registers, aligned.shared_dynamic_bytes)


def test_a_block_and_num_warps_edit_compiles_each_side_with_its_own_launch(tmp_path: Path) -> None:
    """examples/add_triton.py (BLOCK=4096, num_warps=8) against its baseline (BLOCK=256, num_warps=2): the
    baseline was compiled with the candidate's launch, so both sides read as 8 warps a program."""
    pytest.importorskip("triton")
    examples = Path(__file__).parents[1] / "examples"
    for name in ("add_triton.py", "add_triton_baseline.py"):
        (tmp_path / name).write_text((examples / name).read_text())
    (result,) = with_facts(tmp_path / "add_triton.py", tmp_path).results
    assert result.facts is not None and result.reference_facts is not None, result.facts_error
    assert (result.reference_facts.threads_per_block, result.facts.threads_per_block) == (2 * 32, 8 * 32)


# What LLM-written KernelBench kernels do: sizes as constexprs the launch passes from run-time
# values, a flag that guards a branch, and an index table loaded through a parameter without a
# pointer's name. Guessed None and i32, their offline compile failed.
_SIZES_AS_CONSTEXPRS = """
import triton
import triton.language as tl


@triton.jit
def gather_scale_kernel(x_ptr, table, out_ptr, offset, total, Cout: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    row = tl.load(table + pid)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < total
    channel = offsets % Cout
    x = tl.load(x_ptr + offset + row * BLOCK_SIZE + offsets, mask=mask)
    if HAS_BIAS:
        x = x + 1.0
    tl.store(out_ptr + offsets, x * channel, mask=mask)
"""


def test_a_constexpr_computed_with_is_guessed_a_number_and_a_flag_stays_off():
    _, kernels = extract_kernels(_SIZES_AS_CONSTEXPRS)
    types, values, _, notes = specialize(kernels["gather_scale_kernel"], None, None)
    assert values["Cout"] == triton_facts.NUMERIC_CONSTEXPR_GUESS and values["HAS_BIAS"] is None
    assert any(f"Cout={triton_facts.NUMERIC_CONSTEXPR_GUESS}" in note for note in notes)


def test_a_constexpr_compared_for_equality_or_passed_by_keyword_is_a_mode_left_off():
    """At 16, `allow_tf32=ALLOW_TF32` and `if ACTIVATION == 1:` compiled another kernel than the
    JIT's defaults give: a matmul's registers went from 255 to 128."""
    modes = _SIZES_AS_CONSTEXPRS.replace(
        "HAS_BIAS: tl.constexpr", "HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, ALLOW_TF32: tl.constexpr"
    )
    modes = modes.replace("if HAS_BIAS:", "if ACTIVATION == 1:\n        x = tl.dot(x, x, allow_tf32=ALLOW_TF32)\n    if HAS_BIAS:")
    _, kernels = extract_kernels(modes)
    _, values, _, _ = specialize(kernels["gather_scale_kernel"], None, None)
    assert values["ACTIVATION"] is None and values["ALLOW_TF32"] is None and values["Cout"] == triton_facts.NUMERIC_CONSTEXPR_GUESS


def test_a_kernel_extent_is_guessed_small():
    """Unrolled over KH × KW at 16 each, a convolution's offline compile ran past its time limit."""
    conv = _SIZES_AS_CONSTEXPRS.replace("Cout: tl.constexpr", "KH: tl.constexpr, K_W: tl.constexpr").replace(
        "channel = offsets % Cout", "channel = offsets % (KH * K_W)"
    )
    _, kernels = extract_kernels(conv)
    _, values, _, _ = specialize(kernels["gather_scale_kernel"], None, None)
    assert values["KH"] == values["K_W"] == triton_facts.KERNEL_EXTENT_GUESS


def test_a_parameter_loaded_through_is_a_pointer_whatever_its_name():
    """TritonBench's `_bgmv_expand_slice_kernel` loads `lora_indices + cur_batch`: read as an i32 it failed to compile."""
    _, kernels = extract_kernels(_SIZES_AS_CONSTEXPRS)
    types, _, _, _ = specialize(kernels["gather_scale_kernel"], None, None)
    assert types["table"] == "*i32"  # its values go into an address: indices
    assert types["x_ptr"] == "*fp32"
    assert types["offset"] == "i32" and types["total"] == "i32"  # summed beside a named pointer: an offset
    _, kernels = extract_kernels(
        _SIZES_AS_CONSTEXPRS.replace("tl.store(out_ptr + offsets", "tl.atomic_xor(flags + pid, 1)\n    tl.store(out_ptr + offsets").replace(
            "total,", "total, flags,"
        )
    )
    assert specialize(kernels["gather_scale_kernel"], None, None)[0]["flags"] == "*fp32", "an atomic's address is one too"


def test_sizes_as_constexprs_and_a_table_by_use_compile_offline():
    pytest.importorskip("triton")
    result = compile_facts(_SIZES_AS_CONSTEXPRS, "triton", H100)
    assert result.error is None, result.error
    assert result.kernels["gather_scale_kernel"].registers > 0
