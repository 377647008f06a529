/*
 * Fused pointwise optimizer kernels; see adam_update.h. Built with -ffp-contract=off and without
 * -ffast-math: every operation is one IEEE fp32 operation in the order of the formula.
 */
#include "adam_update.h"

#include <math.h>

#include "bagua_native.h"
#include "parallel.h"

typedef struct {
    float *p;
    const float *m, *v;
    int64_t numel;
    float step, c, eps;
} adam_job_t;

BAGUA_CLONES
static void adam_block(float *restrict p, const float *restrict m, const float *restrict v, int64_t n,
                       float step, float c, float eps) {
    for (int64_t i = 0; i < n; i++) p[i] = p[i] + (step * m[i]) / (sqrtf(v[i]) / c + eps);
}

static void adam_task(void *ctx, int t, int n) {
    adam_job_t *j = (adam_job_t *)ctx;
    int64_t b, e;
    piece(0, j->numel, t, n, &b, &e);
    adam_block(j->p + b, j->m + b, j->v + b, e - b, j->step, j->c, j->eps);
}

int bagua_adam_update_f32(float *p, const float *m, const float *v, int64_t numel, float step, float c,
                          float eps) {
    if (numel < 0 || (numel > 0 && (p == NULL || m == NULL || v == NULL))) return BAGUA_NATIVE_ERR_ARGUMENT;
    adam_job_t j = {p, m, v, numel, step, c, eps};
    run_parallel(numel, adam_task, &j);
    return BAGUA_NATIVE_OK;
}
