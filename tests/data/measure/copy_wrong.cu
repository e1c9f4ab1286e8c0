// Off by a little: element 17 gets the wrong value.
// kernelcast: launch grid=(cdiv(N, 256)) block=(256) args=(x:f32[N], y:f32[N]:out, N:i32=1<<24)
extern "C" __global__ void copy_wrong(const float* x, float* y, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) y[i] = (i == 17) ? x[i] + 0.32f : x[i];
}
