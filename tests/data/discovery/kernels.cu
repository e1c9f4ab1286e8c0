#include <cuda_runtime.h>
#define BLOCK 256  // { not a brace that counts
/* a comment that mentions __global__ void fake() { */

template <typename T, int N = 4>
__global__ void __launch_bounds__(BLOCK, 2) scale(const T* __restrict__ in,
                                                   T* out, /* ) */ float factor)
{
    const char* text = "}\"{";
    char close = '}';
    out[0] = in[0] * factor;  // }
}

__global__ void declared_only(float* x);

extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { c[i] = a[i] + b[i]; }
}

__device__ float helper(float x) { return x; }

[[maybe_unused]] static __global__ void raw_string_kernel() {
    const char* s = R"delim(}}} __global__ )delim";
}
