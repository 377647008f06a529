/*
 * low_precision_decentralized's fused steps for CUDA tensors (as bagua_lpd_diff_f32 /
 * bagua_lpd_update_f32 of low_precision_decentralized.h, without the stats). Part of the CUDA kernel
 * library (bagua_cuda.h), whose cdef this header is part of; the algorithm's package,
 * bagua_algorithms/low_precision_decentralized/kernels/, calls them. All work is queued on stream.
 *
 * z = ((x + l / 3) + r / 3) - w * (float)(5 / 3); and for the elements [begin, end) of one-chunk
 * MinMaxUInt8 buffers of numel values: l += D(q_left), r += D(q_right), w += D(q_own), x = w (x may
 * be NULL).
 */
#ifndef BAGUA_LOW_PRECISION_DECENTRALIZED_CUDA_H
#define BAGUA_LOW_PRECISION_DECENTRALIZED_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int bagua_cuda_lpd_diff_f32(const float *x, const float *w, const float *l, const float *r,
                            int64_t numel, float *z, void *stream);
int bagua_cuda_lpd_update_f32(const uint8_t *q_left, const uint8_t *q_right, const uint8_t *q_own,
                              int64_t buf_bytes, int64_t numel, float *w, float *l, float *r, float *x,
                              int64_t begin, int64_t end, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* BAGUA_LOW_PRECISION_DECENTRALIZED_CUDA_H */
