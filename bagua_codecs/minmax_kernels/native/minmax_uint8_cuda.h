/*
 * MinMaxUInt8 compression kernels for CUDA tensors: same formula, layout and NaN rules as
 * minmax_uint8.h (bit-identical results). Part of the CUDA kernel library (bagua_cuda.h), whose cdef
 * this header is part of; bagua_codecs.minmax_kernels calls them.
 * Pointers are device pointers; stream is a cudaStream_t (torch.cuda.current_stream().cuda_stream).
 * Return values are cudaError_t codes (0 = success) or the BAGUA_CUDA_ERR_* codes of bagua_cuda.h.
 */
#ifndef BAGUA_MINMAX_UINT8_CUDA_H
#define BAGUA_MINMAX_UINT8_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of device workspace bagua_cuda_minmax_compress_f32 needs. */
int64_t bagua_cuda_minmax_workspace_bytes(int64_t numel, int64_t n_chunks);

/* Compresses x into out; status (n_chunks ints, device memory) receives 0 or
 * BAGUA_MINMAX_ERR_NONFINITE / BAGUA_MINMAX_ERR_OVERFLOW per chunk; such chunks are NaN chunks. */
int bagua_cuda_minmax_compress_f32(const float *x, int64_t numel, int64_t n_chunks, uint8_t *out,
                                   int64_t out_bytes, void *workspace, int *status, void *stream);

/* out = D(buf), or out += D(buf) when accumulate != 0 (fp32). */
int bagua_cuda_minmax_decompress_f32(const uint8_t *buf, int64_t buf_bytes, int64_t numel,
                                     int64_t n_chunks, float *out, int accumulate, void *stream);

/* out = sum_k D(bufs + k * buf_bytes) for k < n_bufs (one-chunk buffers of numel elements, laid
 * out back to back), in fp32 in order k = 0, 1, ...; divided by n_bufs when average != 0. */
int bagua_cuda_minmax_decompress_sum_f32(const uint8_t *bufs, int64_t n_bufs, int64_t buf_bytes,
                                         int64_t numel, float *out, int average, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* BAGUA_MINMAX_UINT8_CUDA_H */
