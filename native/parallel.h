/*
 * Helpers every kernel file of the CPU library shares: instruction-set dispatch and the thread pool
 * (parallel.c). Not part of the library's API and not in the cffi cdef; the library is built with
 * -fvisibility=hidden, so these names stay inside it.
 */
#ifndef BAGUA_PARALLEL_H
#define BAGUA_PARALLEL_H

#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BAGUA_HAVE_SSE 1
#if defined(__GNUC__) && defined(__x86_64__)
#define BAGUA_AVX2_DISPATCH 1
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
/* loops the compiler vectorises, compiled for several instruction sets and picked at load time */
#define BAGUA_CLONES __attribute__((target_clones("avx2", "sse4.1", "default")))
#endif
#endif
#ifndef BAGUA_CLONES
#define BAGUA_CLONES
#endif

#define MIN_PARALLEL_NUMEL (1 << 18)
#define MAX_THREADS 64

/* fn(ctx, t, n) for t < n on up to the configured number of threads (one when numel is small). */
typedef void (*task_fn)(void *ctx, int t, int n);
void run_parallel(int64_t numel, task_fn fn, void *ctx);
/* The t-th of n equal pieces of [begin, end). */
void piece(int64_t begin, int64_t end, int t, int n, int64_t *b, int64_t *e);

#endif /* BAGUA_PARALLEL_H */
