// sparseloco's message codec for CUDA tensors (declared in sparseloco_cuda.h). The C kernels' rules and bits
// (sparseloco_select.c, sparseloco_index.c, sparseloco_quantise.c, sparseloco_message.c): the per-value
// arithmetic is the shared sparseloco_arith.h (built with -fmad=false, no --use_fast_math: each step one IEEE
// fp32 operation, divisions true ones); the selection finds each chunk's k'-th largest magnitude by a radix
// select on its bits (exact, whatever the values) and takes the entries above it and its ties of lowest
// index; decoding writes or adds each chunk's entries in order on one thread, so equal positions (from any
// bytes) meet in the C kernels' order.
#include <cuda_runtime.h>

#include "bagua_cuda.h"
#include "sparseloco_arith.h"
#include "sparseloco_cuda.h"

namespace {

constexpr int THREADS = 256;

struct Plan {
    const int64_t *start, *length, *entry_at, *low_at, *upper_at, *entry_chunk;
    int64_t chunks, entries, topk, upper_end, field_bytes;
    int bits;
    int64_t index_at, values_at, nbytes;  // the message's fields (codec.py's layout)
};

Plan make_plan(const int64_t *plan, int64_t chunks, int64_t entries, int64_t topk, int64_t upper_end,
               int bits) {
    Plan p;
    p.start = plan;
    p.length = plan + chunks;
    p.entry_at = plan + 2 * chunks;
    p.low_at = plan + 3 * chunks + 1;
    p.upper_at = plan + 4 * chunks + 1;
    p.entry_chunk = plan + 5 * chunks + 1;
    p.chunks = chunks;
    p.entries = entries;
    p.topk = topk;
    p.upper_end = upper_end;
    p.field_bytes = (upper_end + 7) / 8;
    p.bits = bits;
    if (bits == 32) {
        p.index_at = 4 * entries;
        p.values_at = 0;
        p.nbytes = 4 * entries + p.field_bytes;
    } else {
        p.index_at = 6 * chunks;
        p.values_at = p.index_at + p.field_bytes;
        p.nbytes = p.values_at + (entries * bits + 7) / 8;
    }
    return p;
}

bool valid(int64_t chunks, int64_t entries, int64_t topk, int64_t upper_end, int bits) {
    return chunks >= 0 && entries >= 0 && topk >= 1 && upper_end >= 0 &&
           (bits == 2 || bits == 4 || bits == 8 || bits == 32);
}

int grid_for(int64_t n) {
    int64_t blocks = (n + THREADS - 1) / THREADS;
    return (int)(blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks));
}

__device__ uint64_t load64(const uint8_t *buf, int64_t nbytes, int64_t i) {
    uint64_t w = 0;
    for (int b = 0; b < 8 && i + b < nbytes; b++) w |= (uint64_t)buf[i + b] << (8 * b);
    return w;
}

__device__ uint32_t read_bits(const uint8_t *buf, int64_t nbytes, int64_t at, int n) {
    if (n == 0) return 0;
    return (uint32_t)((load64(buf, nbytes, at >> 3) >> (at & 7)) & ((1ull << n) - 1));
}

__device__ void store_float(uint8_t *out, float v) {
    uint32_t u = __float_as_uint(v);
    for (int b = 0; b < 4; b++) out[b] = (uint8_t)(u >> (8 * b));
}

__device__ float load_float(const uint8_t *buf) {
    uint32_t u = 0;
    for (int b = 0; b < 4; b++) u |= (uint32_t)buf[b] << (8 * b);
    return __uint_as_float(u);
}

__global__ void feed(float *e, const float *delta, float beta, int64_t numel) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < numel;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = e[i];
        if (beta != 1.0f) v = __fmul_rn(v, beta);
        e[i] = __fadd_rn(v, delta[i]);
    }
}

