// Baseline SGEMM: each thread walks a row of A and a column of B in global memory.
// kernelcast: launch grid=(cdiv(N, 16), cdiv(N, 16)) block=(16, 16) args=(A:f32[N*N], B:f32[N*N], C:f32[N*N]:out, N:i32=2048)
__global__ void sgemm(const float* A, const float* B, float* C, int N) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < N && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < N; ++k) {
            sum += A[row * N + k] * B[k * N + col];
        }
        C[row * N + col] = sum;
    }
}
