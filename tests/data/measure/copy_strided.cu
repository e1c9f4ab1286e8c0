// Same copy, but consecutive threads touch elements 32 apart (one sector per thread).
// kernelcast: launch grid=(cdiv(N, 256)) block=(256) args=(x:f32[N], y:f32[N]:out, N:i32=1<<24)
extern "C" __global__ void copy_strided(const float* x, float* y, int N) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= N) return;
    int i = (t % 32) * (N / 32) + t / 32;
    y[i] = x[i];
}
