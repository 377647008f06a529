/*
 * sparseloco's per-chunk top-k (sparseloco.h's bagua_sparseloco_select; the message's encoder composes the
 * same steps): the k' entries of largest |x| of a chunk, NaN as +inf, the ties with the k'-th largest taken
 * from the lowest index, as bagua_algorithms/sparseloco/chunks.py selects them.
 *
 * Exactly, whatever the values: a chunk's magnitudes are compared as integers (sl_magnitude). On a long chunk
 * sending few entries, a threshold below the k'-th largest is guessed from every (m / 256)-th magnitude
 * (their (expected + 2 sqrt(expected) + 2)-th largest, its bits below the exponent and 4 mantissa bits
 * cleared); the candidates are the entries at least that large (AVX2 where the CPU has it, which also
 * prefetches the chunks after this one), and the k'-th largest is found among them (quickselect with
 * branchless partitions). When fewer than k' are candidates (the guess was above the k'-th largest), every
 * entry is one. Candidates come in ascending index, so the ties taken are those of lowest index.
 */
#include <math.h>
#include <stdlib.h>

#include "bagua_native.h"
#include "parallel.h"
#include "sparseloco_plan.h"

#define SAMPLED_CHUNK 1024 /* chunks at least this long that send at most 1/16 of their entries are sampled \
                            */
#define SAMPLED_BITS 19    /* the sampled threshold keeps the exponent and 4 mantissa bits */

int sl_select_scratch_new(sl_select_scratch *s, int64_t longest) {
    size_t n = (size_t)(longest > 0 ? longest : 1) + 1;
    s->values = (uint32_t *)malloc(4 * n);
    s->top = (uint32_t *)malloc(4 * n);
    s->candidates = (int32_t *)malloc(4 * n);
    s->picked = (int32_t *)malloc(4 * n);
    s->work = (uint32_t *)malloc(4 * n);
    if (s->values && s->top && s->candidates && s->picked && s->work) return BAGUA_NATIVE_OK;
    sl_select_scratch_free(s);
    return BAGUA_SPARSELOCO_ERR_MEMORY;
}

void sl_select_scratch_free(sl_select_scratch *s) {
    free(s->values);
    free(s->top);
    free(s->candidates);
    free(s->picked);
    free(s->work);
    s->values = s->top = s->work = NULL;
    s->candidates = s->picked = NULL;
}

BAGUA_CLONES
void sl_feed(float *restrict e, const float *restrict delta, float beta, int64_t n) {
    if (delta == NULL) return;
    if (beta != 1.0f) {
        for (int64_t i = 0; i < n; i++) e[i] = e[i] * beta + delta[i]; /* two roundings: mul_, then add_ */
    } else {
        for (int64_t i = 0; i < n; i++) e[i] = e[i] + delta[i];
    }
}

BAGUA_CLONES
void sl_feed_difference(float *restrict e, const float *restrict start, const float *restrict param, float beta,
                        int64_t n) {
    if (beta != 1.0f) {
        for (int64_t i = 0; i < n; i++) e[i] = e[i] * beta + (start[i] - param[i]); /* sub, mul_, add_ */
    } else {
        for (int64_t i = 0; i < n; i++) e[i] = e[i] + (start[i] - param[i]);
    }
}

BAGUA_CLONES
static void magnitudes(const float *restrict x, uint32_t *restrict u, int64_t n) {
    for (int64_t i = 0; i < n; i++) u[i] = sl_magnitude(x[i]);
}

BAGUA_CLONES
static int64_t count_at_least(const uint32_t *restrict v, int64_t n, uint32_t t) {
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) count += v[i] >= t;
    return count;
}

BAGUA_CLONES
static void bounds(const uint32_t *restrict v, int64_t n, uint32_t *lo, uint32_t *hi) {
    uint32_t a = SL_INF_BITS, b = 0;
    for (int64_t i = 0; i < n; i++) {
        a = v[i] < a ? v[i] : a;
        b = v[i] > b ? v[i] : b;
    }
    *lo = a;
    *hi = b;
}

static int descending(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x < y) - (x > y);
}

static uint32_t median3(uint32_t x, uint32_t y, uint32_t z) {
    return x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
}

/* The k-th largest (k from 1) of v[0 .. n) (v and w, of n each, are overwritten): quickselect with branchless
 * partitions, around pivot first, down to a few values sorted (or what remains after 64 rounds, a bound on
 * unlucky pivots). */
