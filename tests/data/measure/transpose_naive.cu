// out[c][r] = in[r][c]: reads coalesced, writes strided by R.
// kernelcast: launch grid=(cdiv(C, 32), cdiv(R, 32)) block=(32, 32) args=(a:f32[R, C], b:f32[C, R]:out, R:i32=4096, C:i32=4096)
extern "C" __global__ void transpose_naive(const float* a, float* b, int R, int C) {
    int c = blockIdx.x * 32 + threadIdx.x;
    int r = blockIdx.y * 32 + threadIdx.y;
    if (r < R && c < C) b[(size_t)c * R + r] = a[(size_t)r * C + c];
}