// One block per chunk: the k'-th largest magnitude T (radix select, 8 bits a round, from the top), the
// entries above it and the first of its ties in index order (a scan of each thread's segment), then each
// entry's code (or fp32 value) and the error feedback.
__global__ void select_chunks(float *e, Plan p, int feedback, int32_t *columns, uint8_t *codes,
                              uint8_t *out) {
    __shared__ unsigned int histogram[256];
    __shared__ unsigned int s_largest, s_prefix, s_remaining;
    __shared__ int s_above[THREADS], s_ties[THREADS];
    const int64_t c = blockIdx.x;
    const int tid = threadIdx.x;
    const int64_t m = p.length[c], k = sl_sent(m, p.topk), at = p.entry_at[c];
    float *x = e + p.start[c];
    if (tid == 0) s_largest = 0;
    uint32_t prefix = 0, mask = 0, remaining = (uint32_t)k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = tid; b < 256; b += blockDim.x) histogram[b] = 0;
        __syncthreads();
        uint32_t largest = 0;
        for (int64_t i = tid; i < m; i += blockDim.x) {
            uint32_t u = sl_magnitude(x[i]);
            largest = u > largest ? u : largest;
            if ((u & mask) == prefix) atomicAdd(&histogram[(u >> shift) & 255], 1u);
        }
        if (shift == 24) atomicMax(&s_largest, largest);
        __syncthreads();
        if (tid == 0) {
            uint32_t above = 0;
            int b = 255;
            for (; b > 0; b--) {
                if (above + histogram[b] >= remaining) break;
                above += histogram[b];
            }
            s_prefix = prefix | ((uint32_t)b << shift);
            s_remaining = remaining - above;
        }
        __syncthreads();
        prefix = s_prefix;
        remaining = s_remaining;
        mask |= 255u << shift;
    }
    const uint32_t threshold = prefix, ties = remaining;  // T, and how many of its ties are sent
    const int64_t segment = (m + blockDim.x - 1) / blockDim.x, begin = tid * segment;
    const int64_t end = begin + segment < m ? begin + segment : m;
    int above = 0, tied = 0;
    for (int64_t i = begin; i < end; i++) {
        uint32_t u = sl_magnitude(x[i]);
        above += u > threshold;
        tied += u == threshold;
    }
    s_above[tid] = above;
    s_ties[tid] = tied;
    __syncthreads();
    if (tid == 0) {  // exclusive prefix sums over the threads' segments, in index order
        int a = 0, t = 0;
        for (int i = 0; i < (int)blockDim.x; i++) {
            int na = s_above[i], nt = s_ties[i];
            s_above[i] = a;
            s_ties[i] = t;
            a += na;
            t += nt;
        }
    }
    __syncthreads();
    int tied_before = s_ties[tid];
    int64_t out_at = s_above[tid] + (tied_before < (int)ties ? tied_before : (int)ties);
    for (int64_t i = begin; i < end; i++) {
        uint32_t u = sl_magnitude(x[i]);
        if (u > threshold) {
            columns[at + out_at++] = (int32_t)i;
        } else if (u == threshold) {
            if (tied_before < (int)ties) columns[at + out_at++] = (int32_t)i;
            tied_before++;
        }
    }
    __syncthreads();
    const float hi = sl_float(s_largest);
    const uint32_t q = sl_floor_q(hi, sl_float(threshold));
    const float floor_ = sl_floor(hi, q);
    if (p.bits != 32 && tid == 0) {
        store_float(out + 4 * c, hi);
        out[4 * p.chunks + 2 * c] = (uint8_t)(q & 255);
        out[4 * p.chunks + 2 * c + 1] = (uint8_t)(q >> 8);
    }
    for (int64_t j = tid; j < k; j += blockDim.x) {
        int32_t column = columns[at + j];
        float v = x[column];
        if (p.bits == 32) {
            store_float(out + 4 * (at + j), v);
            if (feedback) x[column] = __fsub_rn(v, v);
            continue;
        }
        uint8_t code = sl_code(v, hi, floor_, p.bits);
        codes[at + j] = code;
        if (feedback) x[column] = __fsub_rn(v, sl_value(code, hi, floor_, p.bits));
    }
}

