// Never finishes: datacenter GPUs have no watchdog, so only killing the process stops it.
// kernelcast: launch grid=(cdiv(N, 256)) block=(256) args=(x:f32[N], y:f32[N]:out, N:i32=1<<24)
extern "C" __global__ void copy_spin_forever(const float* x, float* y, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    volatile int keep_going = 1;
    while (keep_going) { }
    if (i < N) y[i] = x[i];
}
