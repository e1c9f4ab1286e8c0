// Writes 4 TiB past its output, beyond any GPU's memory, so it is an illegal address whatever the
// worker allocated before (4 GiB past could land in a buffer an earlier request left mapped).
// kernelcast: launch grid=(cdiv(N, 256)) block=(256) args=(x:f32[N], y:f32[N]:out, N:i32=1<<24)
extern "C" __global__ void copy_illegal_address(const float* x, float* y, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) y[i + (1ll << 40)] = x[i];
}
