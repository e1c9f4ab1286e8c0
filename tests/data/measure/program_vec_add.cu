// kernelcast: launch kernel=vecAdd grid=(cdiv(n, 256)) block=(256) args=(a:f32[n], b:f32[n], c:f32[n]:out, n:i32=1<<24)
// A whole program, as hand-written CUDA comes: host includes, a main that allocates and launches.
#include <stdio.h>
#include <cuda_runtime.h>

#define N (1 << 24)

__global__ void vecAdd(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

int main() {
    float *d_a, *d_b, *d_c;
    size_t bytes = N * sizeof(float);
    cudaMalloc(&d_a, bytes);
    cudaMalloc(&d_b, bytes);
    cudaMalloc(&d_c, bytes);
    int blockSize = 256;
    int gridSize = (N + blockSize - 1) / blockSize;
    vecAdd<<<gridSize, blockSize>>>(d_a, d_b, d_c, N);
    cudaDeviceSynchronize();
    printf("done\n");
    return 0;
}
