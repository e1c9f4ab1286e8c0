#define TILE 32
// The +1 column avoids shared-memory bank conflicts: 32 × 33 floats = 4224 bytes.
__global__ void __launch_bounds__(1024) transpose(const float* in, float* out, int width, int height) {
    __shared__ float tile[TILE][TILE + 1];
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    if (x < width && y < height) tile[threadIdx.y][threadIdx.x] = in[y * width + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;
    y = blockIdx.x * TILE + threadIdx.y;
    if (x < height && y < width) out[y * height + x] = tile[threadIdx.x][threadIdx.y];
}
