/*
 * sparseloco's quantiser (bagua_algorithms/sparseloco/quantiser.py, arithmetic in sparseloco_arith.h): per
 * chunk hi (fp32) and q (16 bits) in the header, each entry's bits-bit code, packed 8 / bits to a byte, the
 * first in the lowest bits; and back.
 */
#include <stdlib.h>

#include "bagua_native.h"
#include "sparseloco_plan.h"

void sl_pack(const uint8_t *codes, int64_t entries, int bits, uint8_t *out) {
    int per = 8 / bits;
    int64_t bytes = (entries * bits + 7) / 8;
    for (int64_t b = 0; b < bytes; b++) {
        uint32_t byte = 0;
        for (int i = 0; i < per && b * per + i < entries; i++)
            byte |= (uint32_t)codes[b * per + i] << (bits * i);
        out[b] = (uint8_t)byte;
    }
}

int bagua_sparseloco_quantise(const float *values, const float *largest, const float *smallest,
                              const bagua_sparseloco_layout *layout, int bits, uint8_t *header,
                              uint8_t *codes) {
    if (bits == 32) return BAGUA_SPARSELOCO_ERR_LAYOUT;
    sl_plan plan;
    int rc = sl_plan_make(&plan, layout, bits);
    if (rc != BAGUA_NATIVE_OK) return rc;
    uint8_t *code = (uint8_t *)malloc((size_t)(plan.entries > 0 ? plan.entries : 1));
    if (code == NULL) {
        sl_plan_free(&plan);
        return BAGUA_SPARSELOCO_ERR_MEMORY;
    }
    int64_t chunks = layout->chunks;
    for (int64_t c = 0; c < chunks; c++) {
        float hi = largest[c];
        uint32_t q = sl_floor_q(hi, smallest[c]);
        float floor_ = sl_floor(hi, q);
        memcpy(header + 4 * c, &hi, 4);
        header[4 * chunks + 2 * c] = (uint8_t)(q & 255);
        header[4 * chunks + 2 * c + 1] = (uint8_t)(q >> 8);
        for (int64_t i = plan.entry_at[c]; i < plan.entry_at[c + 1]; i++)
            code[i] = sl_code(values[i], hi, floor_, bits);
    }
    sl_pack(code, plan.entries, bits, codes);
    free(code);
    sl_plan_free(&plan);
    return BAGUA_NATIVE_OK;
}

int bagua_sparseloco_dequantise(const uint8_t *header, const uint8_t *codes,
                                const bagua_sparseloco_layout *layout, int bits, float *values) {
    if (bits == 32) return BAGUA_SPARSELOCO_ERR_LAYOUT;
    sl_plan plan;
    int rc = sl_plan_make(&plan, layout, bits);
    if (rc != BAGUA_NATIVE_OK) return rc;
    int64_t chunks = layout->chunks;
    uint32_t mask = (1u << bits) - 1;
    for (int64_t c = 0; c < chunks; c++) {
        float hi;
        memcpy(&hi, header + 4 * c, 4);
        uint32_t q = header[4 * chunks + 2 * c] | ((uint32_t)header[4 * chunks + 2 * c + 1] << 8);
        float floor_ = sl_floor(hi, q);
        for (int64_t i = plan.entry_at[c]; i < plan.entry_at[c + 1]; i++) {
            uint32_t code = (codes[(i * bits) >> 3] >> ((i * bits) & 7)) & mask;
            values[i] = sl_value(code, hi, floor_, bits);
        }
    }
    sl_plan_free(&plan);
    return BAGUA_NATIVE_OK;
}
