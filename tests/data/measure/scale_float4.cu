// Four floats per thread with 16-byte loads, full grid.
// kernelcast: launch grid=(cdiv(N, 1024)) block=(256) args=(x:f32[N], y:f32[N]:out, N:i32=1<<24)
extern "C" __global__ void scale_float4(const float* x, float* y, int N) {
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < N) {
        float4 v = reinterpret_cast<const float4*>(x)[i / 4];
        reinterpret_cast<float4*>(y)[i / 4] = make_float4(2.0f * v.x, 2.0f * v.y, 2.0f * v.z, 2.0f * v.w);
    } else {
        for (; i < N; ++i) y[i] = 2.0f * x[i];
    }
}
