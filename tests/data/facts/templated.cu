template <typename T, int UNROLL>
__global__ void scale(T* data, T factor, int n) {
    int base = (blockIdx.x * blockDim.x + threadIdx.x) * UNROLL;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
        if (base + u < n) data[base + u] *= factor;
}
template __global__ void scale<float, 4>(float*, float, int);
template __global__ void scale<double, 2>(double*, double, int);
