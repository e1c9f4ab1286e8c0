// 1024 threads × 2 blocks leave 32 registers per thread: the 64-float array must spill.
__global__ void __launch_bounds__(1024, 2) spill_heavy(float* out, int stride) {
    float values[64];
    for (int i = 0; i < 64; ++i) values[i] = out[i * stride];
    float sum = 0.0f;
    for (int i = 0; i < 64; ++i) sum += values[(i * stride) & 63] * values[i];
    out[threadIdx.x] = sum;
}
