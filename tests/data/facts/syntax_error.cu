__global__ void broken(float* x) {
    x[threadIdx.x] = undefined_name + 1.0f
}
