// MinMaxUInt8's device building blocks for CUDA kernels that read or write its buffers: a public header of
// the bagua_codecs package (its include/ folder, bagua_codecs.include_dir()). The codec's own CUDA kernels
// (minmax_uint8_cuda.cu) are built on them, and so is a kernel of another package that fuses its own steps
// with this codec (low_precision_decentralized_cuda.cu): such a kernel set names the package in its
// kernels.toml, `uses = ["bagua_codecs"]`, and includes this header by name. Header only: everything here
// has internal linkage, so a CUDA file built outside bagua's library may include it too.
// Formula, layout and NaN rules as in minmax_uint8_blocks.h. Every step is one IEEE fp32 operation
// (__f*_rn; build with -fmad=false): the bytes equal the CPU kernels and the torch fallback.
#ifndef BAGUA_MINMAX_UINT8_CUDA_BLOCKS_CUH
#define BAGUA_MINMAX_UINT8_CUDA_BLOCKS_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define BAGUA_MINMAX_ERR_NONFINITE -2
#define BAGUA_MINMAX_ERR_OVERFLOW -3
#define BAGUA_MINMAX_THREADS 256
#define BAGUA_MINMAX_EPS 1e-7f

namespace {

__host__ __device__ inline int64_t chunk_numel_of(int64_t numel, int64_t n_chunks) {
    return numel == 0 ? 0 : (numel + n_chunks - 1) / n_chunks;
}

__host__ __device__ inline int64_t slot_bytes(int64_t chunk_numel) {
    return 8 + ((chunk_numel + 7) / 8) * 8;
}

__host__ __device__ inline int64_t compressed_size(int64_t numel, int64_t n_chunks) {
    return n_chunks * slot_bytes(chunk_numel_of(numel, n_chunks));
}

__device__ inline void chunk_range(int64_t numel, int64_t chunk_numel, int64_t c, int64_t *b,
                                   int64_t *e) {
    int64_t lo = c * chunk_numel, hi = lo + chunk_numel;
    *b = lo < numel ? lo : numel;
    *e = hi < numel ? hi : numel;
}

struct Params {
    float scale, upper, lower;
};

// 0, or the error code of a chunk that cannot be represented.
__device__ inline int make_params(float mn, float mx, Params *p) {
    if (!isfinite(mn) || !isfinite(mx)) return BAGUA_MINMAX_ERR_NONFINITE;
    float range = __fadd_rn(__fsub_rn(mx, mn), BAGUA_MINMAX_EPS);
    p->scale = __fdiv_rn(255.0f, range);
    p->upper = rintf(__fmul_rn(mx, p->scale));
    p->lower = __fsub_rn(p->upper, 255.0f);
    float lowest = rintf(__fmul_rn(mn, p->scale));
    if (!isfinite(range) || !isfinite(p->upper) || !isfinite(lowest) || !isfinite(p->lower))
        return BAGUA_MINMAX_ERR_OVERFLOW;
    return 0;
}

__device__ inline Params read_params(const uint8_t *slot) {
    const float *mm = reinterpret_cast<const float *>(slot);  // slots are 8-byte aligned
    Params p;
    if (make_params(mm[0], mm[1], &p) != 0) p.scale = p.upper = p.lower = nanf("");
    return p;
}

__device__ inline float dequantise(uint8_t q, const Params &p) {
    return __fdiv_rn(__fadd_rn((float)q, p.lower), p.scale);
}

inline int blocks_for(int64_t n, int cap) {
    int64_t blocks = (n + BAGUA_MINMAX_THREADS * 4 - 1) / (BAGUA_MINMAX_THREADS * 4);
    return (int)(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

}  // namespace

#endif  // BAGUA_MINMAX_UINT8_CUDA_BLOCKS_CUH
