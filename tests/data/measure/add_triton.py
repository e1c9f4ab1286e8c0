"""Triton vector add with its launch pragma (fixture for measure tests)."""

import triton
import triton.language as tl


# kernelcast: launch grid=(cdiv(N, BLOCK),) args=(x:f32[N], y:f32[N], out:f32[N]:out, N:i32=1<<24) BLOCK=1024 num_warps=4
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < N
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)
