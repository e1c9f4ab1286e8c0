"""Batched matrix product `bmm`: C[b] = A[b] @ B[b] for [B, M, K] x [B, K, N], B = 8..64.

The kernels are ops.gemm's, with blockIdx.z (CUDA) or program_id(1) (Triton) picking the
matrix of the batch, so a bmm record and a gemm record of one family differ only in the
batch offsets and the problem shape: many small products (B=64, 128^3) are launch- and
occupancy-bound where one large product is not. Families and axes are ops.gemm's:
cuda-naive, cuda-smem-tiled, cuda-register-tiled (tiles, vector loads, unroll),
cuda-mma and cuda-mma-smem (tensor cores, fp16; stages, skew), triton-dot (blocks,
GROUP_M, num_warps, num_stages, fp32 input_precision). Inputs are uniform in [0, 1) so
that one fp32 tolerance checks exact and TF32 kernels (see ops.gemm).
"""

from __future__ import annotations

from collections.abc import Iterable

from workshop.corpus.ops.gemm import (
    MMA_SMEM_TILES,
    MMA_TILES,
    REGISTER_TILES,
    TRITON_F32,
    TRITON_HALF,
    mma_smem_params,
    mma_smem_variant,
    mma_variant,
    naive_variant,
    register_params,
    register_tiled_variant,
    smem_tiled_variant,
    triton_params,
    triton_variant,
)
from workshop.corpus.spec import Op, TensorSpec, Variant

SIZES = [
    {"batch": batch, "m": n, "n": n, "k": n, "dtype": dtype}
    for dtype in ("f32", "f16")
    for batch, n in ((64, 128), (32, 256), (16, 512), (8, 1024))
]


def variants() -> Iterable[Variant]:
    for dtype in ("f32", "f16"):
        yield naive_variant(dtype, {"block_x": 16, "block_y": 16, "order": "coalesced", "unroll": 1}, batched=True)
        for tile in (16, 32):
            yield smem_tiled_variant(dtype, {"tile": tile, "b_layout": "kn", "pad": 0, "unroll": True}, batched=True)
        for params in (
            *(register_params(tile) for tile in REGISTER_TILES),
            register_params(REGISTER_TILES[0], vec=1),
            register_params(REGISTER_TILES[0], unroll_k=False),
        ):
            yield register_tiled_variant(dtype, params, batched=True)
        if dtype == "f16":
            for fm, fn, warps_m, warps_n in MMA_TILES:
                yield mma_variant(dtype, {"FM": fm, "FN": fn, "WARPS_M": warps_m, "WARPS_N": warps_n}, batched=True)
            base = MMA_SMEM_TILES[0]
            for params in (
                *(mma_smem_params(tile) for tile in MMA_SMEM_TILES[:4]),
                mma_smem_params(base, stages=1),
                mma_smem_params(base, skew=0),
                mma_smem_params(MMA_SMEM_TILES[1], tensor_cores=False),
            ):
                yield mma_smem_variant(dtype, params, batched=True)
            base = TRITON_HALF[0]
            for params in (
                *(triton_params(config) for config in TRITON_HALF),
                triton_params(base, group_m=1),
                triton_params(base, num_stages=2),
            ):
                yield triton_variant(dtype, params, batched=True)
        else:
            for config in TRITON_F32:
                for precision in ("ieee", "tf32"):
                    yield triton_variant(dtype, triton_params(config, input_precision=precision), batched=True)
            yield triton_variant(dtype, triton_params(TRITON_F32[0], group_m=1, input_precision="tf32"), batched=True)


OP = Op(
    name="bmm",
    bound="compute",
    sizes=SIZES,
    inputs=lambda s: {
        "a": TensorSpec((s["batch"], s["m"], s["k"]), s["dtype"], "rand"),
        "b": TensorSpec((s["batch"], s["k"], s["n"]), s["dtype"], "rand"),
    },
    outputs=lambda s: {"c": TensorSpec((s["batch"], s["m"], s["n"]), s["dtype"])},
    reference=lambda torch, inputs, sizes: {"c": torch.bmm(inputs["a"], inputs["b"])},
    reference_code="def reference(a, b):\n    return torch.bmm(a, b)\n",
    variants=variants,
    tolerance={"f32": 2e-3, "f16": 1e-2},
)
