// MinMaxUInt8 compression kernels for CUDA; formula, layout and NaN rules as in minmax_uint8.h.
// Build with -fmad=false and without --use_fast_math: every step must be one IEEE fp32 operation
// (no FMA contraction, rintf is round-half-to-even, '/' is correctly rounded) so the bytes equal
// the CPU kernels and the torch fallback.
#include "bagua_cuda.h"
#include "minmax_uint8_cuda.h"
#include "minmax_uint8_cuda_blocks.cuh"

#define MAX_BLOCKS_PER_CHUNK 128

namespace {

// grid (blocks_per_chunk, n_chunks): partial min / max / NaN flag of each block's share of a chunk.
__global__ void minmax_partial(const float *x, int64_t numel, int64_t chunk_numel, float *part_mn,
                               float *part_mx, int *part_bad) {
    __shared__ float s_mn[BAGUA_MINMAX_THREADS], s_mx[BAGUA_MINMAX_THREADS];
    __shared__ int s_bad[BAGUA_MINMAX_THREADS];
    int64_t b, e;
    chunk_range(numel, chunk_numel, blockIdx.y, &b, &e);
    float mn = INFINITY, mx = -INFINITY;
    int bad = 0;
    const int64_t stride = (int64_t)gridDim.x * BAGUA_MINMAX_THREADS;
    int64_t i = b + (int64_t)blockIdx.x * BAGUA_MINMAX_THREADS + threadIdx.x;
    for (; i + 3 * stride < e; i += 4 * stride) {  // four loads in flight per thread
        float v0 = x[i], v1 = x[i + stride], v2 = x[i + 2 * stride], v3 = x[i + 3 * stride];
        bad |= isnan(v0) | isnan(v1) | isnan(v2) | isnan(v3);
        mn = fminf(fminf(mn, v0), fminf(v1, fminf(v2, v3)));
        mx = fmaxf(fmaxf(mx, v0), fmaxf(v1, fmaxf(v2, v3)));
    }
    for (; i < e; i += stride) {
        float v = x[i];
        bad |= isnan(v);
        mn = fminf(mn, v);
        mx = fmaxf(mx, v);
    }
    s_mn[threadIdx.x] = mn;
    s_mx[threadIdx.x] = mx;
    s_bad[threadIdx.x] = bad;
    __syncthreads();
    for (int s = BAGUA_MINMAX_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            s_mn[threadIdx.x] = fminf(s_mn[threadIdx.x], s_mn[threadIdx.x + s]);
            s_mx[threadIdx.x] = fmaxf(s_mx[threadIdx.x], s_mx[threadIdx.x + s]);
            s_bad[threadIdx.x] |= s_bad[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        int64_t k = (int64_t)blockIdx.y * gridDim.x + blockIdx.x;
        part_mn[k] = s_mn[0];
        part_mx[k] = s_mx[0];
        part_bad[k] = s_bad[0];
    }
}

// one thread per chunk: combines the partials, writes the header and the chunk's status.
__global__ void minmax_finalize(int64_t numel, int64_t n_chunks, int blocks_per_chunk,
                                const float *part_mn, const float *part_mx, const int *part_bad,
                                uint8_t *out, int *status) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_chunks) return;
    int64_t chunk_numel = chunk_numel_of(numel, n_chunks), b, e;
    chunk_range(numel, chunk_numel, c, &b, &e);
    float mn = INFINITY, mx = -INFINITY;
    int bad = 0;
    for (int k = 0; k < blocks_per_chunk; k++) {
        mn = fminf(mn, part_mn[c * blocks_per_chunk + k]);
        mx = fmaxf(mx, part_mx[c * blocks_per_chunk + k]);
        bad |= part_bad[c * blocks_per_chunk + k];
    }
    if (e == b) mn = mx = 0.0f;
    mn = __fadd_rn(mn, 0.0f);  // -0 -> +0: header bytes independent of the reduction order
    mx = __fadd_rn(mx, 0.0f);
    Params p;
    int st = bad ? BAGUA_MINMAX_ERR_NONFINITE : make_params(mn, mx, &p);
    if (st != 0) mn = mx = nanf("");
    float *header = reinterpret_cast<float *>(out + c * slot_bytes(chunk_numel));
    header[0] = mn;
    header[1] = mx;
    status[c] = st;
}

__device__ inline uint8_t quantise_one(float x, const Params &p) {
    float v = rintf(__fmul_rn(x, p.scale));
    v = v < p.upper ? v : p.upper;
    v = __fsub_rn(v, p.lower);
    v = v > 0.0f ? v : 0.0f;
    v = v < 255.0f ? v : 255.0f;
    return (uint8_t)(int)v;
}

// grid (blocks, n_chunks): payload bytes of each chunk, zero in the padding and in NaN chunks. Each
// thread writes four bytes at once (payloads are 8-byte aligned and a multiple of 8 bytes long).
__global__ void quantise(const float *x, int64_t numel, int64_t chunk_numel, uint8_t *out) {
    int64_t b, e;
    chunk_range(numel, chunk_numel, blockIdx.y, &b, &e);
    int64_t slot = slot_bytes(chunk_numel), n = e - b;
    uint8_t *chunk = out + blockIdx.y * slot;
    Params p = read_params(chunk);
    bool ok = !isnan(p.scale);
    const float *src = x + b;
    uchar4 *payload = reinterpret_cast<uchar4 *>(chunk + 8);
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < (slot - 8) / 4;
         j += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = 4 * j;
        uchar4 q = make_uchar4(0, 0, 0, 0);
        if (ok && i + 3 < n) {
            q = make_uchar4(quantise_one(src[i], p), quantise_one(src[i + 1], p),
                            quantise_one(src[i + 2], p), quantise_one(src[i + 3], p));
        } else if (ok && i < n) {
            q.x = quantise_one(src[i], p);
            if (i + 1 < n) q.y = quantise_one(src[i + 1], p);
            if (i + 2 < n) q.z = quantise_one(src[i + 2], p);
        }
        payload[j] = q;
    }
}

