/*
 * Fused MinMaxUInt8 kernels (declared in minmax_uint8.h): where the plain kernels read the same
 * memory twice, these read it once, working block by block while a block is still in L1.
 *
 * Exactness: the same single fp32 operations in the same order as the plain kernels and as torch
 * (built with -ffp-contract=off, never -ffast-math), so results are bit-identical to composing the
 * plain kernels (and to the torch fallback, bagua_codecs/minmax_kernels/fallback.py). The fused steps of
 * low_precision_decentralized, which read and write these buffers, are in low_precision_decentralized.c.
 */
#include <math.h>
#include <string.h>

#include "minmax_uint8.h"
#include "minmax_uint8_blocks.h"

#define BLOCK 2048 /* elements per block: a few arrays of it stay in L1 */

void merge_stats(float *stats, const float *mn, const float *mx, const int *bad, int n) {
    for (int k = 0; k < n; k++) {
        stats[0] = mn[k] < stats[0] ? mn[k] : stats[0];
        stats[1] = mx[k] > stats[1] ? mx[k] : stats[1];
        if (bad[k]) stats[2] = 1.0f;
    }
}

int bagua_minmax_headers_from_stats_f32(const float *stats, int64_t numel, uint8_t *out, int64_t out_bytes,
                                        int nonfinite_raise) {
    if (stats == NULL || out == NULL || numel < 0) return BAGUA_MINMAX_ERR_ARGUMENT;
    if (out_bytes != bagua_minmax_compressed_size(numel, 1)) return BAGUA_MINMAX_ERR_SIZE;
    float mn = stats[0], mx = stats[1], mm[2];
    if (numel == 0) mn = mx = 0.0f;
    mn = mn + 0.0f; /* -0 -> +0, as headers_f32 stores it */
    mx = mx + 0.0f;
    params_t p;
    int status = stats[2] != 0.0f ? BAGUA_MINMAX_ERR_NONFINITE : make_params(mn, mx, &p);
    if (status != BAGUA_MINMAX_OK) {
        if (nonfinite_raise) return status;
        mn = mx = NAN;
    }
    mm[0] = mn;
    mm[1] = mx;
    memcpy(out, mm, sizeof mm);
    memset(out + 8 + numel, 0, (size_t)(out_bytes - 8 - numel));
    return BAGUA_MINMAX_OK;
}

typedef struct {
    const float *x;
    float *deq;
    uint8_t *q;
    int64_t begin, end, deq_numel;
    params_t p;
} fused_t;

static void quantise_decompress_task(void *ctx, int t, int n) {
    fused_t *j = (fused_t *)ctx;
    int64_t b, e;
    piece(j->begin, j->end, t, n, &b, &e);
    int nan_chunk = isnan(j->p.scale);
    for (int64_t s = b; s < e; s += BLOCK) {
        int64_t len = e - s < BLOCK ? e - s : BLOCK;
        if (nan_chunk)
            memset(j->q + s, 0, (size_t)len);
        else
            quantise(j->x + s, len, j->p.scale, j->p.upper, j->p.lower, j->q + s);
        int64_t keep = j->deq_numel - s < len ? j->deq_numel - s : len;
        if (keep > 0) dequantise(j->q + s, keep, j->p.scale, j->p.lower, j->deq + s, 0);
    }
}

int bagua_minmax_quantise_decompress_f32(const float *x, int64_t numel, uint8_t *out, int64_t out_bytes,
                                         int64_t begin, int64_t end, float *deq, int64_t deq_numel) {
    if (numel < 0 || (numel > 0 && (x == NULL || out == NULL)) || begin < 0 || end < begin ||
        deq_numel < 0 || (deq_numel > 0 && deq == NULL))
        return BAGUA_MINMAX_ERR_ARGUMENT;
    if (out_bytes != bagua_minmax_compressed_size(numel, 1)) return BAGUA_MINMAX_ERR_SIZE;
    fused_t j = {.x = x, .q = out + 8, .deq = deq, .deq_numel = deq_numel};
    j.begin = begin < numel ? begin : numel;
    j.end = end < numel ? end : numel;
    read_params(out, &j.p);
    run_parallel(j.end - j.begin, quantise_decompress_task, &j);
    return BAGUA_MINMAX_OK;
}