// The index field's bits of each entry, ORed into 32-bit words (zeroed).
__global__ void index_bits(const int32_t *columns, Plan p, uint32_t *words) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.entries;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = p.entry_chunk[i], m = p.length[c], k = sl_sent(m, p.topk);
        if (k >= m) continue;
        int l = sl_low_bits(m, k);
        int64_t j = i - p.entry_at[c];
        uint32_t column = (uint32_t)columns[i];
        if (l > 0) {
            int64_t low = p.low_at[c] + j * l;
            uint64_t v = (uint64_t)(column & ((1u << l) - 1)) << (low & 31);
            atomicOr(&words[low >> 5], (uint32_t)v);
            if (v >> 32) atomicOr(&words[(low >> 5) + 1], (uint32_t)(v >> 32));
        }
        int64_t bit = p.upper_at[c] + (column >> l) + j;
        atomicOr(&words[bit >> 5], 1u << (bit & 31));
    }
}

__global__ void words_to_bytes(const uint32_t *words, int64_t n, uint8_t *field) {
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < n;
         b += (int64_t)gridDim.x * blockDim.x)
        field[b] = (uint8_t)(words[b >> 2] >> (8 * (b & 3)));
}

__global__ void pack(const uint8_t *codes, int64_t entries, int bits, uint8_t *out) {
    int per = 8 / bits;
    int64_t bytes = (entries * bits + 7) / 8;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < bytes;
         b += (int64_t)gridDim.x * blockDim.x) {
        uint32_t byte = 0;
        for (int i = 0; i < per && b * per + i < entries; i++)
            byte |= (uint32_t)codes[b * per + i] << (bits * i);
        out[b] = (uint8_t)byte;
    }
}

// One thread per (message, chunk): the chunk's entries' positions and values (sparseloco_index.c's reading
// rule, inside the chunk whatever the bytes).
__global__ void read_entries(const uint8_t *bufs, int64_t n, Plan p, int64_t *positions, float *values) {
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n * p.chunks;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = t / p.chunks, c = t % p.chunks;
        const uint8_t *buf = bufs + r * p.nbytes, *field = buf + p.index_at;
        const int64_t m = p.length[c], k = sl_sent(m, p.topk), at = p.entry_at[c], base = r * p.entries + at;
        float hi = 0.0f, floor_ = 0.0f;
        if (p.bits != 32) {
            hi = load_float(buf + 4 * c);
            uint32_t q = buf[4 * p.chunks + 2 * c] | ((uint32_t)buf[4 * p.chunks + 2 * c + 1] << 8);
            floor_ = sl_floor(hi, q);
        }
        const int l = k < m ? sl_low_bits(m, k) : 0;
        const int64_t end = p.upper_end, first = p.upper_at[c], low = p.low_at[c];
        int64_t next = first, word_at = first;
        uint64_t word = 0;
        bool at_end = false;
        for (int64_t j = 0; j < k; j++) {
            int64_t column = j;
            if (k < m) {
                int64_t bit = end;
                if (!at_end) {
                    while (word == 0 && next < end) {
                        word = load64(field, p.field_bytes, next >> 3) >> (next & 7);
                        word_at = next;
                        next = ((next >> 3) << 3) + 64;
                    }
                    if (word) {
                        bit = word_at + __ffsll((long long)word) - 1;
                        word &= word - 1;
                    }
                    if (bit >= end) {
                        bit = end;
                        at_end = true;
                    }
                }
                column = ((bit - first - j) << l) | read_bits(field, p.field_bytes, low + j * l, l);
                column = column < m - 1 ? column : m - 1;
            }
            positions[base + j] = p.start[c] + column;
            if (p.bits == 32) {
                values[base + j] = load_float(buf + 4 * (at + j));
            } else {
                int64_t i = at + j;
                uint32_t code =
                    (buf[p.values_at + ((i * p.bits) >> 3)] >> ((i * p.bits) & 7)) & ((1u << p.bits) - 1);
                values[base + j] = sl_value(code, hi, floor_, p.bits);
            }
        }
    }
}

