/*
 * What the C kernels of sparseloco.h share (not part of the cdef; hidden inside the library): a layout's plan
 * (where each chunk's entries, low bits and upper bits lie, the message's fields), reading and writing the
 * bit string of the index field, and the per-chunk steps the message functions compose.
 */
#ifndef BAGUA_SPARSELOCO_PLAN_H
#define BAGUA_SPARSELOCO_PLAN_H

#include <stdint.h>

#include "sparseloco.h"
#include "sparseloco_arith.h"

typedef struct {
    const bagua_sparseloco_layout *layout;
    int64_t *entry_at; /* chunks + 1: each chunk's first entry; entry_at[chunks] = the entries */
    int64_t *low_at;   /* chunks: each chunk's first low bit in the index field */
    int64_t *upper_at; /* chunks: each chunk's first upper bit */
    int64_t entries, low_bits, upper_end, field_bytes, longest;
    int bits;
    int64_t header_bytes, index_at, values_at, nbytes; /* the message's fields (codec.py's layout) */
} sl_plan;

/* Checks the layout (and bits: 0 for none) and fills plan; BAGUA_NATIVE_OK or an error code. */
int sl_plan_make(sl_plan *plan, const bagua_sparseloco_layout *layout, int bits);
void sl_plan_free(sl_plan *plan);

/* k', l and whether the chunk's indices travel (k' < m). */
static inline int64_t sl_chunk_sent(const sl_plan *p, int64_t c) {
    return sl_sent(p->layout->length[c], p->layout->topk);
}

/* The 8 bytes of buf from byte i, little-endian, zeros past nbytes. */
static inline uint64_t sl_load64(const uint8_t *buf, int64_t nbytes, int64_t i) {
    uint64_t w = 0;
    if (i + 8 <= nbytes) {
        memcpy(&w, buf + i, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        return w;
    }
    for (int64_t b = 0; b < 8 && i + b < nbytes; b++) w |= (uint64_t)buf[i + b] << (8 * b);
    return w;
}

/* The n (<= 32) bits of the bit string buf from bit at, lowest first. */
static inline uint32_t sl_read_bits(const uint8_t *buf, int64_t nbytes, int64_t at, int n) {
    if (n == 0) return 0;
    return (uint32_t)((sl_load64(buf, nbytes, at >> 3) >> (at & 7)) & ((1ull << n) - 1));
}

/* The per-chunk steps (select.c, index_field.c, quantise.c). */

/* Per-thread scratch of the selection, for chunks of up to longest elements. */
typedef struct {
    uint32_t *values, *top, *work;
    int32_t *candidates, *picked;
} sl_select_scratch;

int sl_select_scratch_new(sl_select_scratch *s, int64_t longest);
void sl_select_scratch_free(sl_select_scratch *s);
/* e = e * beta (beta != 1) + delta over n elements (delta NULL: nothing). */
void sl_feed(float *e, const float *delta, float beta, int64_t n);
/* e = e * beta (beta != 1) + (start - param) over n elements (the difference rounded to fp32 first). */
void sl_feed_difference(float *e, const float *start, const float *param, float beta, int64_t n);
/* The k entries of largest magnitude of x[0 .. m) (chunks.py's rule): their columns, ascending, and the
 * largest and smallest magnitude sent (as sl_magnitude bits). */
void sl_select_chunk(const float *x, int64_t m, int64_t k, sl_select_scratch *s, int32_t *columns,
                     uint32_t *largest, uint32_t *smallest);
/* Writes the index field (field_bytes zeroed first) of the entries' columns. */
void sl_index_write(const sl_plan *p, const int32_t *columns, uint8_t *field);
/* The columns of chunk c's entries from the field (inside the chunk whatever the bytes). */
void sl_index_read_chunk(const sl_plan *p, const uint8_t *field, int64_t c, int32_t *columns);
/* Packs the entries' codes (entries codes of bits bits) into out. */
void sl_pack(const uint8_t *codes, int64_t entries, int bits, uint8_t *out);

#endif /* BAGUA_SPARSELOCO_PLAN_H */
