// One sum per block of 256 floats, by a shared-memory tree.
// kernelcast: launch grid=(cdiv(N, 256)) block=(256) args=(x:f32[N], sums:f32[cdiv(N, 256)]:out, N:i32=1<<24)
extern "C" __global__ void block_sum(const float* x, float* sums, int N) {
    __shared__ float partial[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    partial[threadIdx.x] = i < N ? x[i] : 0.0f;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) sums[blockIdx.x] = partial[0];
}
