"""Write a sweep of real CUDA variants of one operation for `kernelcast rank` (benchmarks/rank_two_gpus.sh).

out = x + y over N floats. The reference is one float per thread in 256-thread blocks; the
variants cross block size, elements per thread (1, 2 or 4, as scalar loads or as one float2 /
float4 load) and grid-stride or one-pass loops; one hostile variant also stores 64 GB past its
output, which the GPU reports as an illegal address.

    python benchmarks/rank_variants.py OUT_DIR [--n N]   → OUT_DIR/reference.cu, OUT_DIR/variants/*.cu
"""

from __future__ import annotations

import argparse
from pathlib import Path

BLOCKS = (64, 128, 256, 512, 1024)
N_DEFAULT = 1 << 24
ARGS = "args=(x:f32[N], y:f32[N], out:f32[N]:out, N:i32={n})"

REFERENCE = """// kernelcast: launch grid=(cdiv(N, 256)) block=(256) {args}
__global__ void vadd(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out, int N) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = x[i] + y[i];
}}
"""

# Elements per thread → (loads of one step, how the grid shrinks). Vector loads need N % width == 0.
_BODIES = {
    "scalar1": (1, "if (i < N) out[i] = x[i] + y[i];"),
    "scalar2": (2, "for (int k = 0; k < 2; ++k) { int j = i * 2 + k; if (j < N) out[j] = x[j] + y[j]; }"),
    "scalar4": (4, "for (int k = 0; k < 4; ++k) { int j = i * 4 + k; if (j < N) out[j] = x[j] + y[j]; }"),
    "float2": (
        2,
        "if (2 * i < N) { float2 a = reinterpret_cast<const float2*>(x)[i], b = reinterpret_cast<const float2*>(y)[i];"
        " reinterpret_cast<float2*>(out)[i] = make_float2(a.x + b.x, a.y + b.y); }",
    ),
    "float4": (
        4,
        "if (4 * i < N) { float4 a = reinterpret_cast<const float4*>(x)[i], b = reinterpret_cast<const float4*>(y)[i];"
        " reinterpret_cast<float4*>(out)[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }",
    ),
}
_GRID_STRIDE = {
    "scalar1": "for (int j = i; j < N; j += stride) out[j] = x[j] + y[j];",
    "float4": (
        "for (int j = i; 4 * j < N; j += stride) { float4 a = reinterpret_cast<const float4*>(x)[j],"
        " b = reinterpret_cast<const float4*>(y)[j];"
        " reinterpret_cast<float4*>(out)[j] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }"
    ),
}
# The float4 variant plus one stray store 64 GB past the output: it looks as fast as the best
# to the forecaster, so the policy measures it early, and the GPU reports an illegal address.
HOSTILE_STORE = "if (i == 0) out[(size_t)1 << 34] = 0.0f;"


def _kernel(grid: str, block: int, body: str, args: str, stride: bool) -> str:
    prelude = "    int stride = gridDim.x * blockDim.x;\n" if stride else ""
    return (
        f"// kernelcast: launch grid=({grid}) block=({block}) {args}\n"
        "__global__ void vadd(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out, int N) {\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        f"{prelude}    {body}\n}}\n"
    )


def variants(n: int = N_DEFAULT) -> dict[str, str]:
    """Name → CUDA source of every variant (the reference's own launch left out)."""
    args = ARGS.format(n=n)
    found: dict[str, str] = {}
    for block in BLOCKS:
        for name, (per_thread, body) in _BODIES.items():
            if (name, block) != ("scalar1", 256):
                found[f"{name}_b{block}"] = _kernel(f"cdiv(N, {block * per_thread})", block, body, args, False)
        for name, body in _GRID_STRIDE.items():
            for waves in (1, 4):  # one or four blocks per SM on 132 SMs
                found[f"{name}_gridstride{waves}_b{block}"] = _kernel(str(132 * waves), block, body, args, True)
    found["hostile_illegal_address"] = _kernel("cdiv(N, 4096)", 1024, _BODIES["float4"][1] + " " + HOSTILE_STORE, args, False)
    return found


def write(folder: Path, n: int = N_DEFAULT) -> int:
    """Write reference.cu and variants/*.cu under `folder`; returns the number of variants."""
    (folder / "variants").mkdir(parents=True, exist_ok=True)
    (folder / "reference.cu").write_text(REFERENCE.format(args=ARGS.format(n=n)))
    written = variants(n)
    for name, code in written.items():
        (folder / "variants" / f"{name}.cu").write_text(code)
    return len(written)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--n", type=int, default=N_DEFAULT, help="elements (a multiple of 4 for the vector loads)")
    args = parser.parse_args()
    print(f"{write(args.out, args.n)} variants in {args.out / 'variants'}, reference {args.out / 'reference.cu'}")


if __name__ == "__main__":
    main()
