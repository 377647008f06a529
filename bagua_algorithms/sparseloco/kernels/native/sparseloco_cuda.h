/*
 * sparseloco's message codec for CUDA tensors (the C kernels' bits: sparseloco.h), part of the CUDA kernel
 * library (bagua_cuda.h), whose cdef this header is part of; bagua_algorithms/sparseloco/kernels/cuda.py
 * calls them. All work is queued on stream. Every pointer is a device pointer.
 *
 * plan: one int64 array, per chunk its first element (start), its elements (length), its first entry
 * (entry_at, chunks + 1 values: the entries at the end), its first low bit and first upper bit in the index
 * field (low_at, upper_at), then each entry's chunk (entry_chunk): chunks * 6 + 1 + entries values
 * (kernels/cuda.py's index_plan). upper_end: the index field's end bit.
 *
 * bagua_cuda_sparseloco_encode:  the message of e into out (nbytes); with delta, e = e * beta + delta first;
 *                                with feedback, e -= what the message decodes to. Scratch: columns and codes
 *                                (entries each), words (upper_end / 32 + 2 words).
 * bagua_cuda_sparseloco_entries: the positions (int64) and values (fp32) of the n messages of nbytes held
 * back to back in bufs, message after message. bagua_cuda_sparseloco_scatter: out (the fragment) from
 * _entries' output: zeros, then each message's values written (average = 0, n = 1; the last of equal
 * positions winning) or added in rank order and divided by n (average = 1).
 */
#ifndef BAGUA_SPARSELOCO_CUDA_H
#define BAGUA_SPARSELOCO_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int bagua_cuda_sparseloco_encode(float *e, const float *delta, float beta, int feedback, const int64_t *plan,
                                 int64_t chunks, int64_t entries, int64_t topk, int64_t numel,
                                 int64_t upper_end, int bits, int32_t *columns, uint8_t *codes,
                                 uint32_t *words, uint8_t *out, int64_t nbytes, void *stream);
int bagua_cuda_sparseloco_entries(const uint8_t *bufs, int64_t nbytes, int64_t n, const int64_t *plan,
                                  int64_t chunks, int64_t entries, int64_t topk, int64_t upper_end, int bits,
                                  int64_t *positions, float *values, void *stream);
int bagua_cuda_sparseloco_scatter(const int64_t *positions, const float *values, int64_t n,
                                  const int64_t *plan, int64_t chunks, int64_t entries, int64_t topk,
                                  int average, float *out, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* BAGUA_SPARSELOCO_CUDA_H */
