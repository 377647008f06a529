/*
 * sparseloco's whole message (bagua_algorithms/sparseloco/codec.py's layout): encoding a fragment's
 * accumulator, with its update and the error feedback in the same pass over each chunk, and decoding one
 * message or the average of n. Chunks are independent until the index field and the codes are written (one
 * serial pass over the entries), so threads split the chunks.
 */
#include <stdlib.h>

#include "bagua_native.h"
#include "parallel.h"
#include "sparseloco_plan.h"

typedef struct {
    const sl_plan *plan;
    float *e;
    const float *delta;
    const float *start;         /* with params: delta = start - params, chunk by chunk (encode_difference) */
    const float *const *params; /* chunk c's elements of the parameters, or NULL */
    float beta;
    int feedback;
    uint8_t *out;
    int32_t *columns; /* each entry's column, for the index field */
    uint8_t *codes;   /* each entry's code, to be packed */
    int failed;
} encode_job;

/* Chunk c of the message: its header, its codes (or fp32 values) and its columns; e -= what it decodes to. */
static void encode_chunk(encode_job *j, int64_t c, sl_select_scratch *s) {
    const sl_plan *p = j->plan;
    const bagua_sparseloco_layout *layout = p->layout;
    int64_t m = layout->length[c], k = sl_chunk_sent(p, c), at = p->entry_at[c];
    float *x = j->e + layout->start[c];
    int32_t *column = j->columns + at;
    uint32_t hi_bits, lo_bits;
    if (j->params != NULL) {
        sl_feed_difference(x, j->start + layout->start[c], j->params[c], j->beta, m);
    } else {
        sl_feed(x, j->delta ? j->delta + layout->start[c] : NULL, j->beta, m);
    }
    sl_select_chunk(x, m, k, s, column, &hi_bits, &lo_bits);
    if (p->bits == 32) {
        for (int64_t t = 0; t < k; t++) {
            float v = x[column[t]];
            memcpy(j->out + 4 * (at + t), &v, 4);
            if (j->feedback) x[column[t]] = x[column[t]] - v;
        }
        return;
    }
    float hi = sl_float(hi_bits);
    uint32_t q = sl_floor_q(hi, sl_float(lo_bits));
    float floor_ = sl_floor(hi, q);
    memcpy(j->out + 4 * c, &hi, 4);
    j->out[4 * layout->chunks + 2 * c] = (uint8_t)(q & 255);
    j->out[4 * layout->chunks + 2 * c + 1] = (uint8_t)(q >> 8);
    float table[256]; /* each code's value, where the chunk has more entries than codes */
    int tabled = j->feedback && (1 << p->bits) <= k;
    for (uint32_t code = 0; tabled && code < (1u << p->bits); code++)
        table[code] = sl_value(code, hi, floor_, p->bits);
    for (int64_t t = 0; t < k; t++) {
        float v = x[column[t]];
        uint8_t code = sl_code(v, hi, floor_, p->bits);
        j->codes[at + t] = code;
        if (j->feedback) x[column[t]] = v - (tabled ? table[code] : sl_value(code, hi, floor_, p->bits));
    }
}

static void encode_task(void *ctx, int t, int n) {
    encode_job *j = (encode_job *)ctx;
    int64_t b, e;
    piece(0, j->plan->layout->chunks, t, n, &b, &e);
    if (b >= e) return;
    sl_select_scratch s;
    if (sl_select_scratch_new(&s, j->plan->longest) != BAGUA_NATIVE_OK) {
        j->failed = 1;
        return;
    }
    for (int64_t c = b; c < e; c++) encode_chunk(j, c, &s);
    sl_select_scratch_free(&s);
}

