// kernelcast: reference=vector_add.cu::vector_add
// Candidate: four floats per thread through 128-bit loads (N must be a multiple of 4).
// kernelcast: launch grid=(cdiv(N / 4, 256)) block=(256) args=(x:f32[N], y:f32[N], out:f32[N]:out, N:i32=1<<24)
__global__ void vector_add(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (4 * i < N) {
        float4 a = reinterpret_cast<const float4*>(x)[i];
        float4 b = reinterpret_cast<const float4*>(y)[i];
        reinterpret_cast<float4*>(out)[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
    }
}
