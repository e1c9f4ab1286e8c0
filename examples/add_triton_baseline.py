"""Baseline Triton add: 256 elements per program."""

import triton
import triton.language as tl


# kernelcast: launch grid=(cdiv(N, BLOCK),) args=(x:f32[N], y:f32[N], out:f32[N]:out, N:i32=1<<24) BLOCK=256 num_warps=2
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)
