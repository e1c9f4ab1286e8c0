// Baseline: one float per thread.
// kernelcast: launch grid=(cdiv(N, 256)) block=(256) args=(x:f32[N], y:f32[N], out:f32[N]:out, N:i32=1<<24)
__global__ void vector_add(const float* x, const float* y, float* out, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        out[i] = x[i] + y[i];
    }
}