static int run_encode(float *e, const float *delta, const float *start, const float *const *params, float beta,
                      int feedback, const bagua_sparseloco_layout *layout, int bits, uint8_t *out,
                      int64_t nbytes) {
    if (bits == 0) return BAGUA_SPARSELOCO_ERR_LAYOUT;
    sl_plan plan;
    int rc = sl_plan_make(&plan, layout, bits);
    if (rc != BAGUA_NATIVE_OK) return rc;
    if (nbytes != plan.nbytes) {
        sl_plan_free(&plan);
        return BAGUA_NATIVE_ERR_SIZE;
    }
    size_t entries = (size_t)(plan.entries > 0 ? plan.entries : 1);
    encode_job j = {
        &plan, e, delta, start, params, beta, feedback, out, (int32_t *)malloc(4 * entries),
        (uint8_t *)malloc(entries), 0};
    if (j.columns == NULL || j.codes == NULL) {
        j.failed = 1;
    } else {
        run_parallel(layout->numel, encode_task, &j);
    }
    if (!j.failed) {
        sl_index_write(&plan, j.columns, out + plan.index_at);
        if (bits != 32) sl_pack(j.codes, plan.entries, bits, out + plan.values_at);
    }
    free(j.columns);
    free(j.codes);
    sl_plan_free(&plan);
    return j.failed ? BAGUA_SPARSELOCO_ERR_MEMORY : BAGUA_NATIVE_OK;
}

int bagua_sparseloco_encode(float *e, const float *delta, float beta, int feedback,
                            const bagua_sparseloco_layout *layout, int bits, uint8_t *out, int64_t nbytes) {
    return run_encode(e, delta, NULL, NULL, beta, feedback, layout, bits, out, nbytes);
}

int bagua_sparseloco_encode_difference(float *e, const float *start, const float *const *params, float beta,
                                       const bagua_sparseloco_layout *layout, int bits, uint8_t *out,
                                       int64_t nbytes) {
    if (start == NULL || params == NULL) return BAGUA_NATIVE_ERR_ARGUMENT;
    for (int64_t c = 0; c < layout->chunks; c++) {
        if (params[c] == NULL) return BAGUA_NATIVE_ERR_ARGUMENT;
    }
    return run_encode(e, NULL, start, params, beta, 1, layout, bits, out, nbytes);
}

/* The values of chunk c's entries of the message buf (columns already read). */
static void chunk_values(const sl_plan *p, const uint8_t *buf, int64_t c, float *values) {
    int64_t k = sl_chunk_sent(p, c), at = p->entry_at[c];
    if (p->bits == 32) {
        memcpy(values, buf + 4 * at, 4 * (size_t)k);
        return;
    }
    int64_t chunks = p->layout->chunks;
    int bits = p->bits;
    float hi;
    memcpy(&hi, buf + 4 * c, 4);
    uint32_t q = buf[4 * chunks + 2 * c] | ((uint32_t)buf[4 * chunks + 2 * c + 1] << 8);
    float floor_ = sl_floor(hi, q);
    const uint8_t *codes = buf + p->values_at;
    uint32_t mask = (1u << bits) - 1;
    float table[256]; /* each code's value, where the chunk has more entries than codes */
    int tabled = (1 << bits) <= k;
    for (uint32_t code = 0; tabled && code <= mask; code++) table[code] = sl_value(code, hi, floor_, bits);
    for (int64_t t = 0; t < k; t++) {
        int64_t i = at + t;
        uint32_t code = (codes[(i * bits) >> 3] >> ((i * bits) & 7)) & mask;
        values[t] = tabled ? table[code] : sl_value(code, hi, floor_, bits);
    }
}

typedef struct {
    const sl_plan *plan;
    const uint8_t *bufs;
    int64_t n;
    int average;
    int64_t *positions; /* entries(): each entry's position, its value in values */
    float *values, *out;
    int64_t *found; /* average_entries(): each chunk's distinct positions (at n * entry_at[c] in positions) */
    int failed;
} decode_job;

/* dst[0 .. n) = src[0 .. n), past the caches where SSE has streaming stores (the fragment is written once and
 * not read again here); the caller fences. */
static void stream_copy(float *dst, const float *src, int64_t n) {
#ifdef BAGUA_HAVE_SSE
    int64_t i = 0;
    for (; i < n && ((uintptr_t)(dst + i) & 15) != 0; i++) dst[i] = src[i];
    for (; i + 16 <= n; i += 16) {
        _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
        _mm_stream_ps(dst + i + 4, _mm_loadu_ps(src + i + 4));
        _mm_stream_ps(dst + i + 8, _mm_loadu_ps(src + i + 8));
        _mm_stream_ps(dst + i + 12, _mm_loadu_ps(src + i + 12));
    }
    for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
    for (; i < n; i++) dst[i] = src[i];
#else
    memcpy(dst, src, 4 * (size_t)n);
#endif
}

/* Chunk by chunk in a zeroed buffer of the longest chunk (kept zero: only the entries' positions are reset),
 * streamed out to the fragment. */
