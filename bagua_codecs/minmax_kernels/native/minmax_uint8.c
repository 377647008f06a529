/*
 * MinMaxUInt8 compression kernels for the CPU; see minmax_uint8.h for the formula and layout.
 *
 * Exactness: every step is a single IEEE fp32 operation in the order of the formula, so results are
 * bit-identical to the torch fallback. Build with -ffp-contract=off and never with -ffast-math
 * (no FMA contraction, rintf must stay round-half-to-even, NaN checks must survive).
 * Speed: one pass for min/max, one pass to quantise. The hot loops have AVX2 versions picked at run
 * time (__builtin_cpu_supports) and SSE2/scalar ones for other CPUs; dequantise is compiled for several
 * instruction sets (target_clones). The library is built for baseline x86-64 and runs on any of it.
 * Threads: bagua_native_set_threads(n) (parallel.c) splits every chunk of large tensors over n pthreads.
 */
#include "minmax_uint8.h"
#include "bagua_native.h"
#include "minmax_uint8_blocks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t chunk_numel_of(int64_t numel, int64_t n_chunks) {
    return numel == 0 ? 0 : (numel + n_chunks - 1) / n_chunks;
}

int64_t slot_bytes(int64_t chunk_numel) { return 8 + ((chunk_numel + 7) / 8) * 8; }

int64_t bagua_minmax_compressed_size(int64_t numel, int64_t n_chunks) {
    if (numel < 0 || n_chunks <= 0) return -1;
    return n_chunks * slot_bytes(chunk_numel_of(numel, n_chunks));
}

/* Element range [begin, end) of chunk c. */
static void chunk_range(int64_t numel, int64_t chunk_numel, int64_t c, int64_t *begin, int64_t *end) {
    int64_t b = c * chunk_numel, e = b + chunk_numel;
    *begin = b < numel ? b : numel;
    *end = e < numel ? e : numel;
}

/* Returns 0, or BAGUA_MINMAX_ERR_NONFINITE / _OVERFLOW when the chunk cannot be represented. */
int make_params(float mn, float mx, params_t *p) {
    if (!isfinite(mn) || !isfinite(mx)) return BAGUA_MINMAX_ERR_NONFINITE;
    float range = (mx - mn) + BAGUA_MINMAX_EPS;
    p->scale = 255.0f / range;
    p->upper = rintf(mx * p->scale);
    p->lower = p->upper - 255.0f;
    float lowest = rintf(mn * p->scale);
    if (!isfinite(range) || !isfinite(p->upper) || !isfinite(lowest) || !isfinite(p->lower))
        return BAGUA_MINMAX_ERR_OVERFLOW;
    return BAGUA_MINMAX_OK;
}

/* Single pass min/max with NaN detection; *bad != 0 when a NaN was seen (Inf shows in min/max). */
static void minmax_scalar(const float *x, int64_t n, float *mn_out, float *mx_out, int *bad) {
    float mn = INFINITY, mx = -INFINITY;
    int nan_seen = 0;
    int64_t i = 0;
#ifdef BAGUA_HAVE_SSE
    if (n >= 16) {
        __m128 mn0 = _mm_set1_ps(INFINITY), mn1 = mn0, mn2 = mn0, mn3 = mn0;
        __m128 mx0 = _mm_set1_ps(-INFINITY), mx1 = mx0, mx2 = mx0, mx3 = mx0;
        __m128 nan0 = _mm_setzero_ps(), nan1 = nan0;
        for (; i + 16 <= n; i += 16) {
            __m128 a = _mm_loadu_ps(x + i), b = _mm_loadu_ps(x + i + 4);
            __m128 c = _mm_loadu_ps(x + i + 8), d = _mm_loadu_ps(x + i + 12);
            mn0 = _mm_min_ps(mn0, a); mx0 = _mm_max_ps(mx0, a);
            mn1 = _mm_min_ps(mn1, b); mx1 = _mm_max_ps(mx1, b);
            mn2 = _mm_min_ps(mn2, c); mx2 = _mm_max_ps(mx2, c);
            mn3 = _mm_min_ps(mn3, d); mx3 = _mm_max_ps(mx3, d);
            nan0 = _mm_or_ps(nan0, _mm_or_ps(_mm_cmpunord_ps(a, a), _mm_cmpunord_ps(b, b)));
            nan1 = _mm_or_ps(nan1, _mm_or_ps(_mm_cmpunord_ps(c, c), _mm_cmpunord_ps(d, d)));
        }
        float lanes_mn[4], lanes_mx[4];
        _mm_storeu_ps(lanes_mn, _mm_min_ps(_mm_min_ps(mn0, mn1), _mm_min_ps(mn2, mn3)));
        _mm_storeu_ps(lanes_mx, _mm_max_ps(_mm_max_ps(mx0, mx1), _mm_max_ps(mx2, mx3)));
        for (int k = 0; k < 4; k++) {
            mn = lanes_mn[k] < mn ? lanes_mn[k] : mn;
            mx = lanes_mx[k] > mx ? lanes_mx[k] : mx;
        }
        nan_seen = _mm_movemask_ps(_mm_or_ps(nan0, nan1)) != 0;
    }
#endif
    for (; i < n; i++) {
        float v = x[i];
        nan_seen |= isnan(v);
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
    }
    *mn_out = mn;
    *mx_out = mx;
    *bad = nan_seen;
}

