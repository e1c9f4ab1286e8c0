// Never finishes: datacenter GPUs have no watchdog, so only killing the process stops it.
// (clock64() is a volatile read the compiler cannot drop; a volatile local was optimised away.)
// kernelcast: launch grid=(cdiv(N, 256)) block=(256) args=(x:f32[N], y:f32[N]:out, N:i32=1<<24)
extern "C" __global__ void copy_spin_forever(const float* x, float* y, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    while (clock64() >= 0) { }
    if (i < N) y[i] = x[i];
}