// grid (blocks, n_chunks): one element per thread, so the fp32 stores coalesce (four bytes read per
// thread and four strided fp32 stores measured 1.9x slower on an H100).
__global__ void decompress(const uint8_t *buf, int64_t numel, int64_t chunk_numel, float *out,
                           int accumulate) {
    int64_t b, e;
    chunk_range(numel, chunk_numel, blockIdx.y, &b, &e);
    const uint8_t *chunk = buf + blockIdx.y * slot_bytes(chunk_numel);
    Params p = read_params(chunk);
    for (int64_t i = b + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < e;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = dequantise(chunk[8 + i - b], p);
        out[i] = accumulate ? __fadd_rn(out[i], v) : v;
    }
}

__global__ void decompress_sum(const uint8_t *bufs, int64_t n_bufs, int64_t buf_bytes,
                               int64_t numel, float *out, int average) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < numel;
         i += (int64_t)gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int64_t k = 0; k < n_bufs; k++) {
            const uint8_t *slot = bufs + k * buf_bytes;
            float v = dequantise(slot[8 + i], read_params(slot));
            acc = k == 0 ? v : __fadd_rn(acc, v);
        }
        out[i] = average ? __fdiv_rn(acc, (float)n_bufs) : acc;
    }
}

}  // namespace

extern "C" {

static int blocks_per_chunk(int64_t chunk_numel) {
    int64_t b = (chunk_numel + BAGUA_MINMAX_THREADS * 8 - 1) / (BAGUA_MINMAX_THREADS * 8);
    return (int)(b < 1 ? 1 : (b > MAX_BLOCKS_PER_CHUNK ? MAX_BLOCKS_PER_CHUNK : b));
}

int64_t bagua_cuda_minmax_workspace_bytes(int64_t numel, int64_t n_chunks) {
    if (numel < 0 || n_chunks <= 0) return -1;
    return n_chunks * blocks_per_chunk(chunk_numel_of(numel, n_chunks)) * 12;
}

int bagua_cuda_minmax_compress_f32(const float *x, int64_t numel, int64_t n_chunks, uint8_t *out,
                                   int64_t out_bytes, void *workspace, int *status, void *stream) {
    if (numel < 0 || n_chunks <= 0 || n_chunks > 65535) return BAGUA_CUDA_ERR_ARGUMENT;
    if (out_bytes != compressed_size(numel, n_chunks)) return BAGUA_CUDA_ERR_SIZE;
    cudaStream_t s = (cudaStream_t)stream;
    int64_t chunk_numel = chunk_numel_of(numel, n_chunks);
    int bpc = blocks_per_chunk(chunk_numel);
    float *part_mn = (float *)workspace, *part_mx = part_mn + n_chunks * bpc;
    int *part_bad = (int *)(part_mx + n_chunks * bpc);
    minmax_partial<<<dim3(bpc, (unsigned)n_chunks), BAGUA_MINMAX_THREADS, 0, s>>>(x, numel, chunk_numel,
                                                                                  part_mn, part_mx, part_bad);
    minmax_finalize<<<(unsigned)((n_chunks + 127) / 128), 128, 0, s>>>(
        numel, n_chunks, bpc, part_mn, part_mx, part_bad, out, status);
    int qb = blocks_for(slot_bytes(chunk_numel) / 4, 1024);
    quantise<<<dim3(qb, (unsigned)n_chunks), BAGUA_MINMAX_THREADS, 0, s>>>(x, numel, chunk_numel, out);
    return (int)cudaGetLastError();
}

int bagua_cuda_minmax_decompress_f32(const uint8_t *buf, int64_t buf_bytes, int64_t numel,
                                     int64_t n_chunks, float *out, int accumulate, void *stream) {
    if (numel < 0 || n_chunks <= 0 || n_chunks > 65535) return BAGUA_CUDA_ERR_ARGUMENT;
    if (buf_bytes != compressed_size(numel, n_chunks)) return BAGUA_CUDA_ERR_SIZE;
    int64_t chunk_numel = chunk_numel_of(numel, n_chunks);
    int blocks = blocks_for(chunk_numel, 1024);
    decompress<<<dim3(blocks, (unsigned)n_chunks), BAGUA_MINMAX_THREADS, 0, (cudaStream_t)stream>>>(
        buf, numel, chunk_numel, out, accumulate);
    return (int)cudaGetLastError();
}

int bagua_cuda_minmax_decompress_sum_f32(const uint8_t *bufs, int64_t n_bufs, int64_t buf_bytes,
                                         int64_t numel, float *out, int average, void *stream) {
    if (numel < 0 || n_bufs <= 0) return BAGUA_CUDA_ERR_ARGUMENT;
    if (buf_bytes != compressed_size(numel, 1)) return BAGUA_CUDA_ERR_SIZE;
    if (numel == 0) return 0;
    decompress_sum<<<blocks_for(numel, 4096), BAGUA_MINMAX_THREADS, 0, (cudaStream_t)stream>>>(
        bufs, n_bufs, buf_bytes, numel, out, average);
    return (int)cudaGetLastError();
}

}  // extern "C"
