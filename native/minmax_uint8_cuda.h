/*
 * MinMaxUInt8 compression kernels for CUDA tensors: same formula, layout and NaN rules as
 * minmax_uint8.h (bit-identical results). Built by setup.py with nvcc into
 * bagua_core/_native_cuda.so and loaded at run time (cffi ABI mode); this header is the cdef.
 * Pointers are device pointers; stream is a cudaStream_t (torch.cuda.current_stream().cuda_stream).
 * Return values are cudaError_t codes (0 = success) or the BAGUA_MINMAX_ERR_* codes below.
 */
#ifndef BAGUA_MINMAX_UINT8_CUDA_H
#define BAGUA_MINMAX_UINT8_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BAGUA_CUDA_ERR_SIZE -1
#define BAGUA_CUDA_ERR_ARGUMENT -4

/* 0 when a CUDA device and a compatible driver are usable, else the cudaError_t code. */
int bagua_cuda_probe(void);
/* Text of a cudaError_t code. */
const char *bagua_cuda_error_string(int code);

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

/* low_precision_decentralized (as bagua_lpd_diff_f32 / bagua_lpd_update_f32 of minmax_uint8.h):
 * z = ((x + l / 3) + r / 3) - w * (float)(5 / 3); and for the elements [begin, end) of one-chunk
 * buffers of numel values: l += D(q_left), r += D(q_right), w += D(q_own), x = w (x may be NULL). */
int bagua_cuda_lpd_diff_f32(const float *x, const float *w, const float *l, const float *r,
                            int64_t numel, float *z, void *stream);
int bagua_cuda_lpd_update_f32(const uint8_t *q_left, const uint8_t *q_right, const uint8_t *q_own,
                              int64_t buf_bytes, int64_t numel, float *w, float *l, float *r, float *x,
                              int64_t begin, int64_t end, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* BAGUA_MINMAX_UINT8_CUDA_H */
