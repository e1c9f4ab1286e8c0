// Through a padded shared-memory tile: reads and writes both coalesced.
// kernelcast: launch grid=(cdiv(C, 32), cdiv(R, 32)) block=(32, 8) args=(a:f32[R, C], b:f32[C, R]:out, R:i32=4096, C:i32=4096)
extern "C" __global__ void transpose_tiled(const float* a, float* b, int R, int C) {
    __shared__ float tile[32][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    for (int k = threadIdx.y; k < 32; k += 8) {
        int r = blockIdx.y * 32 + k;
        if (r < R && c < C) tile[k][threadIdx.x] = a[(size_t)r * C + c];
    }
    __syncthreads();
    int r = blockIdx.y * 32 + threadIdx.x;
    for (int k = threadIdx.y; k < 32; k += 8) {
        int cc = blockIdx.x * 32 + k;
        if (r < R && cc < C) b[(size_t)cc * R + r] = tile[threadIdx.x][k];
    }
}
