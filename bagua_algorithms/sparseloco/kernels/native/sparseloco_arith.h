/*
 * sparseloco's per-value arithmetic, shared by the C kernels and the CUDA kernels (SL_FN is __host__
 * __device__ under nvcc): the magnitude order of the selection, the Elias-Fano parameter of a chunk and the
 * quantiser, each step one IEEE fp32 operation in the order of bagua_algorithms/sparseloco/quantiser.py (the
 * C library is built with -ffp-contract=off, the CUDA one with -fmad=false; no fast math). Not part of any
 * cdef.
 */
#ifndef BAGUA_SPARSELOCO_ARITH_H
#define BAGUA_SPARSELOCO_ARITH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SL_FN __host__ __device__ static inline
#else
#define SL_FN static inline
#endif

#define SL_FLOOR_LEVELS 65535.0f /* quantiser.FLOOR_LEVELS */
#define SL_INF_BITS 0x7f800000u

/* |x| as its IEEE bits with NaN as +inf: non-negative floats order as these integers, and two are equal
 * exactly when the floats are (|-0| is 0), so the selection compares integers. */
SL_FN uint32_t sl_magnitude(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u &= 0x7fffffffu;
    return u > SL_INF_BITS ? SL_INF_BITS : u;
}

SL_FN float sl_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* k' of a chunk of m elements. */
SL_FN int64_t sl_sent(int64_t m, int64_t topk) {
    return topk < m ? topk : m;
}

/* l = floor(log2(m / k')) of a chunk whose indices travel (k' < m). */
SL_FN int sl_low_bits(int64_t m, int64_t k) {
    int64_t q = m / k;
    int l = 0;
    while (q >> (l + 1)) l++;
    return l;
}

/* q = rint(lo / hi * 65535) clamped to [0, 65535]; 0 when hi is not finite or not above 0. */
SL_FN uint32_t sl_floor_q(float hi, float lo) {
    if (!(isfinite(hi) && hi > 0.0f)) return 0;
    float q = rintf(lo / hi * SL_FLOOR_LEVELS);
    if (!(q > 0.0f)) return 0; /* (NaN too: lo is a sent magnitude, never NaN, in a message) */
    return q > SL_FLOOR_LEVELS ? 65535u : (uint32_t)q;
}

/* lo' = hi * q / 65535, as every replica computes it. */
SL_FN float sl_floor(float hi, uint32_t q) {
    return hi * (float)q / SL_FLOOR_LEVELS;
}

/* The code of v in a chunk of ceiling hi and floor lo' (levels = 2^(bits - 1)). */
SL_FN uint8_t sl_code(float v, float hi, float floor_, int bits) {
    int levels = 1 << (bits - 1);
    float span = hi - floor_;
    float position = span > 0.0f ? (fabsf(v) - floor_) / span * (float)(levels - 1) : 0.0f;
    if (isnan(position)) position = 0.0f;
    float j = rintf(position);
    j = j < 0.0f ? 0.0f : (j > (float)(levels - 1) ? (float)(levels - 1) : j);
    return (uint8_t)((uint8_t)j | ((v < 0.0f ? 1u : 0u) << (bits - 1)));
}

/* The value of code in a chunk of ceiling hi and floor lo'. */
SL_FN float sl_value(uint32_t code, float hi, float floor_, int bits) {
    uint32_t levels = 1u << (bits - 1);
    float w = (float)(code & (levels - 1)) / (float)(levels - 1);
    float magnitude = floor_ * (1.0f - w) + hi * w;
    return (code >> (bits - 1)) ? -magnitude : magnitude;
}

#endif /* BAGUA_SPARSELOCO_ARITH_H */
