// low_precision_decentralized's fused steps for CUDA tensors (declared in
// low_precision_decentralized_cuda.h), reading MinMaxUInt8 buffers. Built with -fmad=false and
// without --use_fast_math: every step is one IEEE fp32 operation, so the values equal the CPU kernels
// (low_precision_decentralized.c) and the torch reference.
#include "bagua_cuda.h"
#include "low_precision_decentralized_cuda.h"
#include "minmax_uint8_cuda_blocks.cuh"  // bagua_codecs' public header (kernels.toml: uses = ["bagua_codecs"])

namespace {

// low_precision_decentralized: torch's fp32 order of x + l / 3 + r / 3 - w * (5 / 3)
__global__ void lpd_diff(const float *x, const float *w, const float *l, const float *r, int64_t numel,
                         float *z) {
    const float five_thirds = (float)(5.0 / 3.0);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < numel;
         i += (int64_t)gridDim.x * blockDim.x) {
        float a = __fadd_rn(x[i], __fdiv_rn(l[i], 3.0f));
        a = __fadd_rn(a, __fdiv_rn(r[i], 3.0f));
        z[i] = __fsub_rn(a, __fmul_rn(w[i], five_thirds));
    }
}

__global__ void lpd_update(const uint8_t *q_left, const uint8_t *q_right, const uint8_t *q_own,
                           int64_t begin, int64_t end, float *w, float *l, float *r, float *x) {
    Params pl = read_params(q_left), pr = read_params(q_right), po = read_params(q_own);
    for (int64_t i = begin + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < end;
         i += (int64_t)gridDim.x * blockDim.x) {
        l[i] = __fadd_rn(l[i], dequantise(q_left[8 + i], pl));
        r[i] = __fadd_rn(r[i], dequantise(q_right[8 + i], pr));
        float v = __fadd_rn(w[i], dequantise(q_own[8 + i], po));
        w[i] = v;
        if (x != nullptr) x[i] = v;
    }
}

}  // namespace

extern "C" {

int bagua_cuda_lpd_diff_f32(const float *x, const float *w, const float *l, const float *r,
                            int64_t numel, float *z, void *stream) {
    if (numel < 0) return BAGUA_CUDA_ERR_ARGUMENT;
    if (numel == 0) return 0;
    lpd_diff<<<blocks_for(numel, 4096), BAGUA_MINMAX_THREADS, 0, (cudaStream_t)stream>>>(x, w, l, r, numel,
                                                                                        z);
    return (int)cudaGetLastError();
}

int bagua_cuda_lpd_update_f32(const uint8_t *q_left, const uint8_t *q_right, const uint8_t *q_own,
                              int64_t buf_bytes, int64_t numel, float *w, float *l, float *r, float *x,
                              int64_t begin, int64_t end, void *stream) {
    if (numel < 0 || begin < 0 || end < begin) return BAGUA_CUDA_ERR_ARGUMENT;
    if (buf_bytes != compressed_size(numel, 1)) return BAGUA_CUDA_ERR_SIZE;
    end = end < numel ? end : numel;
    if (end <= begin) return 0;
    lpd_update<<<blocks_for(end - begin, 4096), BAGUA_MINMAX_THREADS, 0, (cudaStream_t)stream>>>(
        q_left, q_right, q_own, begin, end, w, l, r, x);
    return (int)cudaGetLastError();
}

}  // extern "C"
