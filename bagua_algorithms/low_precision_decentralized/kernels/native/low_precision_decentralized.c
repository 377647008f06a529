/*
 * low_precision_decentralized's fused steps (declared in low_precision_decentralized.h): the round's
 * difference with the min/max of its result, and the update of the replicas from three MinMaxUInt8
 * buffers, each one pass over memory, block by block while a block is still in L1.
 *
 * Exactness: the same single fp32 operations in the same order as torch evaluates the formulas
 * (built with -ffp-contract=off, never -ffast-math), so results are bit-identical to the torch
 * reference (bagua_algorithms/low_precision_decentralized/kernels/reference.py).
 */
#include <math.h>
#include <string.h>

#include "bagua_native.h"
#include "low_precision_decentralized.h"
#include "minmax_uint8_blocks.h" /* bagua_codecs' public header (kernels.toml: uses = ["bagua_codecs"]) */
#include "parallel.h"

#define BLOCK 2048 /* elements per block: a few arrays of it stay in L1 */
#define LPD_THIRD 3.0f
#define LPD_FIVE_THIRDS ((float)(5.0 / 3.0)) /* torch rounds the Python scalar 5 / 3 to fp32 */

typedef struct {
    const float *x, *w, *l, *r;
    float *z;
    const uint8_t *ql, *qr, *qo;
    float *wm, *lm, *rm, *xm;
    int64_t begin, end;
    params_t pl, pr, po;
    float part_mn[MAX_THREADS], part_mx[MAX_THREADS];
    int part_bad[MAX_THREADS];
} lpd_job_t;

BAGUA_CLONES
static void lpd_diff_block(const float *restrict x, const float *restrict w, const float *restrict l,
                           const float *restrict r, int64_t n, float *restrict z) {
    for (int64_t i = 0; i < n; i++) z[i] = ((x[i] + l[i] / LPD_THIRD) + r[i] / LPD_THIRD) - w[i] * LPD_FIVE_THIRDS;
}

static void lpd_diff_task(void *ctx, int t, int n) {
    lpd_job_t *j = (lpd_job_t *)ctx;
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
    if (numel < 0 || stats == NULL || (numel > 0 && (!x || !w || !l || !r || !z))) return BAGUA_NATIVE_ERR_ARGUMENT;
    lpd_job_t j = {.x = x, .w = w, .l = l, .r = r, .z = z, .begin = 0, .end = numel};
    for (int t = 0; t < MAX_THREADS; t++) {
        j.part_mn[t] = INFINITY;
        j.part_mx[t] = -INFINITY;
        j.part_bad[t] = 0;
    }
    run_parallel(numel, lpd_diff_task, &j);
    merge_stats(stats, j.part_mn, j.part_mx, j.part_bad, MAX_THREADS);
    return BAGUA_NATIVE_OK;
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
    lpd_job_t *j = (lpd_job_t *)ctx;
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
        return BAGUA_NATIVE_ERR_ARGUMENT;
    if (buf_bytes != slot_bytes(chunk_numel_of(numel, 1))) return BAGUA_NATIVE_ERR_SIZE; /* one chunk */
    lpd_job_t j = {.ql = q_left + 8, .qr = q_right + 8, .qo = q_own + 8, .wm = w, .lm = l, .rm = r, .xm = x};
    j.begin = begin < numel ? begin : numel;
    j.end = end < numel ? end : numel;
    read_params(q_left, &j.pl);
    read_params(q_right, &j.pr);
    read_params(q_own, &j.po);
    run_parallel(j.end - j.begin, lpd_update_task, &j);
    return BAGUA_NATIVE_OK;
}
