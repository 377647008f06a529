/*
 * MinMaxUInt8 compression kernels (CPU), the codec's part of the CPU library. This header is part of
 * its cffi cdef (native/build_cpu.py strips the preprocessor lines and feeds the rest to
 * ffibuilder.cdef); the threads and the shared status codes are in bagua_native.h.
 *
 * Formula, per chunk x, all in fp32 (eps = 1e-7, rint = round half to even):
 *   scale = 255 / (max - min + eps), upper = rint(max * scale), lower = upper - 255,
 *   q = uint8(clamp(min(rint(x * scale), upper) - lower, 0, 255)),  x' = (q + lower) / scale.
 * (The clamp only matters where fp32 rounding would push the value out of [0, 255].)
 *
 * Buffer layout for numel elements in n_chunks chunks:
 *   chunk_numel = ceil(numel / n_chunks) (the last chunk shorter, trailing chunks possibly empty),
 *   slot_bytes  = 8 + chunk_numel rounded up to a multiple of 8,
 *   total bytes = n_chunks * slot_bytes; slot i starts at i * slot_bytes and holds
 *   [float32 min][float32 max][one uint8 per element][zero padding to slot_bytes].
 * A chunk that cannot be represented (NaN/Inf, or so large that x * scale overflows) is stored as
 * min = max = NaN with a zero payload, and decompresses to NaN.
 */
#ifndef BAGUA_MINMAX_UINT8_H
#define BAGUA_MINMAX_UINT8_H

#include <stdint.h>

/* BAGUA_MINMAX_OK, _ERR_SIZE and _ERR_ARGUMENT equal bagua_native.h's BAGUA_NATIVE_* codes. */
#define BAGUA_MINMAX_OK 0
#define BAGUA_MINMAX_ERR_SIZE -1
#define BAGUA_MINMAX_ERR_NONFINITE -2
#define BAGUA_MINMAX_ERR_OVERFLOW -3
#define BAGUA_MINMAX_ERR_ARGUMENT -4

/* Bytes of the compressed buffer for numel elements split into n_chunks chunks (-1 if invalid). */
int64_t bagua_minmax_compressed_size(int64_t numel, int64_t n_chunks);

/* Compresses x[0:numel] into out[0:out_bytes]. When nonfinite_raise is 0, unrepresentable chunks are
 * stored as NaN chunks and the call succeeds; otherwise the first such chunk makes it return
 * BAGUA_MINMAX_ERR_NONFINITE or BAGUA_MINMAX_ERR_OVERFLOW (out is then unspecified). */
int bagua_minmax_compress_f32(const float *x, int64_t numel, int64_t n_chunks, uint8_t *out,
                              int64_t out_bytes, int nonfinite_raise);

/* Decompresses buf into out[0:numel] (fp32); accumulate != 0 adds into out instead (fp32). */
int bagua_minmax_decompress_f32(const uint8_t *buf, int64_t buf_bytes, int64_t numel,
                                int64_t n_chunks, float *out, int accumulate);

/* out[0:numel] = sum over i < n_bufs of D(bufs[i]) (each a one-chunk buffer of numel elements),
 * accumulated in fp32 in order i = 0, 1, ...; divided by n_bufs when average != 0. */
int bagua_minmax_decompress_sum_f32(const uint8_t *const *bufs, int64_t n_bufs, int64_t buf_bytes,
                                    int64_t numel, float *out, int average);

/* Pipelining (compress a chunk in segments, send each as soon as it is quantised):
 * headers_f32 is compress_f32 without the payload: it writes each slot's min/max (NaN for chunks
 * that cannot be represented) and zero padding, and leaves the payload bytes as they are.
 * quantise_f32 writes the payload of the chunk-local elements [begin, end) of every chunk with the
 * parameters of the headers already in out (zeros for NaN chunks). headers_f32 followed by
 * quantise_f32 over ranges that cover every chunk gives exactly the bytes of compress_f32. */
int bagua_minmax_headers_f32(const float *x, int64_t numel, int64_t n_chunks, uint8_t *out,
                             int64_t out_bytes, int nonfinite_raise);
int bagua_minmax_quantise_f32(const float *x, int64_t numel, int64_t n_chunks, uint8_t *out,
                              int64_t out_bytes, int64_t begin, int64_t end);

/* decompress_f32 restricted to the chunk-local elements [begin, end) of every chunk. */
int bagua_minmax_decompress_range_f32(const uint8_t *buf, int64_t buf_bytes, int64_t numel,
                                      int64_t n_chunks, float *out, int accumulate, int64_t begin,
                                      int64_t end);

/* decompress_sum_f32 restricted to out[begin:end] (the other elements of out are not touched). */
int bagua_minmax_decompress_sum_range_f32(const uint8_t *const *bufs, int64_t n_bufs, int64_t buf_bytes,
                                          int64_t numel, float *out, int average, int64_t begin,
                                          int64_t end);

/* decompress_sum_range_f32 that also merges the min, max and NaN flag of the values it writes into
 * stats (see the fused kernels below). */
int bagua_minmax_decompress_sum_stats_f32(const uint8_t *const *bufs, int64_t n_bufs, int64_t buf_bytes,
                                          int64_t numel, float *out, int average, int64_t begin,
                                          int64_t end, float *stats);

/* Fused kernels (minmax_uint8_fused.c): one pass over memory where the plain kernels take two.
 * stats is float[3], the running {min, max, NaN seen (0 or 1)} of the values a kernel has written;
 * start it at {INFINITY, -INFINITY, 0}; kernels merge into it (the order does not matter).
 *
 * headers_from_stats_f32 writes the header and zero padding of a one-chunk buffer of numel elements
 * whose stats were merged over all of them: exactly what headers_f32(x, numel, 1, ...) writes.
 * quantise_decompress_f32 is quantise_f32 of a one-chunk buffer that also writes, for the elements i
 * of [begin, end) with i < deq_numel, deq[i] = the value decompress_f32 of the finished buffer gives. */
int bagua_minmax_headers_from_stats_f32(const float *stats, int64_t numel, uint8_t *out, int64_t out_bytes,
                                        int nonfinite_raise);
int bagua_minmax_quantise_decompress_f32(const float *x, int64_t numel, uint8_t *out, int64_t out_bytes,
                                         int64_t begin, int64_t end, float *deq, int64_t deq_numel);

#endif /* BAGUA_MINMAX_UINT8_H */
