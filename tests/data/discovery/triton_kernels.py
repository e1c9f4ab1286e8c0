import triton
import triton as tr
import triton.language as tl
from numba import jit as numba_jit
from triton import jit


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + tl.load(y_ptr + offsets), mask=offsets < n)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})],
    key=["n"],
)
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit(do_not_specialize=["n"])
def scale_kernel(
    x_ptr,
    n,
    BLOCK: tl.constexpr,
) -> None:
    pid = tl.program_id(0)


@jit
def bare_jit_kernel(x_ptr):
    pass


@tr.jit
def aliased_kernel(x_ptr):
    pass


@numba_jit
def not_triton(x):
    return x


def launcher(x):
    add_kernel[(1,)](x, x, x, 1, BLOCK=128)