// One block per chunk: zeros, then (thread 0, in rank order and entry order) each message's values written or
// added, then (average) divided by n.
__global__ void scatter(const int64_t *positions, const float *values, int64_t n, Plan p, int average,
                        float *out) {
    const int64_t c = blockIdx.x, m = p.length[c], k = sl_sent(m, p.topk), at = p.entry_at[c];
    float *x = out + p.start[c];
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) x[i] = 0.0f;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int64_t r = 0; r < n; r++) {
            for (int64_t j = 0; j < k; j++) {
                int64_t i = r * p.entries + at + j;
                if (average) {
                    out[positions[i]] = __fadd_rn(out[positions[i]], values[i]);
                } else {
                    out[positions[i]] = values[i];
                }
            }
        }
    }
    __syncthreads();
    if (average) {
        const float divisor = (float)n;
        for (int64_t i = threadIdx.x; i < m; i += blockDim.x) x[i] = __fdiv_rn(x[i], divisor);
    }
}

}  // namespace

extern "C" {

int bagua_cuda_sparseloco_encode(float *e, const float *delta, float beta, int feedback, const int64_t *plan,
                                 int64_t chunks, int64_t entries, int64_t topk, int64_t numel,
                                 int64_t upper_end, int bits, int32_t *columns, uint8_t *codes,
                                 uint32_t *words, uint8_t *out, int64_t nbytes, void *stream) {
    if (!valid(chunks, entries, topk, upper_end, bits) || numel < 0) return BAGUA_CUDA_ERR_ARGUMENT;
    Plan p = make_plan(plan, chunks, entries, topk, upper_end, bits);
    if (nbytes != p.nbytes) return BAGUA_CUDA_ERR_SIZE;
    if (chunks == 0) return 0;
    cudaStream_t s = (cudaStream_t)stream;
    if (delta != nullptr && numel > 0) feed<<<grid_for(numel), THREADS, 0, s>>>(e, delta, beta, numel);
    select_chunks<<<(unsigned int)chunks, THREADS, 0, s>>>(e, p, feedback, columns, codes, out);
    cudaError_t err = cudaMemsetAsync(words, 0, sizeof(uint32_t) * (size_t)(upper_end / 32 + 2), s);
    if (err != cudaSuccess) return (int)err;
    index_bits<<<grid_for(entries), THREADS, 0, s>>>(columns, p, words);
    if (p.field_bytes > 0)
        words_to_bytes<<<grid_for(p.field_bytes), THREADS, 0, s>>>(words, p.field_bytes, out + p.index_at);
    if (bits != 32)
        pack<<<grid_for(nbytes - p.values_at), THREADS, 0, s>>>(codes, entries, bits, out + p.values_at);
    return (int)cudaGetLastError();
}

int bagua_cuda_sparseloco_entries(const uint8_t *bufs, int64_t nbytes, int64_t n, const int64_t *plan,
                                  int64_t chunks, int64_t entries, int64_t topk, int64_t upper_end, int bits,
                                  int64_t *positions, float *values, void *stream) {
    if (!valid(chunks, entries, topk, upper_end, bits) || n < 1) return BAGUA_CUDA_ERR_ARGUMENT;
    Plan p = make_plan(plan, chunks, entries, topk, upper_end, bits);
    if (nbytes != p.nbytes) return BAGUA_CUDA_ERR_SIZE;
    if (chunks == 0) return 0;
    read_entries<<<grid_for(n * chunks), THREADS, 0, (cudaStream_t)stream>>>(bufs, n, p, positions, values);
    return (int)cudaGetLastError();
}

int bagua_cuda_sparseloco_scatter(const int64_t *positions, const float *values, int64_t n,
                                  const int64_t *plan, int64_t chunks, int64_t entries, int64_t topk,
                                  int average, float *out, void *stream) {
    if (!valid(chunks, entries, topk, 0, 2) || n < 1 || (!average && n != 1)) return BAGUA_CUDA_ERR_ARGUMENT;
    Plan p = make_plan(plan, chunks, entries, topk, 0, 2);
    if (chunks == 0) return 0;
    scatter<<<(unsigned int)chunks, THREADS, 0, (cudaStream_t)stream>>>(positions, values, n, p, average,
                                                                        out);
    return (int)cudaGetLastError();
}

}  // extern "C"