/* q = clamp(min(rint(x * scale), upper) - lower, 0, 255), one fp32 rounding per step. */
static void quantise_scalar(const float *restrict x, int64_t n, float scale, float upper, float lower,
                            uint8_t *restrict q) {
    for (int64_t i = 0; i < n; i++) {
        float v = rintf(x[i] * scale);
        v = v < upper ? v : upper;
        v = v - lower;
        v = v > 0.0f ? v : 0.0f;
        v = v < 255.0f ? v : 255.0f;
        q[i] = (uint8_t)(int32_t)v;
    }
}

#ifdef BAGUA_AVX2_DISPATCH
/* AVX2 versions, chosen at run time. min_ps(a, b) is exactly `a < b ? a : b` and max_ps(a, b)
 * `a > b ? a : b`, round_ps(CUR_DIRECTION) is rintf: bit-identical to the scalar code. */
__attribute__((target("avx2"))) static void minmax_avx2(const float *x, int64_t n, float *mn_out,
                                                         float *mx_out, int *bad) {
    __m256 mn0 = _mm256_set1_ps(INFINITY), mn1 = mn0, mx0 = _mm256_set1_ps(-INFINITY), mx1 = mx0;
    __m256 nan0 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        mn0 = _mm256_min_ps(mn0, a); mx0 = _mm256_max_ps(mx0, a);
        mn1 = _mm256_min_ps(mn1, b); mx1 = _mm256_max_ps(mx1, b);
        nan0 = _mm256_or_ps(nan0, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
    }
    float lanes_mn[8], lanes_mx[8], mn, mx;
    int tail_bad;
    minmax_scalar(x + i, n - i, &mn, &mx, &tail_bad);
    _mm256_storeu_ps(lanes_mn, _mm256_min_ps(mn0, mn1));
    _mm256_storeu_ps(lanes_mx, _mm256_max_ps(mx0, mx1));
    for (int k = 0; k < 8; k++) {
        mn = lanes_mn[k] < mn ? lanes_mn[k] : mn;
        mx = lanes_mx[k] > mx ? lanes_mx[k] : mx;
    }
    *mn_out = mn;
    *mx_out = mx;
    *bad = tail_bad || _mm256_movemask_ps(nan0) != 0;
}

__attribute__((target("avx2"))) static void quantise_avx2(const float *restrict x, int64_t n,
                                                           float scale, float upper, float lower,
                                                           uint8_t *restrict q) {
    const __m256 s = _mm256_set1_ps(scale), up = _mm256_set1_ps(upper), lo = _mm256_set1_ps(lower);
    const __m256 zero = _mm256_setzero_ps(), top = _mm256_set1_ps(255.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i w[4];
        for (int k = 0; k < 4; k++) {
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * k), s);
            v = _mm256_round_ps(v, _MM_FROUND_CUR_DIRECTION);
            v = _mm256_min_ps(v, up);
            v = _mm256_sub_ps(v, lo);
            v = _mm256_min_ps(_mm256_max_ps(v, zero), top);
            w[k] = _mm256_cvttps_epi32(v);
        }
        /* 32 int32 in [0, 255] -> 32 bytes; packs work per 128-bit lane, the permute restores order */
        __m256i ab = _mm256_packs_epi32(w[0], w[1]), cd = _mm256_packs_epi32(w[2], w[3]);
        __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), order);
        _mm256_storeu_si256((__m256i *)(q + i), bytes);
    }
    quantise_scalar(x + i, n - i, scale, upper, lower, q + i);
}

