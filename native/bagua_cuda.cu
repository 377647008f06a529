// The shared part of the CUDA kernel library (bagua_cuda.h): whether a device can run the kernels,
// and the text of their error codes.
#include <cuda_runtime.h>

#include "bagua_cuda.h"

extern "C" {

int bagua_cuda_probe(void) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) return (int)err;
    return count > 0 ? 0 : (int)cudaErrorNoDevice;
}

const char *bagua_cuda_error_string(int code) {
    if (code == BAGUA_CUDA_ERR_SIZE) return "buffer size does not match the compressed layout";
    if (code == BAGUA_CUDA_ERR_ARGUMENT) return "invalid argument";
    return cudaGetErrorString((cudaError_t)code);
}

}  // extern "C"
