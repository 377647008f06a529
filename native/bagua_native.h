/*
 * The shared part of the CPU kernel library: status codes every kernel returns and the number of
 * worker threads the kernels may use. This header is part of the library's cffi cdef
 * (native/build_cpu.py); the kernels' own APIs are in minmax_uint8.h (the MinMaxUInt8 codec),
 * low_precision_decentralized.h, adam_update.h and sparseloco.h.
 */
#ifndef BAGUA_NATIVE_H
#define BAGUA_NATIVE_H

#define BAGUA_NATIVE_OK 0
#define BAGUA_NATIVE_ERR_SIZE -1
#define BAGUA_NATIVE_ERR_ARGUMENT -4

/* Number of worker threads the kernels may use (1 = the calling thread only; at most 64). */
int bagua_native_set_threads(int n_threads);
int bagua_native_get_threads(void);

#endif /* BAGUA_NATIVE_H */
