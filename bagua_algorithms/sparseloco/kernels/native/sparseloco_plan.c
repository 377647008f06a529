/*
 * A layout's plan (sparseloco_plan.h): where each chunk's entries and index bits lie and the message's
 * fields, as bagua_algorithms/sparseloco/codec.py lays them out.
 */
#include <stdlib.h>

#include "bagua_native.h"
#include "sparseloco_plan.h"

int sl_plan_make(sl_plan *p, const bagua_sparseloco_layout *layout, int bits) {
    memset(p, 0, sizeof *p);
    if (layout == NULL || layout->chunks < 0 || layout->topk < 1 || layout->numel < 0)
        return BAGUA_SPARSELOCO_ERR_LAYOUT;
    if (bits != 0 && bits != 2 && bits != 4 && bits != 8 && bits != 32) return BAGUA_SPARSELOCO_ERR_LAYOUT;
    int64_t chunks = layout->chunks;
    if (chunks > 0 && (layout->start == NULL || layout->length == NULL)) return BAGUA_SPARSELOCO_ERR_LAYOUT;
    p->layout = layout;
    p->bits = bits;
    p->entry_at = (int64_t *)malloc(sizeof(int64_t) * (size_t)(3 * chunks + 1));
    if (p->entry_at == NULL) return BAGUA_SPARSELOCO_ERR_MEMORY;
    p->low_at = p->entry_at + chunks + 1;
    p->upper_at = p->low_at + chunks;
    int64_t entries = 0, low = 0, longest = 0;
    for (int64_t c = 0; c < chunks; c++) {
        int64_t m = layout->length[c], start = layout->start[c];
        if (m < 1 || start < 0 || start > layout->numel - m) {
            sl_plan_free(p);
            return BAGUA_SPARSELOCO_ERR_LAYOUT;
        }
        int64_t k = sl_sent(m, layout->topk);
        p->entry_at[c] = entries;
        p->low_at[c] = low;
        entries += k;
        if (k < m) low += k * sl_low_bits(m, k);
        longest = m > longest ? m : longest;
    }
    p->entry_at[chunks] = entries;
    int64_t upper = low;
    for (int64_t c = 0; c < chunks; c++) {
        int64_t m = layout->length[c], k = sl_sent(m, layout->topk);
        p->upper_at[c] = upper;
        if (k < m) upper += k + ((m - 1) >> sl_low_bits(m, k));
    }
    p->entries = entries;
    p->low_bits = low;
    p->upper_end = upper;
    p->field_bytes = (upper + 7) / 8;
    p->longest = longest;
    if (bits == 32) {
        p->header_bytes = 0;
        p->values_at = 0;
        p->index_at = 4 * entries;
        p->nbytes = 4 * entries + p->field_bytes;
    } else {
        p->header_bytes = 6 * chunks;
        p->index_at = 6 * chunks;
        p->values_at = p->index_at + p->field_bytes;
        p->nbytes = p->values_at + (bits ? (entries * bits + 7) / 8 : 0);
    }
    return BAGUA_NATIVE_OK;
}

void sl_plan_free(sl_plan *p) {
    free(p->entry_at);
    p->entry_at = p->low_at = p->upper_at = NULL;
}

int64_t bagua_sparseloco_message_bytes(const bagua_sparseloco_layout *layout, int bits) {
    sl_plan p;
    if (bits == 0) return BAGUA_SPARSELOCO_ERR_LAYOUT;
    int rc = sl_plan_make(&p, layout, bits);
    if (rc != BAGUA_NATIVE_OK) return rc;
    int64_t nbytes = p.nbytes;
    sl_plan_free(&p);
    return nbytes;
}
