/*
 * MinMaxUInt8's building blocks for C kernels that read or write its buffers: a public header of the
 * bagua_codecs package (its include/ folder, bagua_codecs.include_dir()). The codec's own kernels
 * (minmax_uint8.c, minmax_uint8_fused.c) are built on them, and so is a kernel of another package that
 * fuses its own steps with this codec (low_precision_decentralized.c): such a kernel set names the
 * package in its kernels.toml, `uses = ["bagua_codecs"]`, and includes this header by name.
 *
 * The functions are defined in the codec's minmax_uint8.c and compiled into bagua's one CPU library,
 * which is built with -fvisibility=hidden: they are not in the library's API nor in the cffi cdef, so
 * only a kernel compiled into that library (a kernels.toml under bagua_codecs/ or bagua_algorithms/)
 * links to them.
 *
 * Layout and formula (as the codec's minmax_uint8.h states them): n_chunks chunks of
 * chunk_numel_of(numel, n_chunks) elements, each in a slot of slot_bytes(chunk_numel) bytes,
 * [float32 min][float32 max][one uint8 per element][zero padding to 8 bytes]; per chunk, in fp32,
 * scale = 255 / (max - min + BAGUA_MINMAX_EPS), upper = rint(max * scale), lower = upper - 255,
 * q = uint8(clamp(min(rint(x * scale), upper) - lower, 0, 255)), x' = (q + lower) / scale.
 */
#ifndef BAGUA_MINMAX_UINT8_BLOCKS_H
#define BAGUA_MINMAX_UINT8_BLOCKS_H

#include <stdint.h>

#include "parallel.h" /* bagua's shared threads (native/): MAX_THREADS, piece, run_parallel */

#define BAGUA_MINMAX_EPS 1e-7f

/* A chunk's parameters (see the formula above). */
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

#endif /* BAGUA_MINMAX_UINT8_BLOCKS_H */
