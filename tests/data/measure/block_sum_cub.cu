// One sum per block of 256 floats, by CUB's block reduction: the headers NVRTC cannot open.
// kernelcast: launch grid=(cdiv(N, 256)) block=(256) args=(x:f32[N], sums:f32[cdiv(N, 256)]:out, N:i32=1<<24)
#include <cstdint>
#include <cfloat>
#include <cub/block/block_reduce.cuh>

template <int THREADS>
__global__ void block_sum(const float* x, float* sums, int32_t N) {
    using Reduce = cub::BlockReduce<float, THREADS>;
    __shared__ typename Reduce::TempStorage scratch;
    int64_t i = static_cast<int64_t>(blockIdx.x) * THREADS + threadIdx.x;
    float value = i < N ? x[i] : 0.0f;
    float total = Reduce(scratch).Sum(value);
    if (threadIdx.x == 0) sums[blockIdx.x] = total + (FLT_MIN - FLT_MIN);
}

int main() {
    float *x, *sums;
    cudaMalloc(&x, (1 << 24) * sizeof(float));
    cudaMalloc(&sums, (1 << 16) * sizeof(float));
    block_sum<256><<<1 << 16, 256>>>(x, sums, 1 << 24);
    return cudaDeviceSynchronize();
}
