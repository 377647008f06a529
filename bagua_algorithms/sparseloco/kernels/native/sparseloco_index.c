/*
 * sparseloco's Elias-Fano index field (bagua_algorithms/sparseloco/codec.py's module doc): the low bits of
 * every coded chunk's entries, chunk after chunk, then their upper bits, each a bit string (bit j is bit j %
 * 8 of byte j / 8). Reading follows codec.py's rule for any bytes: entry j of a chunk takes the j-th set
 * upper bit at or after the chunk's first (a later chunk's, or the field's end, where the chunk has fewer),
 * and an index past the chunk's end becomes its last.
 */
#include <stdlib.h>

#include "bagua_native.h"
#include "sparseloco_plan.h"

/* ORs the n (<= 32) bits of value into the zeroed bit string at bit at. */
static void write_bits(uint8_t *field, int64_t at, uint32_t value, int n) {
    if (n == 0) return;
    uint64_t v = (uint64_t)value << (at & 7);
    for (int64_t b = at >> 3; v; b++, v >>= 8) field[b] |= (uint8_t)(v & 255);
}

void sl_index_write(const sl_plan *p, const int32_t *columns, uint8_t *field) {
    const bagua_sparseloco_layout *layout = p->layout;
    memset(field, 0, (size_t)p->field_bytes);
    for (int64_t c = 0; c < layout->chunks; c++) {
        int64_t m = layout->length[c], k = sl_chunk_sent(p, c);
        if (k >= m) continue;
        int l = sl_low_bits(m, k);
        const int32_t *column = columns + p->entry_at[c];
        int64_t low = p->low_at[c], upper = p->upper_at[c];
        for (int64_t j = 0; j < k; j++) {
            uint32_t i = (uint32_t)column[j];
            write_bits(field, low + j * l, i & ((1u << l) - 1), l);
            int64_t bit = upper + (i >> l) + j;
            field[bit >> 3] |= (uint8_t)(1u << (bit & 7));
        }
    }
}

void sl_index_read_chunk(const sl_plan *p, const uint8_t *field, int64_t c, int32_t *columns) {
    const bagua_sparseloco_layout *layout = p->layout;
    int64_t m = layout->length[c], k = sl_chunk_sent(p, c);
    if (k >= m) {
        for (int64_t j = 0; j < k; j++) columns[j] = (int32_t)j;
        return;
    }
    int l = sl_low_bits(m, k);
    int64_t nbytes = p->field_bytes, end = p->upper_end, first = p->upper_at[c], low = p->low_at[c];
    int64_t next = first, base = first; /* the next bit to load; the bit word's lowest holds */
    uint64_t word = 0;
    int at_end = 0;
    for (int64_t j = 0; j < k; j++) {
        int64_t at = end;
        if (!at_end) {
            while (word == 0 && next < end) {
                word = sl_load64(field, nbytes, next >> 3) >> (next & 7);
                base = next;
                next = ((next >> 3) << 3) + 64;
            }
            if (word) {
                at = base + __builtin_ctzll(word);
                word &= word - 1;
            }
            if (at >= end) { /* no set upper bit left: this entry and the rest take the field's end */
                at = end;
                at_end = 1;
            }
        }
        int64_t column = ((at - first - j) << l) | sl_read_bits(field, nbytes, low + j * l, l);
        columns[j] = (int32_t)(column < m - 1 ? column : m - 1);
    }
}

int bagua_sparseloco_index_encode(const int64_t *columns, const bagua_sparseloco_layout *layout,
                                  uint8_t *field, int64_t field_bytes) {
    sl_plan plan;
    int rc = sl_plan_make(&plan, layout, 0);
    if (rc != BAGUA_NATIVE_OK) return rc;
    if (field_bytes != plan.field_bytes) {
        sl_plan_free(&plan);
        return BAGUA_NATIVE_ERR_SIZE;
    }
    int32_t *narrow = (int32_t *)malloc(4 * (size_t)(plan.entries > 0 ? plan.entries : 1));
    if (narrow == NULL) {
        sl_plan_free(&plan);
        return BAGUA_SPARSELOCO_ERR_MEMORY;
    }
    rc = BAGUA_NATIVE_OK;
    for (int64_t c = 0; c < layout->chunks && rc == BAGUA_NATIVE_OK; c++) { /* ascending, inside the chunk */
        int64_t m = layout->length[c], k = sl_chunk_sent(&plan, c), at = plan.entry_at[c];
        for (int64_t j = 0; j < k; j++) {
            int64_t i = columns[at + j];
            if (i < 0 || i >= m || (j > 0 && i <= columns[at + j - 1])) {
                rc = BAGUA_NATIVE_ERR_ARGUMENT;
                break;
            }
            narrow[at + j] = (int32_t)i;
        }
    }
    if (rc == BAGUA_NATIVE_OK) sl_index_write(&plan, narrow, field);
    free(narrow);
    sl_plan_free(&plan);
    return rc;
}

int bagua_sparseloco_index_decode(const uint8_t *field, int64_t field_bytes,
                                  const bagua_sparseloco_layout *layout, int64_t *columns) {
    sl_plan plan;
    int rc = sl_plan_make(&plan, layout, 0);
    if (rc != BAGUA_NATIVE_OK) return rc;
    int32_t *narrow = (int32_t *)malloc(4 * (size_t)(plan.longest > 0 ? plan.longest : 1));
    if (field_bytes != plan.field_bytes || narrow == NULL) {
        free(narrow);
        sl_plan_free(&plan);
        return field_bytes != plan.field_bytes ? BAGUA_NATIVE_ERR_SIZE : BAGUA_SPARSELOCO_ERR_MEMORY;
    }
    for (int64_t c = 0; c < layout->chunks; c++) {
        int64_t k = sl_chunk_sent(&plan, c), at = plan.entry_at[c];
        sl_index_read_chunk(&plan, field, c, narrow);
        for (int64_t j = 0; j < k; j++) columns[at + j] = narrow[j];
    }
    free(narrow);
    sl_plan_free(&plan);
    return BAGUA_NATIVE_OK;
}