static uint32_t kth_largest(uint32_t *v, uint32_t *w, int64_t n, int64_t k, uint32_t pivot) {
    for (int round = 0; n > 8 && round < 64; round++) {
        int64_t above = 0, below = 0;
        for (int64_t i = 0; i < n; i++) { /* v[0 .. above) > pivot, w[0 .. below) < pivot */
            uint32_t x = v[i];
            v[above] = x;
            above += x > pivot;
            w[below] = x;
            below += x < pivot;
        }
        if (k <= above) {
            n = above;
        } else if (k <= n - below) {
            return pivot;
        } else {
            k -= n - below;
            n = below;
            uint32_t *t = v;
            v = w;
            w = t;
        }
        pivot = median3(v[0], v[n / 2], v[n - 1]);
    }
    if (n > 32) {
        qsort(v, (size_t)n, sizeof(uint32_t), descending);
        return v[k - 1];
    }
    for (int64_t i = 1; i < n; i++) { /* insertion sort, descending */
        uint32_t x = v[i];
        int64_t at = i;
        for (; at > 0 && v[at - 1] < x; at--) v[at] = v[at - 1];
        v[at] = x;
    }
    return v[k - 1];
}

/* At most the j-th largest (j from 1) of the magnitudes of x[0], x[step], ..., x[(r - 1) * step] (into
 * sample): that value with its bits below SAMPLED_BITS cleared, found bit by bit (each bit one vectorised
 * count). */
static uint32_t sampled_threshold(const float *x, int64_t step, int64_t r, int64_t j, uint32_t *sample) {
    for (int64_t t = 0; t < r; t++) sample[t] = sl_magnitude(x[t * step]);
    uint32_t threshold = 0;
    for (int b = 30; b >= SAMPLED_BITS; b--) {
        uint32_t candidate = threshold | (1u << b);
        if (count_at_least(sample, r, candidate) >= j) threshold = candidate;
    }
    return threshold;
}

#define PREFETCH_AHEAD 32768 /* bytes: the next chunks (back to back in the fragment), into L2 meanwhile */

/* The address PREFETCH_AHEAD bytes past p (a prefetch hint only, never read: it may lie past the fragment).
 */
static inline const void *ahead(const float *p) {
    return (const void *)((uintptr_t)p + PREFETCH_AHEAD);
}

#ifdef BAGUA_AVX2_DISPATCH
/* candidates() with AVX2: 64 magnitudes compared into one bit mask, its set bits read off, and the fragment
 * PREFETCH_AHEAD bytes on asked for (the chunks after this one, in memory meanwhile). A NaN's |x| bits exceed
 * +inf's, so it is a candidate unclamped, as it is clamped (threshold <= +inf). */
__attribute__((target("avx2"))) static int64_t candidates_avx2(const float *x, int64_t m, uint32_t threshold,
                                                               int32_t *out) {
    const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
    const __m256i below = _mm256_set1_epi32((int)(threshold - 1)); /* threshold >= 1; magnitudes < 2^31 */
    int64_t n = 0, i = 0;
    for (; i + 64 <= m; i += 64) {
        for (int line = 0; line < 4; line++) __builtin_prefetch(ahead(x + i + 16 * line), 0, 2);
        uint64_t word = 0;
        for (int g = 0; g < 8; g++) {
            __m256i u = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(x + i + 8 * g)),
                                         magnitude);
            __m256i above = _mm256_cmpgt_epi32(u, below);
            word |= (uint64_t)(uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(above)) << (8 * g);
        }
        while (word) {
            out[n++] = (int32_t)(i + __builtin_ctzll(word));
            word &= word - 1;
        }
    }
    for (; i < m; i++) {
        out[n] = (int32_t)i;
        n += sl_magnitude(x[i]) >= threshold;
    }
    return n;
}

static int has_avx2(void) {
    static int cached = -1;
    if (cached < 0) cached = __builtin_cpu_supports("avx2") ? 1 : 0;
    return cached;
}
#endif

/* The indices of x[0 .. m) whose magnitude is at least threshold (>= 1), ascending, into out; how many. */
static int64_t candidates(const float *x, int64_t m, uint32_t threshold, int32_t *out) {
#ifdef BAGUA_AVX2_DISPATCH
    if (has_avx2()) return candidates_avx2(x, m, threshold, out);
#endif
    int64_t n = 0;
    for (int64_t i = 0; i < m; i++) {
        out[n] = (int32_t)i;
        n += sl_magnitude(x[i]) >= threshold;
    }
    return n;
}

