/*
 * sparseloco's message codec in C (CPU; bagua_algorithms/sparseloco/kernels/cpu.py calls it), part of the CPU
 * kernel library; this header is part of its cdef (native/build_cpu.py). Every function returns
 * bagua_native.h's codes or the BAGUA_SPARSELOCO_ERR_* codes below.
 *
 * The message and its rules are bagua_algorithms/sparseloco/codec.py's (the byte layout), chunks.py's (the
 * selection: per chunk the k' = min(topk, m) entries of largest |x|, NaN as +inf, ties with the k'-th largest
 * to the lowest index) and quantiser.py's (fp32 arithmetic, rint = round half to even). Each function gives
 * the bits of the torch code it replaces:
 *
 * bagua_sparseloco_select:     with delta: e = e * beta (when beta != 1) + delta first (two fp32 roundings,
 *                              written into e); then each entry's column in its chunk (ascending within a
 *                              chunk; ChunkLayout.select's columns) and each chunk's largest and smallest |e|
 *                              sent (top[:, 0] and smallest_sent(top)).
 * bagua_sparseloco_quantise:   the header (hi fp32 x chunks, q 16 bits x chunks) and the packed codes of the
 *                              entries' values (quantise + pack); bits 2, 4 or 8.
 * bagua_sparseloco_dequantise: the values of a header and packed codes (unpack + dequantise).
 * bagua_sparseloco_index_encode / _decode: the Elias-Fano index field of the columns, and back (any bytes
 *                              decode to columns inside their chunk, as _IndexField.decode).
 * bagua_sparseloco_encode:     the whole message of e (ChunkTopK.encode), with delta/beta as in _select; with
 *                              feedback != 0 it also subtracts what the message decodes to from e
 *                              (e -= decode(message): only the sent entries change).
 * bagua_sparseloco_encode_difference: bagua_sparseloco_encode with feedback and delta = start - params taken
 *                              in the same pass (no delta written): params[c] holds chunk c's elements of the
 *                              parameters (a chunk lies in one tensor), start the fragment's numel fp32; the
 *                              bits of the fp32 subtraction, then the encode with that delta.
 * bagua_sparseloco_entries:    each entry's fragment position and decoded value (ChunkTopK.entries).
 * bagua_sparseloco_decode:     the n messages held back to back in bufs into out (numel fp32): average = 0,
 *                              n = 1: zeros and the entries' values written, the last of equal positions
 *                              winning (ChunkTopK.decode); average = 1: zeros, every message's values added
 *                              in fp32 in rank order, then divided by n (ChunkTopK.decode_average).
 * bagua_sparseloco_average_entries: that average's entries where any message sends one: the distinct positions
 *                              (chunk after chunk, in the order first sent) and their means, count of them
 *                              (at most n * entries; positions and values hold that many); the average is 0
 *                              elsewhere.
 * bagua_sparseloco_put:        theta[positions[i]] = values[i] for count entries grouped chunk by chunk in chunk
 *                              order (as bagua_sparseloco_average_entries gives them; anything else is refused),
 *                              then, with params (params[c]: chunk c's elements of the parameters), each chunk of
 *                              theta copied to the parameters in the same pass.
 *
 * BAGUA_NATIVE_THREADS > 1 splits the chunks over threads (the bits do not change).
 */
#ifndef BAGUA_SPARSELOCO_H
#define BAGUA_SPARSELOCO_H

#include <stdint.h>

/* a chunk of no element or past the fragment, topk < 1, or bits not 2, 4, 8 or 32 */
#define BAGUA_SPARSELOCO_ERR_LAYOUT -20
/* the kernel's scratch could not be allocated */
#define BAGUA_SPARSELOCO_ERR_MEMORY -21

/* A fragment's chunks (ChunkLayout): chunk c holds elements start[c] .. start[c] + length[c] - 1 and sends
 * k' = min(topk, length[c]) entries; entries are numbered chunk after chunk. */
typedef struct {
    const int64_t *start;
    const int64_t *length;
    int64_t chunks;
    int64_t topk;
    int64_t numel;
} bagua_sparseloco_layout;

/* Bytes of a message of this layout (bits 2, 4, 8 or 32), or a negative code. */
int64_t bagua_sparseloco_message_bytes(const bagua_sparseloco_layout *layout, int bits);

int bagua_sparseloco_select(float *e, const float *delta, float beta, const bagua_sparseloco_layout *layout,
                            int64_t *columns, float *largest, float *smallest);
int bagua_sparseloco_quantise(const float *values, const float *largest, const float *smallest,
                              const bagua_sparseloco_layout *layout, int bits, uint8_t *header,
                              uint8_t *codes);
int bagua_sparseloco_dequantise(const uint8_t *header, const uint8_t *codes,
                                const bagua_sparseloco_layout *layout, int bits, float *values);
int bagua_sparseloco_index_encode(const int64_t *columns, const bagua_sparseloco_layout *layout,
                                  uint8_t *field, int64_t field_bytes);
int bagua_sparseloco_index_decode(const uint8_t *field, int64_t field_bytes,
                                  const bagua_sparseloco_layout *layout, int64_t *columns);
int bagua_sparseloco_encode(float *e, const float *delta, float beta, int feedback,
                            const bagua_sparseloco_layout *layout, int bits, uint8_t *out, int64_t nbytes);
int bagua_sparseloco_encode_difference(float *e, const float *start, const float *const *params, float beta,
                                       const bagua_sparseloco_layout *layout, int bits, uint8_t *out,
                                       int64_t nbytes);
int bagua_sparseloco_entries(const uint8_t *buf, int64_t nbytes, const bagua_sparseloco_layout *layout,
                             int bits, int64_t *positions, float *values);
int bagua_sparseloco_decode(const uint8_t *bufs, int64_t nbytes, int64_t n,
                            const bagua_sparseloco_layout *layout, int bits, int average, float *out);
int bagua_sparseloco_average_entries(const uint8_t *bufs, int64_t nbytes, int64_t n,
                                     const bagua_sparseloco_layout *layout, int bits, int64_t *positions,
                                     float *values, int64_t *count);
int bagua_sparseloco_put(const int64_t *positions, const float *values, int64_t count, float *theta,
                         float *const *params, const bagua_sparseloco_layout *layout);

#endif /* BAGUA_SPARSELOCO_H */