static void decode_task(void *ctx, int t, int n) {
    decode_job *j = (decode_job *)ctx;
    const sl_plan *p = j->plan;
    const bagua_sparseloco_layout *layout = p->layout;
    int64_t b, e;
    piece(0, layout->chunks, t, n, &b, &e);
    if (b >= e) return;
    size_t longest = (size_t)p->longest;
    /* (touched takes a branchless write past the chunk's distinct positions) */
    int32_t *column = (int32_t *)malloc(4 * longest), *touched = (int32_t *)malloc(4 * (longest + 1));
    float *value = (float *)malloc(4 * longest), *acc = (float *)calloc(longest, 4);
    uint8_t *mark = (uint8_t *)calloc(longest, 1);
    if (column == NULL || touched == NULL || value == NULL || acc == NULL || mark == NULL) {
        j->failed = 1;
    } else if (j->out == NULL && j->found == NULL) { /* entries(): one message's positions and values */
        for (int64_t c = b; c < e; c++) {
            int64_t k = sl_chunk_sent(p, c), at = p->entry_at[c];
            sl_index_read_chunk(p, j->bufs + p->index_at, c, column);
            chunk_values(p, j->bufs, c, j->values + at);
            for (int64_t i = 0; i < k; i++) j->positions[at + i] = layout->start[c] + column[i];
        }
    } else {
        float divisor = (float)j->n;
        for (int64_t c = b; c < e; c++) {
            int64_t m = layout->length[c], k = sl_chunk_sent(p, c), count = 0;
            for (int64_t r = 0; r < j->n; r++) { /* in rank order */
                const uint8_t *buf = j->bufs + r * p->nbytes;
                sl_index_read_chunk(p, buf + p->index_at, c, column);
                chunk_values(p, buf, c, value);
                for (int64_t i = 0; i < k; i++) {
                    int32_t at = column[i];
                    if (j->average) {
                        acc[at] += value[i];
                    } else {
                        acc[at] = value[i]; /* the last of equal positions wins */
                    }
                    touched[count] = at;
                    count += !mark[at];
                    mark[at] = 1;
                }
            }
            if (j->average) { /* the others are zeros, and stay: 0 / n = 0 */
                for (int64_t i = 0; i < count; i++) acc[touched[i]] = acc[touched[i]] / divisor;
            }
            if (j->found != NULL) { /* the chunk's distinct positions and their means, not the dense chunk */
                int64_t *position = j->positions + j->n * p->entry_at[c];
                float *mean = j->values + j->n * p->entry_at[c];
                for (int64_t i = 0; i < count; i++) {
                    position[i] = layout->start[c] + touched[i];
                    mean[i] = acc[touched[i]];
                }
                j->found[c] = count;
            } else {
                stream_copy(j->out + layout->start[c], acc, m);
            }
            for (int64_t i = 0; i < count; i++) {
                acc[touched[i]] = 0.0f;
                mark[touched[i]] = 0;
            }
        }
#ifdef BAGUA_HAVE_SSE
        _mm_sfence();
#endif
    }
    free(column);
    free(touched);
    free(value);
    free(acc);
    free(mark);
}

static int run_decode(const uint8_t *bufs, int64_t nbytes, int64_t n, const bagua_sparseloco_layout *layout,
                      int bits, int average, int64_t *positions, float *values, float *out, int64_t *count) {
    if (bits == 0 || n < 1) return bits == 0 ? BAGUA_SPARSELOCO_ERR_LAYOUT : BAGUA_NATIVE_ERR_ARGUMENT;
    sl_plan plan;
    int rc = sl_plan_make(&plan, layout, bits);
    if (rc != BAGUA_NATIVE_OK) return rc;
    if (nbytes != plan.nbytes) {
        sl_plan_free(&plan);
        return BAGUA_NATIVE_ERR_SIZE;
    }
    int64_t *found = NULL;
    if (count != NULL && (found = (int64_t *)malloc(8 * (size_t)(layout->chunks > 0 ? layout->chunks : 1))) == NULL) {
        sl_plan_free(&plan);
        return BAGUA_SPARSELOCO_ERR_MEMORY;
    }
    decode_job j = {&plan, bufs, n, average, positions, values, out, found, 0};
    run_parallel(out || found ? layout->numel : plan.entries, decode_task, &j);
    if (found != NULL && !j.failed) { /* the chunks' distinct positions, one after the other */
        int64_t total = 0;
        for (int64_t c = 0; c < layout->chunks; c++) {
            int64_t at = n * plan.entry_at[c];
            memmove(positions + total, positions + at, 8 * (size_t)found[c]);
            memmove(values + total, values + at, 4 * (size_t)found[c]);
            total += found[c];
        }
        *count = total;
    }
    free(found);
    sl_plan_free(&plan);
    return j.failed ? BAGUA_SPARSELOCO_ERR_MEMORY : BAGUA_NATIVE_OK;
}