void sl_select_chunk(const float *x, int64_t m, int64_t k, sl_select_scratch *s, int32_t *columns,
                     uint32_t *largest, uint32_t *smallest) {
    uint32_t *value = s->values;
    int32_t *candidate = s->candidates, *picked = s->picked;
    int64_t n = 0;
    if (k < m && m >= SAMPLED_CHUNK && 16 * k <= m) {
        int64_t step = m >> 8, r = m / step, expected = (k * r + m - 1) / m;
        int64_t j = expected + 2 * (int64_t)ceil(sqrt((double)expected)) + 2;
        uint32_t threshold = j < r ? sampled_threshold(x, step, r, j, s->top) : 0;
        if (threshold > 0) n = candidates(x, m, threshold, candidate);
    }
    if (n >= k) {
        for (int64_t t = 0; t < n; t++) value[t] = sl_magnitude(x[candidate[t]]);
    } else { /* not sampled, or the guess was above the k-th largest: every entry is a candidate */
        magnitudes(x, value, m);
        for (int64_t i = 0; i < m; i++) candidate[i] = (int32_t)i;
        n = m;
    }
    uint32_t lo, hi;
    bounds(value, n, &lo, &hi);
    *largest = hi;
    if (k >= m) { /* every entry */
        memcpy(columns, candidate, 4 * (size_t)m);
        *smallest = lo;
        return;
    }
    memcpy(s->work, value, 4 * (size_t)n);
    uint32_t threshold = kth_largest(s->work, s->top, n, k, median3(value[0], value[n / 2], value[n - 1]));
    int64_t at_least = count_at_least(value, n, threshold), c = 0;
    int64_t ties = k - count_at_least(value, n, threshold + 1); /* (threshold < 2^31) */
    if (at_least == k) { /* every tie is sent (the common case: one entry is the k-th largest) */
        for (int64_t t = 0; t < n; t++) {
            picked[c] = candidate[t];
            c += value[t] >= threshold;
        }
    } else {
        for (int64_t t = 0; t < n; t++) { /* ascending index: the ties taken are those of lowest index */
            uint32_t v = value[t];
            int64_t tied = v == threshold, take = (v > threshold) | (tied & (ties > 0));
            picked[c] = candidate[t];
            c += take;
            ties -= tied & take;
        }
    }
    memcpy(columns, picked, 4 * (size_t)k);
    *smallest = threshold;
}

typedef struct {
    const sl_plan *plan;
    float *e;
    const float *delta;
    float beta;
    int64_t *columns;
    float *largest, *smallest;
    int failed;
} select_job;

static void select_task(void *ctx, int t, int n) {
    select_job *j = (select_job *)ctx;
    const bagua_sparseloco_layout *layout = j->plan->layout;
    int64_t b, e;
    piece(0, layout->chunks, t, n, &b, &e);
    if (b >= e) return;
    sl_select_scratch s;
    int32_t *columns = (int32_t *)malloc(4 * (size_t)j->plan->longest);
    if (columns == NULL || sl_select_scratch_new(&s, j->plan->longest) != BAGUA_NATIVE_OK) {
        free(columns);
        j->failed = 1;
        return;
    }
    for (int64_t c = b; c < e; c++) {
        int64_t m = layout->length[c], k = sl_chunk_sent(j->plan, c), at = j->plan->entry_at[c];
        float *x = j->e + layout->start[c];
        sl_feed(x, j->delta ? j->delta + layout->start[c] : NULL, j->beta, m);
        uint32_t hi, lo;
        sl_select_chunk(x, m, k, &s, columns, &hi, &lo);
        for (int64_t i = 0; i < k; i++) j->columns[at + i] = columns[i];
        j->largest[c] = sl_float(hi);
        j->smallest[c] = sl_float(lo);
    }
    sl_select_scratch_free(&s);
    free(columns);
}

int bagua_sparseloco_select(float *e, const float *delta, float beta, const bagua_sparseloco_layout *layout,
                            int64_t *columns, float *largest, float *smallest) {
    sl_plan plan;
    int rc = sl_plan_make(&plan, layout, 0);
    if (rc != BAGUA_NATIVE_OK) return rc;
    if (layout->chunks > 0 && (e == NULL || columns == NULL || largest == NULL || smallest == NULL)) {
        sl_plan_free(&plan);
        return BAGUA_NATIVE_ERR_ARGUMENT;
    }
    select_job j = {&plan, e, delta, beta, columns, largest, smallest, 0};
    run_parallel(layout->numel, select_task, &j);
    sl_plan_free(&plan);
    return j.failed ? BAGUA_SPARSELOCO_ERR_MEMORY : BAGUA_NATIVE_OK;
}