static int has_avx2(void) {
    static int cached = -1;
    if (cached < 0) cached = __builtin_cpu_supports("avx2") ? 1 : 0;
    return cached;
}
#endif

void minmax_range(const float *x, int64_t n, float *mn, float *mx, int *bad) {
#ifdef BAGUA_AVX2_DISPATCH
    if (has_avx2()) {
        minmax_avx2(x, n, mn, mx, bad);
        return;
    }
#endif
    minmax_scalar(x, n, mn, mx, bad);
}

void quantise(const float *restrict x, int64_t n, float scale, float upper, float lower,
                     uint8_t *restrict q) {
#ifdef BAGUA_AVX2_DISPATCH
    if (has_avx2()) {
        quantise_avx2(x, n, scale, upper, lower, q);
        return;
    }
#endif
    quantise_scalar(x, n, scale, upper, lower, q);
}

BAGUA_CLONES
void dequantise(const uint8_t *restrict q, int64_t n, float scale, float lower,
                       float *restrict out, int accumulate) {
    if (accumulate) {
        for (int64_t i = 0; i < n; i++) out[i] = out[i] + ((float)q[i] + lower) / scale;
    } else {
        for (int64_t i = 0; i < n; i++) out[i] = ((float)q[i] + lower) / scale;
    }
}

/* Reads the header of a slot and derives the parameters; a NaN chunk gives NaN parameters. */
void read_params(const uint8_t *slot, params_t *p) {
    float mm[2];
    memcpy(mm, slot, sizeof mm);
    if (make_params(mm[0], mm[1], p) != BAGUA_MINMAX_OK) p->scale = p->lower = p->upper = NAN;
}

typedef struct {
    const float *x;
    const uint8_t *cbuf;
    const uint8_t *const *bufs;
    uint8_t *out_bytes;
    float *out;
    int64_t numel, n_chunks, chunk_numel, slot, n_bufs;
    int64_t seg_b, seg_e; /* the chunk-local element range a call works on (the whole chunk by default) */
    int flag;
    float *part_mn, *part_mx; /* [n_chunks][MAX_THREADS] */
    int *part_bad;
    params_t *params;
    int *status;
} job_t;

/* [begin, end) of a chunk restricted to its chunk-local segment [seg_b, seg_e). */
static void segment_of(int64_t begin, int64_t end, const job_t *j, int64_t *b, int64_t *e) {
    int64_t chunk_start = begin, lo = chunk_start + j->seg_b, hi = chunk_start + j->seg_e;
    *b = lo < end ? lo : end;
    *e = hi < end ? hi : end;
}

static void minmax_task(void *ctx, int t, int n) {
    job_t *j = (job_t *)ctx;
    for (int64_t c = 0; c < j->n_chunks; c++) {
        int64_t cb, ce, b, e;
        chunk_range(j->numel, j->chunk_numel, c, &cb, &ce);
        piece(cb, ce, t, n, &b, &e);
        minmax_range(j->x + b, e - b, &j->part_mn[c * MAX_THREADS + t], &j->part_mx[c * MAX_THREADS + t],
                     &j->part_bad[c * MAX_THREADS + t]);
    }
}

static void quantise_task(void *ctx, int t, int n) {
    job_t *j = (job_t *)ctx;
    for (int64_t c = 0; c < j->n_chunks; c++) {
        int64_t cb, ce, b, e;
        chunk_range(j->numel, j->chunk_numel, c, &cb, &ce);
        piece(cb, ce, t, n, &b, &e);
        uint8_t *payload = j->out_bytes + c * j->slot + 8;
        if (j->status[c] != BAGUA_MINMAX_OK) {
            memset(payload + (b - cb), 0, (size_t)(e - b));
        } else {
            const params_t *p = &j->params[c];
            quantise(j->x + b, e - b, p->scale, p->upper, p->lower, payload + (b - cb));
        }
    }
}

static int compress_impl(const float *x, int64_t numel, int64_t n_chunks, uint8_t *out,
                         int64_t out_bytes, int nonfinite_raise, int payload);

