// A half-precision GEMM on tensor cores through WMMA: one warp per 16x16 tile of C.
// kernelcast: launch grid=(cdiv(N, 16), cdiv(M, 16)) block=(32) args=(a:f16[M, K], b:f16[K, N], c:f32[M, N]:out, M:i32=2048, N:i32=2048, K:i32=2048)
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;

__global__ void wmma_gemm(const half* a, const half* b, float* c, int M, int N, int K) {
    int tile_row = blockIdx.y * 16, tile_col = blockIdx.x * 16;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a_tile;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b_tile;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> sum;
    wmma::fill_fragment(sum, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(a_tile, a + tile_row * K + k, K);
        wmma::load_matrix_sync(b_tile, b + k * N + tile_col, N);
        wmma::mma_sync(sum, a_tile, b_tile, sum);
    }
    wmma::store_matrix_sync(c + tile_row * N + tile_col, sum, N, wmma::mem_row_major);
}
