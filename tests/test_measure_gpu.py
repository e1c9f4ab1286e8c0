"""Measuring on a real GPU: known orderings, A vs A, and the three ways a kernel can misbehave."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from machine import limit

from kernelcast.kernels_runtime.measure import MeasureFailure, Timeouts, measure_pair
from kernelcast.wire import Measurement

FIXTURES = Path(__file__).parent / "data" / "measure"
pytestmark = pytest.mark.gpu


def side(name: str, language: str = "cuda", kernel: str | None = None) -> dict[str, str | None]:
    return {"code": (FIXTURES / name).read_text(), "language": language, "name": kernel}


def measured(candidate: dict, reference: dict, **options) -> Measurement:
    outcome = measure_pair(candidate, reference, **options)
    assert isinstance(outcome, Measurement), outcome
    print(
        f"\n{candidate['name'] or ''} {outcome.message()} ci={outcome.ci95} "
        f"t_ref={outcome.t_reference_ms:.4f} ms t_cand={outcome.t_candidate_ms:.4f} ms"
    )
    return outcome


def test_strided_copy_is_slower_than_coalesced() -> None:
    outcome = measured(side("copy_strided.cu"), side("copy_coalesced.cu"))
    assert outcome.ci95[1] < 1.0
    details = outcome.details
    assert details["candidate"]["n"] >= 10 and details["rounds"] == 6
    assert details["clocks"]["before"].get("sm_clock_mhz") and details["driver"]
    assert details["problem_sizes"] == {"N": 1 << 24}


def test_tiled_transpose_is_faster_than_naive() -> None:
    assert measured(side("transpose_tiled.cu"), side("transpose_naive.cu")).ci95[0] > 1.0


def test_float4_loads_beat_scalar_loads() -> None:
    assert measured(side("scale_float4.cu"), side("scale_scalar.cu")).ci95[0] > 1.0


def test_a_vs_identical_a_contains_one_and_takes_under_five_seconds_warm() -> None:
    measured(side("copy_coalesced.cu"), side("copy_coalesced.cu"))  # warm the worker
    started = time.monotonic()
    outcome = measured(side("copy_coalesced.cu"), side("copy_coalesced.cu"))
    elapsed = time.monotonic() - started
    print(f"end-to-end on a warm worker: {elapsed:.2f} s")
    assert outcome.ci95[0] <= 1.0 <= outcome.ci95[1]
    assert elapsed < limit(5.0)


def test_triton_candidate_against_cuda_reference() -> None:
    outcome = measured(side("add_triton.py", "triton"), side("add_cuda.cu"))
    assert 0.5 < outcome.speedup < 2.0


def test_kernelbench_model_new_against_model() -> None:
    outcome = measured(side("kernelbench_relu.py", "pytorch", "ModelNew"), side("kernelbench_relu.py", "pytorch", "Model"))
    sizes = outcome.details["problem_sizes"]
    assert (sizes["batch_size"], sizes["dim"]) == (64, 65536)
    assert [item["shape"] for item in sizes["inputs"]] == [[64, 65536]]


def test_illegal_address_wrong_output_and_spin_are_survived() -> None:
    illegal = measure_pair(side("copy_illegal_address.cu"), side("copy_coalesced.cu"))
    assert isinstance(illegal, MeasureFailure) and illegal.kind == "runtime"
    assert illegal.message == "illegal memory access in candidate; worker restarted"

    wrong = measure_pair(side("copy_wrong.cu"), side("copy_coalesced.cu"))
    assert isinstance(wrong, MeasureFailure) and wrong.kind == "wrong"
    assert wrong.message.startswith("wrong results: max abs err 3.2e-01 at index 17 (tolerance 1e-04)")

    started = time.monotonic()
    spin = measure_pair(side("copy_spin_forever.cu"), side("copy_coalesced.cu"), timeouts=Timeouts(kernel_s=3.0))
    assert isinstance(spin, MeasureFailure) and spin.kind == "timeout"
    assert spin.message == "candidate ran longer than 3 s; worker killed and restarted"
    assert time.monotonic() - started < limit(30)

    assert measured(side("copy_strided.cu"), side("copy_coalesced.cu")).speedup < 1.0


def test_absurd_sizes_are_refused_on_the_device() -> None:
    huge = side("copy_coalesced.cu")
    huge["code"] = huge["code"].replace("N:i32=1<<24", "N:i64=1<<36")
    outcome = measure_pair(huge, huge)
    assert isinstance(outcome, MeasureFailure) and outcome.kind == "no-launch-spec"
    assert outcome.message.startswith("arrays need 1024.")


def test_a_whole_program_with_host_code_is_measured_by_its_kernels() -> None:
    """A `.cu` program with `#include <stdio.h>` and a `main` did not compile under NVRTC ("cannot open
    source file stdio.h"), so hand-written CUDA could not be measured at all. 32-thread blocks of a
    vector add on 2^24 floats ran 0.21x as fast as 256 on an H200."""
    program = side("program_vec_add.cu")
    blocks_of_32 = {**program, "code": program["code"].replace("cdiv(n, 256)) block=(256)", "cdiv(n, 32)) block=(32)")}
    blocks_of_32["code"] = blocks_of_32["code"].replace("int blockSize = 256;", "int blockSize = 32;")
    assert measured(blocks_of_32, program).ci95[1] < 0.7


def test_a_whole_program_without_pragmas_is_measured_as_its_main_launches() -> None:
    """No pragma on either side: each runs at the block its `main` launches with, on the buffers it allocates."""
    program = {**side("program_vec_add.cu"), "name": "vecAdd"}
    program["code"] = program["code"].split("\n", 1)[1]
    blocks_of_32 = {**program, "code": program["code"].replace("int blockSize = 256;", "int blockSize = 32;")}
    assert measured(blocks_of_32, program).ci95[1] < 0.7


def test_files_nvrtc_cannot_compile_are_built_by_nvcc_and_measured() -> None:
    """cub with cstdint and cfloat, and WMMA through mma.h: NVRTC opens none of those headers, so such
    hand-written CUDA failed to compile at all; nvcc builds it as its author does, and the line says so."""
    outcome = measured(side("block_sum_cub.cu"), side("block_sum_shared.cu"))
    built = outcome.details["built"]["candidate"]
    assert built.startswith("built by nvcc") and "(line 3: " in built and "/tmp" not in built, built
    assert "reference" not in outcome.details["built"]  # NVRTC still builds what it can
    wmma = measured(side("wmma_gemm.cu"), side("wmma_gemm.cu"))
    assert set(wmma.details["built"]) == {"candidate", "reference"}
    assert wmma.ci95[0] < 1.0 < wmma.ci95[1] or abs(wmma.speedup - 1.0) < 0.03