int bagua_minmax_compress_f32(const float *x, int64_t numel, int64_t n_chunks, uint8_t *out,
                              int64_t out_bytes, int nonfinite_raise) {
    return compress_impl(x, numel, n_chunks, out, out_bytes, nonfinite_raise, 1);
}

int bagua_minmax_headers_f32(const float *x, int64_t numel, int64_t n_chunks, uint8_t *out,
                             int64_t out_bytes, int nonfinite_raise) {
    return compress_impl(x, numel, n_chunks, out, out_bytes, nonfinite_raise, 0);
}

static void quantise_range_task(void *ctx, int t, int n) {
    job_t *j = (job_t *)ctx;
    for (int64_t c = 0; c < j->n_chunks; c++) {
        int64_t cb, ce, sb, se, b, e;
        params_t p;
        chunk_range(j->numel, j->chunk_numel, c, &cb, &ce);
        segment_of(cb, ce, j, &sb, &se);
        piece(sb, se, t, n, &b, &e);
        if (e == b) continue;
        uint8_t *slot = j->out_bytes + c * j->slot;
        read_params(slot, &p);
        if (isnan(p.scale))
            memset(slot + 8 + (b - cb), 0, (size_t)(e - b));
        else
            quantise(j->x + b, e - b, p.scale, p.upper, p.lower, slot + 8 + (b - cb));
    }
}

int bagua_minmax_quantise_f32(const float *x, int64_t numel, int64_t n_chunks, uint8_t *out,
                              int64_t out_bytes, int64_t begin, int64_t end) {
    if (numel < 0 || n_chunks <= 0 || (numel > 0 && (x == NULL || out == NULL)) || begin < 0 || end < begin)
        return BAGUA_MINMAX_ERR_ARGUMENT;
    if (out_bytes != bagua_minmax_compressed_size(numel, n_chunks)) return BAGUA_MINMAX_ERR_SIZE;
    int64_t chunk_numel = chunk_numel_of(numel, n_chunks);
    job_t j = {.x = x, .out_bytes = out, .numel = numel, .n_chunks = n_chunks,
               .chunk_numel = chunk_numel, .slot = slot_bytes(chunk_numel), .seg_b = begin, .seg_e = end};
    run_parallel((end - begin) * n_chunks, quantise_range_task, &j);
    return BAGUA_MINMAX_OK;
}

static int compress_impl(const float *x, int64_t numel, int64_t n_chunks, uint8_t *out,
                         int64_t out_bytes, int nonfinite_raise, int payload) {
    if (numel < 0 || n_chunks <= 0 || (numel > 0 && (x == NULL || out == NULL)))
        return BAGUA_MINMAX_ERR_ARGUMENT;
    if (out_bytes != bagua_minmax_compressed_size(numel, n_chunks)) return BAGUA_MINMAX_ERR_SIZE;
    int64_t chunk_numel = chunk_numel_of(numel, n_chunks);
    job_t j = {.x = x, .out_bytes = out, .numel = numel, .n_chunks = n_chunks,
               .chunk_numel = chunk_numel, .slot = slot_bytes(chunk_numel)};
    /* small per-chunk scratch: partial results of each thread */
    size_t nc = (size_t)n_chunks;
    float *scratch = (float *)calloc(nc * MAX_THREADS * 2, sizeof(float));
    int *iscratch = (int *)calloc(nc * (MAX_THREADS + 1), sizeof(int));
    params_t *params = (params_t *)calloc(nc, sizeof(params_t));
    if (!scratch || !iscratch || !params) {
        free(scratch); free(iscratch); free(params);
        return BAGUA_MINMAX_ERR_ARGUMENT;
    }
    j.part_mn = scratch;
    j.part_mx = scratch + nc * MAX_THREADS;
    j.part_bad = iscratch;
    j.status = iscratch + nc * MAX_THREADS;
    j.params = params;
    int n_threads = (numel < MIN_PARALLEL_NUMEL) ? 1 : bagua_native_get_threads();
    run_parallel(numel, minmax_task, &j);
    int rc = BAGUA_MINMAX_OK;
    for (int64_t c = 0; c < n_chunks; c++) {
        float mn = INFINITY, mx = -INFINITY, mm[2];
        int bad = 0;
        for (int t = 0; t < n_threads; t++) {
            float a = j.part_mn[c * MAX_THREADS + t], b = j.part_mx[c * MAX_THREADS + t];
            mn = a < mn ? a : mn;
            mx = b > mx ? b : mx;
            bad |= j.part_bad[c * MAX_THREADS + t];
        }
        int64_t cb, ce;
        chunk_range(numel, chunk_numel, c, &cb, &ce);
        if (ce == cb) mn = mx = 0.0f; /* empty chunk */
        mn = mn + 0.0f; /* -0 -> +0, so the header bytes do not depend on the reduction order */
        mx = mx + 0.0f;
        j.status[c] = bad ? BAGUA_MINMAX_ERR_NONFINITE : make_params(mn, mx, &params[c]);
        if (j.status[c] != BAGUA_MINMAX_OK) {
            if (nonfinite_raise && rc == BAGUA_MINMAX_OK) rc = j.status[c];
            mn = mx = NAN;
        }
        mm[0] = mn;
        mm[1] = mx;
        uint8_t *slot = out + c * j.slot;
        memcpy(slot, mm, sizeof mm);
        memset(slot + 8 + (ce - cb), 0, (size_t)(j.slot - 8 - (ce - cb))); /* padding */
    }
    if (rc == BAGUA_MINMAX_OK && payload) run_parallel(numel, quantise_task, &j);
    free(scratch); free(iscratch); free(params);
    return rc;
}

