// The CUDA twin of add_triton.py, as a cross-language reference.
// kernelcast: launch grid=(cdiv(N, 256)) block=(256) args=(x:f32[N], y:f32[N], out:f32[N]:out, N:i32=1<<24)
extern "C" __global__ void add_cuda(const float* x, const float* y, float* out, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = x[i] + y[i];
}
