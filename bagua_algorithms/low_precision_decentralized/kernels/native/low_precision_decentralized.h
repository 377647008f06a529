/*
 * low_precision_decentralized's fused steps on the CPU, one pass each over the replicas of a round
 * (the algorithm's package, bagua_algorithms/low_precision_decentralized/kernels/, calls them when
 * the ring's codec is MinMaxUInt8). Part of the CPU library's cffi cdef (native/build_cpu.py); they
 * return the BAGUA_NATIVE_* codes of bagua_native.h.
 *
 * lpd_diff_f32: z = ((x + l / 3) + r / 3) - w * 1.6666666f (torch's order of
 * `x + l / 3 + r / 3 - w * (5 / 3)` in fp32), merging the {min, max, NaN seen} of z into stats
 * (float[3], as MinMaxUInt8's fused kernels keep it, see minmax_uint8.h).
 * lpd_update_f32, for the elements [begin, end) of the one-chunk MinMaxUInt8 buffers of numel
 * elements: l += D(q_left), r += D(q_right), w += D(q_own), then x = w (x may be NULL); q_left may
 * equal q_right.
 */
#ifndef BAGUA_LOW_PRECISION_DECENTRALIZED_H
#define BAGUA_LOW_PRECISION_DECENTRALIZED_H

#include <stdint.h>

int bagua_lpd_diff_f32(const float *x, const float *w, const float *l, const float *r, int64_t numel,
                       float *z, float *stats);
int bagua_lpd_update_f32(const uint8_t *q_left, const uint8_t *q_right, const uint8_t *q_own,
                         int64_t buf_bytes, int64_t numel, float *w, float *l, float *r, float *x,
                         int64_t begin, int64_t end);

#endif /* BAGUA_LOW_PRECISION_DECENTRALIZED_H */