static void decompress_task(void *ctx, int t, int n) {
    job_t *j = (job_t *)ctx;
    for (int64_t c = 0; c < j->n_chunks; c++) {
        int64_t cb, ce, b, e;
        params_t p;
        chunk_range(j->numel, j->chunk_numel, c, &cb, &ce);
        segment_of(cb, ce, j, &cb, &ce);
        piece(cb, ce, t, n, &b, &e);
        if (e == b) continue;
        const uint8_t *slot = j->cbuf + c * j->slot;
        cb = c * j->chunk_numel; /* payload offsets are relative to the chunk start */
        read_params(slot, &p);
        dequantise(slot + 8 + (b - cb), e - b, p.scale, p.lower, j->out + b, j->flag);
    }
}

int bagua_minmax_decompress_f32(const uint8_t *buf, int64_t buf_bytes, int64_t numel,
                                int64_t n_chunks, float *out, int accumulate) {
    if (numel < 0 || n_chunks <= 0 || (numel > 0 && (buf == NULL || out == NULL)))
        return BAGUA_MINMAX_ERR_ARGUMENT;
    if (buf_bytes != bagua_minmax_compressed_size(numel, n_chunks)) return BAGUA_MINMAX_ERR_SIZE;
    int64_t chunk_numel = chunk_numel_of(numel, n_chunks);
    job_t j = {.cbuf = buf, .out = out, .numel = numel, .n_chunks = n_chunks,
               .chunk_numel = chunk_numel, .slot = slot_bytes(chunk_numel), .flag = accumulate,
               .seg_b = 0, .seg_e = chunk_numel};
    run_parallel(numel, decompress_task, &j);
    return BAGUA_MINMAX_OK;
}

int bagua_minmax_decompress_range_f32(const uint8_t *buf, int64_t buf_bytes, int64_t numel,
                                      int64_t n_chunks, float *out, int accumulate, int64_t begin,
                                      int64_t end) {
    if (numel < 0 || n_chunks <= 0 || (numel > 0 && (buf == NULL || out == NULL)) || begin < 0 || end < begin)
        return BAGUA_MINMAX_ERR_ARGUMENT;
    if (buf_bytes != bagua_minmax_compressed_size(numel, n_chunks)) return BAGUA_MINMAX_ERR_SIZE;
    int64_t chunk_numel = chunk_numel_of(numel, n_chunks);
    job_t j = {.cbuf = buf, .out = out, .numel = numel, .n_chunks = n_chunks,
               .chunk_numel = chunk_numel, .slot = slot_bytes(chunk_numel), .flag = accumulate,
               .seg_b = begin, .seg_e = end};
    run_parallel((end - begin) * n_chunks, decompress_task, &j);
    return BAGUA_MINMAX_OK;
}

#define SUM_BLOCK 1024

BAGUA_CLONES
static void divide_block(float *restrict acc, int64_t n, float d) {
    for (int64_t i = 0; i < n; i++) acc[i] = acc[i] / d;
}

