// Writes far outside its output: an illegal address that poisons the CUDA context.
// kernelcast: launch grid=(cdiv(N, 256)) block=(256) args=(x:f32[N], y:f32[N]:out, N:i32=1<<24)
extern "C" __global__ void copy_illegal_address(const float* x, float* y, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) y[i + (1 << 30)] = x[i];
}
