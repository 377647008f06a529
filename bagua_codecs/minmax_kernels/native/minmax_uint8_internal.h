/*
 * MinMaxUInt8's helpers shared by the kernel files that read or write its buffers (minmax_uint8.c,
 * minmax_uint8_fused.c, low_precision_decentralized.c).
 * Not part of the library's API and not in the cffi cdef; the library is built with
 * -fvisibility=hidden, so these names stay inside it.
 */
#ifndef BAGUA_MINMAX_UINT8_INTERNAL_H
#define BAGUA_MINMAX_UINT8_INTERNAL_H

#include <stdint.h>

#include "parallel.h"

#define EPS 1e-7f

typedef struct {
    float scale, upper, lower;
} params_t;

/* ceil(numel / n_chunks) (0 for an empty tensor), and the bytes of a slot of chunk_numel elements. */
int64_t chunk_numel_of(int64_t numel, int64_t n_chunks);
int64_t slot_bytes(int64_t chunk_numel);

/* The parameters of a chunk with this min/max: 0, or BAGUA_MINMAX_ERR_NONFINITE / _OVERFLOW. */
int make_params(float mn, float mx, params_t *p);
/* The parameters in a slot's header (NaN parameters for a NaN chunk). */
void read_params(const uint8_t *slot, params_t *p);

/* min/max of x[0:n] and whether a NaN was seen (AVX2 where the CPU has it). */
void minmax_range(const float *x, int64_t n, float *mn, float *mx, int *bad);
/* q[i] = clamp(min(rint(x[i] * scale), upper) - lower, 0, 255). */
void quantise(const float *restrict x, int64_t n, float scale, float upper, float lower, uint8_t *restrict q);
/* out[i] = (q[i] + lower) / scale, or out[i] += that with accumulate. */
void dequantise(const uint8_t *restrict q, int64_t n, float scale, float lower, float *restrict out,
                int accumulate);

/* Merges n partial {min, max, NaN seen} results into stats = {min, max, NaN seen (0 or 1)}. */
void merge_stats(float *stats, const float *mn, const float *mx, const int *bad, int n);

#endif /* BAGUA_MINMAX_UINT8_INTERNAL_H */