static void sum_task(void *ctx, int t, int n) {
    job_t *j = (job_t *)ctx;
    int64_t b, e;
    piece(j->seg_b < j->numel ? j->seg_b : j->numel, j->seg_e < j->numel ? j->seg_e : j->numel, t, n, &b, &e);
    params_t *p = (params_t *)malloc((size_t)j->n_bufs * sizeof(params_t));
    if (p == NULL) { j->status[t] = BAGUA_MINMAX_ERR_ARGUMENT; return; }
    for (int64_t k = 0; k < j->n_bufs; k++) read_params(j->bufs[k], &p[k]);
    float mn = INFINITY, mx = -INFINITY;
    int bad = 0;
    /* blocks small enough for L1: out is written once, each buffer read once */
    for (int64_t s = b; s < e; s += SUM_BLOCK) {
        int64_t len = e - s < SUM_BLOCK ? e - s : SUM_BLOCK;
        float *acc = j->out + s;
        for (int64_t k = 0; k < j->n_bufs; k++)
            dequantise(j->bufs[k] + 8 + s, len, p[k].scale, p[k].lower, acc, k > 0);
        if (j->flag) divide_block(acc, len, (float)j->n_bufs);
        if (j->part_mn != NULL) { /* the min/max of what was written, while it is in L1 */
            float bmn, bmx;
            int bbad;
            minmax_range(acc, len, &bmn, &bmx, &bbad);
            mn = bmn < mn ? bmn : mn;
            mx = bmx > mx ? bmx : mx;
            bad |= bbad;
        }
    }
    if (j->part_mn != NULL) {
        j->part_mn[t] = mn;
        j->part_mx[t] = mx;
        j->part_bad[t] = bad;
    }
    free(p);
}

int bagua_minmax_decompress_sum_f32(const uint8_t *const *bufs, int64_t n_bufs, int64_t buf_bytes,
                                    int64_t numel, float *out, int average) {
    return bagua_minmax_decompress_sum_range_f32(bufs, n_bufs, buf_bytes, numel, out, average, 0, numel);
}

int bagua_minmax_decompress_sum_range_f32(const uint8_t *const *bufs, int64_t n_bufs, int64_t buf_bytes,
                                          int64_t numel, float *out, int average, int64_t begin,
                                          int64_t end) {
    return bagua_minmax_decompress_sum_stats_f32(bufs, n_bufs, buf_bytes, numel, out, average, begin, end,
                                                 NULL);
}

int bagua_minmax_decompress_sum_stats_f32(const uint8_t *const *bufs, int64_t n_bufs, int64_t buf_bytes,
                                          int64_t numel, float *out, int average, int64_t begin,
                                          int64_t end, float *stats) {
    if (begin < 0 || end < begin) return BAGUA_MINMAX_ERR_ARGUMENT;
    if (numel < 0 || n_bufs <= 0 || bufs == NULL || (numel > 0 && out == NULL))
        return BAGUA_MINMAX_ERR_ARGUMENT;
    if (buf_bytes != bagua_minmax_compressed_size(numel, 1)) return BAGUA_MINMAX_ERR_SIZE;
    for (int64_t k = 0; k < n_bufs; k++)
        if (bufs[k] == NULL) return BAGUA_MINMAX_ERR_ARGUMENT;
    int status[MAX_THREADS] = {0}, part_bad[MAX_THREADS] = {0};
    float part_mn[MAX_THREADS], part_mx[MAX_THREADS];
    for (int t = 0; t < MAX_THREADS; t++) {
        part_mn[t] = INFINITY;
        part_mx[t] = -INFINITY;
    }
    job_t j = {.bufs = bufs, .out = out, .numel = numel, .n_bufs = n_bufs, .flag = average,
               .status = status, .seg_b = begin, .seg_e = end};
    if (stats != NULL) {
        j.part_mn = part_mn;
        j.part_mx = part_mx;
        j.part_bad = part_bad;
    }
    run_parallel(end - begin, sum_task, &j);
    for (int t = 0; t < MAX_THREADS; t++)
        if (status[t] != BAGUA_MINMAX_OK) return status[t];
    if (stats != NULL) merge_stats(stats, part_mn, part_mx, part_bad, MAX_THREADS);
    return BAGUA_MINMAX_OK;
}
