/*
 * The thread pool of the CPU kernels: bagua_native_set_threads(n) lets every kernel split large
 * tensors over n pthreads (worker t of n handles the t-th piece of the work).
 */
#include "bagua_native.h"
#include "parallel.h"

#include <pthread.h>

static int g_threads = 1;

typedef struct {
    task_fn fn;
    void *ctx;
    int t, n;
} task_arg_t;

static void *task_entry(void *arg) {
    task_arg_t *a = (task_arg_t *)arg;
    a->fn(a->ctx, a->t, a->n);
    return NULL;
}

void run_parallel(int64_t numel, task_fn fn, void *ctx) {
    int n = g_threads;
    if (numel < MIN_PARALLEL_NUMEL || n <= 1) {
        fn(ctx, 0, 1);
        return;
    }
    pthread_t ids[MAX_THREADS];
    task_arg_t args[MAX_THREADS];
    int started = 0;
    for (int t = 1; t < n; t++) {
        args[t] = (task_arg_t){fn, ctx, t, n};
        if (pthread_create(&ids[t], NULL, task_entry, &args[t]) != 0) break;
        started = t;
    }
    /* threads that could not start: the caller does their share */
    for (int t = started + 1; t < n; t++) fn(ctx, t, n);
    fn(ctx, 0, n);
    for (int t = 1; t <= started; t++) pthread_join(ids[t], NULL);
}

void piece(int64_t begin, int64_t end, int t, int n, int64_t *b, int64_t *e) {
    int64_t len = end - begin, step = (len + n - 1) / n;
    int64_t lo = begin + step * t, hi = lo + step;
    *b = lo < end ? lo : end;
    *e = hi < end ? hi : end;
}

int bagua_native_set_threads(int n_threads) {
    if (n_threads < 1 || n_threads > MAX_THREADS) return BAGUA_NATIVE_ERR_ARGUMENT;
    g_threads = n_threads;
    return BAGUA_NATIVE_OK;
}

int bagua_native_get_threads(void) { return g_threads; }
