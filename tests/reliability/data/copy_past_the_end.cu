// Copies correctly, then writes one element past the end of its output: the memory is mapped,
// so nothing faults, and the output itself compares equal. Only the guard zone sees it.
// kernelcast: launch grid=(cdiv(N, 256)) block=(256) args=(x:f32[N], y:f32[N]:out, N:i32=1<<24)
extern "C" __global__ void copy_past_the_end(const float* x, float* y, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) y[i] = x[i];
    if (i == N - 1) y[N] = 0.0f;
}
