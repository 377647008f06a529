/*
 * Fused MinMaxUInt8 kernels (declared in minmax_uint8.h): where the plain kernels read the same
 * memory twice, these read it once, working block by block while a block is still in L1.
 *
 * Exactness: the same single fp32 operations in the same order as the plain kernels and as torch
 * (built with -ffp-contract=off, never -ffast-math), so results are bit-identical to composing the
 * plain kernels (and to the torch fallback, bagua_core/runtime/native/fallback.py).
 */
#include <math.h>
#include <string.h>

#include "minmax_uint8.h"
#include "minmax_uint8_internal.h"

#define BLOCK 2048 /* elements per block: a few arrays of it stay in L1 */
#define LPD_THIRD 3.0f
#define LPD_FIVE_THIRDS ((float)(5.0 / 3.0)) /* torch rounds the Python scalar 5 / 3 to fp32 */

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
    const float *x, *w, *l, *r;
    float *z, *deq;
    const uint8_t *ql, *qr, *qo;
    uint8_t *q;
    float *wm, *lm, *rm, *xm;
    int64_t begin, end, deq_numel;
    params_t p, pl, pr, po;
    float part_mn[MAX_THREADS], part_mx[MAX_THREADS];
    int part_bad[MAX_THREADS];
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

BAGUA_CLONES
static void lpd_diff_block(const float *restrict x, const float *restrict w, const float *restrict l,
                           const float *restrict r, int64_t n, float *restrict z) {
    for (int64_t i = 0; i < n; i++) z[i] = ((x[i] + l[i] / LPD_THIRD) + r[i] / LPD_THIRD) - w[i] * LPD_FIVE_THIRDS;
}

static void lpd_diff_task(void *ctx, int t, int n) {
    fused_t *j = (fused_t *)ctx;
    int64_t b, e;
    piece(j->begin, j->end, t, n, &b, &e);
    float mn = INFINITY, mx = -INFINITY;
    int bad = 0;
    for (int64_t s = b; s < e; s += BLOCK) {
        int64_t len = e - s < BLOCK ? e - s : BLOCK;
        float bmn, bmx;
        int bbad;
        lpd_diff_block(j->x + s, j->w + s, j->l + s, j->r + s, len, j->z + s);
        minmax_range(j->z + s, len, &bmn, &bmx, &bbad);
        mn = bmn < mn ? bmn : mn;
        mx = bmx > mx ? bmx : mx;
        bad |= bbad;
    }
    j->part_mn[t] = mn;
    j->part_mx[t] = mx;
    j->part_bad[t] = bad;
}

int bagua_lpd_diff_f32(const float *x, const float *w, const float *l, const float *r, int64_t numel,
                       float *z, float *stats) {
    if (numel < 0 || stats == NULL || (numel > 0 && (!x || !w || !l || !r || !z))) return BAGUA_MINMAX_ERR_ARGUMENT;
    fused_t j = {.x = x, .w = w, .l = l, .r = r, .z = z, .begin = 0, .end = numel};
    for (int t = 0; t < MAX_THREADS; t++) {
        j.part_mn[t] = INFINITY;
        j.part_mx[t] = -INFINITY;
        j.part_bad[t] = 0;
    }
    run_parallel(numel, lpd_diff_task, &j);
    merge_stats(stats, j.part_mn, j.part_mx, j.part_bad, MAX_THREADS);
    return BAGUA_MINMAX_OK;
}

BAGUA_CLONES
static void lpd_update_block(const uint8_t *restrict ql, const uint8_t *restrict qr, const uint8_t *restrict qo,
                             params_t pl, params_t pr, params_t po, int64_t n, float *restrict w,
                             float *restrict l, float *restrict r, float *restrict x) {
    for (int64_t i = 0; i < n; i++) {
        l[i] = l[i] + ((float)ql[i] + pl.lower) / pl.scale;
        r[i] = r[i] + ((float)qr[i] + pr.lower) / pr.scale;
        w[i] = w[i] + ((float)qo[i] + po.lower) / po.scale;
    }
    if (x != NULL) memcpy(x, w, (size_t)n * sizeof(float));
}

static void lpd_update_task(void *ctx, int t, int n) {
    fused_t *j = (fused_t *)ctx;
    int64_t b, e;
    piece(j->begin, j->end, t, n, &b, &e);
    for (int64_t s = b; s < e; s += BLOCK) {
        int64_t len = e - s < BLOCK ? e - s : BLOCK;
        lpd_update_block(j->ql + s, j->qr + s, j->qo + s, j->pl, j->pr, j->po, len, j->wm + s, j->lm + s,
                         j->rm + s, j->xm ? j->xm + s : NULL);
    }
}

int bagua_lpd_update_f32(const uint8_t *q_left, const uint8_t *q_right, const uint8_t *q_own,
                         int64_t buf_bytes, int64_t numel, float *w, float *l, float *r, float *x,
                         int64_t begin, int64_t end) {
    if (numel < 0 || begin < 0 || end < begin || !q_left || !q_right || !q_own ||
        (numel > 0 && (!w || !l || !r)))
        return BAGUA_MINMAX_ERR_ARGUMENT;
    if (buf_bytes != bagua_minmax_compressed_size(numel, 1)) return BAGUA_MINMAX_ERR_SIZE;
    fused_t j = {.ql = q_left + 8, .qr = q_right + 8, .qo = q_own + 8, .wm = w, .lm = l, .rm = r, .xm = x};
    j.begin = begin < numel ? begin : numel;
    j.end = end < numel ? end : numel;
    read_params(q_left, &j.pl);
    read_params(q_right, &j.pr);
    read_params(q_own, &j.po);
    run_parallel(j.end - j.begin, lpd_update_task, &j);
    return BAGUA_MINMAX_OK;
}
