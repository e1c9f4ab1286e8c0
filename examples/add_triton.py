# kernelcast: reference=add_triton_baseline.py::add_kernel
"""Candidate: 4096 elements per program, streamed past the cache with aligned, hinted loads."""

import triton
import triton.language as tl


# kernelcast: launch grid=(cdiv(N, BLOCK),) args=(x:f32[N], y:f32[N], out:f32[N]:out, N:i32=1<<24) BLOCK=4096 num_warps=8
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offsets = tl.max_contiguous(tl.multiple_of(offsets, BLOCK), BLOCK)
    mask = offsets < N
    x = tl.load(x_ptr + offsets, mask=mask, eviction_policy="evict_first")
    y = tl.load(y_ptr + offsets, mask=mask, eviction_policy="evict_first")
    tl.store(out_ptr + offsets, x + y, mask=mask)