int bagua_sparseloco_entries(const uint8_t *buf, int64_t nbytes, const bagua_sparseloco_layout *layout,
                             int bits, int64_t *positions, float *values) {
    if (positions == NULL || values == NULL) return BAGUA_NATIVE_ERR_ARGUMENT;
    return run_decode(buf, nbytes, 1, layout, bits, 0, positions, values, NULL, NULL);
}

int bagua_sparseloco_average_entries(const uint8_t *bufs, int64_t nbytes, int64_t n,
                                     const bagua_sparseloco_layout *layout, int bits, int64_t *positions,
                                     float *values, int64_t *count) {
    if (positions == NULL || values == NULL || count == NULL) return BAGUA_NATIVE_ERR_ARGUMENT;
    return run_decode(bufs, nbytes, n, layout, bits, 1, positions, values, NULL, count);
}

int bagua_sparseloco_decode(const uint8_t *bufs, int64_t nbytes, int64_t n,
                            const bagua_sparseloco_layout *layout, int bits, int average, float *out) {
    if (out == NULL) return BAGUA_NATIVE_ERR_ARGUMENT;
    if (!average && n != 1) return BAGUA_NATIVE_ERR_ARGUMENT;
    return run_decode(bufs, nbytes, n, layout, bits, average, NULL, NULL, out, NULL);
}

typedef struct {
    const bagua_sparseloco_layout *layout;
    const int64_t *positions;
    const float *values;
    const int64_t *first; /* chunks + 1: each chunk's first entry in positions */
    float *theta;
    float *const *params;
} put_job;

/* Chunk by chunk: the chunk's entries written into theta, then the chunk streamed out to the parameters. */
static void put_task(void *ctx, int t, int n) {
    put_job *j = (put_job *)ctx;
    const bagua_sparseloco_layout *layout = j->layout;
    int64_t b, e;
    piece(0, layout->chunks, t, n, &b, &e);
    for (int64_t c = b; c < e; c++) {
        for (int64_t i = j->first[c]; i < j->first[c + 1]; i++) j->theta[j->positions[i]] = j->values[i];
        if (j->params != NULL) stream_copy(j->params[c], j->theta + layout->start[c], layout->length[c]);
    }
#ifdef BAGUA_HAVE_SSE
    if (j->params != NULL) _mm_sfence();
#endif
}

int bagua_sparseloco_put(const int64_t *positions, const float *values, int64_t count, float *theta,
                         float *const *params, const bagua_sparseloco_layout *layout) {
    if (positions == NULL || values == NULL || theta == NULL || count < 0) return BAGUA_NATIVE_ERR_ARGUMENT;
    sl_plan plan;
    int rc = sl_plan_make(&plan, layout, 0);
    if (rc != BAGUA_NATIVE_OK) return rc;
    sl_plan_free(&plan);
    for (int64_t c = 0; params != NULL && c < layout->chunks; c++) {
        if (params[c] == NULL) return BAGUA_NATIVE_ERR_ARGUMENT;
    }
    int64_t *first = (int64_t *)malloc(8 * (size_t)(layout->chunks + 1));
    if (first == NULL) return BAGUA_SPARSELOCO_ERR_MEMORY;
    int64_t i = 0; /* the entries of each chunk, in chunk order; any other position is refused */
    for (int64_t c = 0; c < layout->chunks; c++) {
        first[c] = i;
        int64_t begin = layout->start[c], end = begin + layout->length[c];
        while (i < count && positions[i] >= begin && positions[i] < end) i++;
    }
    first[layout->chunks] = i;
    if (i != count) {
        free(first);
        return BAGUA_NATIVE_ERR_ARGUMENT;
    }
    put_job j = {layout, positions, values, first, theta, params};
    run_parallel(params != NULL ? layout->numel : count, put_task, &j);
    free(first);
    return BAGUA_NATIVE_OK;
}

