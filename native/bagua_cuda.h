/*
 * The shared part of the CUDA kernel library, bagua_core/_native_cuda.so, which setup.py builds with
 * nvcc from the *_cuda.cu files of this folder and bagua_core.runtime.native loads at run time (cffi ABI
 * mode; this header and the kernels' headers, minmax_uint8_cuda.h,
 * low_precision_decentralized_cuda.h and sparseloco_cuda.h, are the cdef). Return values of every function of the library are
 * cudaError_t codes (0 = success) or the BAGUA_CUDA_ERR_* codes below.
 */
#ifndef BAGUA_CUDA_H
#define BAGUA_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

#define BAGUA_CUDA_ERR_SIZE -1
#define BAGUA_CUDA_ERR_ARGUMENT -4

/* 0 when a CUDA device and a compatible driver are usable, else the cudaError_t code. */
int bagua_cuda_probe(void);
/* Text of a cudaError_t code or of a BAGUA_CUDA_ERR_* code. */
const char *bagua_cuda_error_string(int code);

#ifdef __cplusplus
}
#endif

#endif /* BAGUA_CUDA_H */
