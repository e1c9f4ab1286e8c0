// kernelcast: reference=matmul_naive.cu::sgemm
// Candidate: 16x16 tiles of A and B staged in shared memory and re-used 16 times.
// kernelcast: launch grid=(cdiv(N, 16), cdiv(N, 16)) block=(16, 16) args=(A:f32[N*N], B:f32[N*N], C:f32[N*N]:out, N:i32=2048)
#define TILE 16

__global__ void sgemm(const float* A, const float* B, float* C, int N) {
    __shared__ float tile_a[TILE][TILE];
    __shared__ float tile_b[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float sum = 0.0f;
    for (int t = 0; t < (N + TILE - 1) / TILE; ++t) {
        int a_col = t * TILE + threadIdx.x;
        int b_row = t * TILE + threadIdx.y;
        tile_a[threadIdx.y][threadIdx.x] = (row < N && a_col < N) ? A[row * N + a_col] : 0.0f;
        tile_b[threadIdx.y][threadIdx.x] = (b_row < N && col < N) ? B[b_row * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) {
            sum += tile_a[threadIdx.y][k] * tile_b[k][threadIdx.x];
        }
        __syncthreads();
    }
    if (row < N && col < N) {
        C[row * N + col] = sum;
    }
}
