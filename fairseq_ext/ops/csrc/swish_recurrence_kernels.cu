// CUDA kernels of fairseq_ext::swish_recurrence (SwishRNN, Lei et al., Eq. 3), torch-free: the
// torch binding is swish_recurrence_cuda.cpp. Keeping torch headers out of this file lets CI
// compile-check it with nvcc on a CPU machine (the CPU torch wheel lacks the CUDA headers).
//
//   c[t] = Swish(c[t-k] - x1[t]) + x1[t],  Swish(z) = sigmoid(alpha z + beta) z,  c[t<0] = 0
//
// x1, c: (T, B, D) time-major; alpha, beta: (D). One thread per (pack, chain), a pack being kPack
// neighbouring columns (column = b*D + d; kPack = 2 for fp16/bf16 where it fits, else 1: Pack
// below): item = chain * packs + pack, so neighbouring threads read neighbouring addresses at
// every time step (coalesced); each thread loads kChunk steps of its chain at once, ahead of the
// recurrence (below). Arithmetic in the accumulation type acc_t: fp32 for fp32/fp16/bf16
// (with the fast __expf), fp64 for fp64 (with exp, so gradcheck holds at double precision). The
// backward mirrors the CPU one: reverse time, z and the sigmoid recomputed from the saved c,
// per-(chain, column) alpha/beta partial sums written to a (k * columns) acc_t buffer that the
// binding reduces (no atomics).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace fairseq_ext {
namespace {

// Accumulation type: double for double, float otherwise.
template <typename T>
struct Acc {
  using type = float;
};
template <>
struct Acc<double> {
  using type = double;
};

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_acc(typename Acc<T>::type v);
template <>
__device__ __forceinline__ float from_acc<float>(float v) { return v; }
template <>
__device__ __forceinline__ double from_acc<double>(double v) { return v; }
template <>
__device__ __forceinline__ __half from_acc<__half>(float v) { return __float2half(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + __expf(-v)); }
__device__ __forceinline__ double sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

// Steps of one chain whose loads are issued together, ahead of the recurrence that uses them.
// The loads do not depend on the recurrence, so a chunk waits about one memory latency instead
// of one per step: the chain is latency-bound otherwise (on an H200, forward + backward took
// about 1 ms at T = 512 whatever B and k; chunked, 0.16-0.56 ms in fp32: docs/benchmarks.md).
constexpr int kChunk = 16;

// kPack neighbouring columns of one chain, loaded and stored as one aligned word. A thread
// runs kPack columns: 1 for fp32/fp64; 2 for fp16/bf16 where the launcher finds the pointers
// aligned and the column count even (pack_for below), so that every access moves 4 bytes, as in
// fp32 (on an H200 the one-column bf16 kernels moved 2 bytes an access and ran slower than fp32
// for half the bytes: docs/benchmarks.md). The columns of a pack are independent chains with
// the same arithmetic as alone, so the results do not depend on kPack.
template <typename scalar_t, int kPack>
struct alignas(sizeof(scalar_t) * kPack) Pack {
  scalar_t v[kPack];
};

// alpha and beta of the kPack columns of a pack, in the accumulation type.
template <typename scalar_t, int kPack>
__device__ __forceinline__ void load_parameters(const scalar_t* __restrict__ alpha,
                                                const scalar_t* __restrict__ beta, int64_t pack,
                                                int64_t dim, typename Acc<scalar_t>::type* a,
                                                typename Acc<scalar_t>::type* b) {
#pragma unroll
  for (int j = 0; j < kPack; ++j) {
    a[j] = to_acc(alpha[(pack * kPack + j) % dim]);
    b[j] = to_acc(beta[(pack * kPack + j) % dim]);
  }
}

template <typename scalar_t, int kPack>
__global__ void forward_kernel(const scalar_t* __restrict__ x1, const scalar_t* __restrict__ alpha,
                               const scalar_t* __restrict__ beta, scalar_t* __restrict__ c,
                               int64_t length, int64_t columns, int64_t dim, int64_t k) {
  using acc_t = typename Acc<scalar_t>::type;
  using pack_t = Pack<scalar_t, kPack>;
  const int64_t packs = columns / kPack;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= packs * k) return;
  const int64_t pack = item % packs, chain = item / packs;
  const pack_t* __restrict__ x1_packs = reinterpret_cast<const pack_t*>(x1);
  pack_t* __restrict__ c_packs = reinterpret_cast<pack_t*>(c);
  acc_t a[kPack], b[kPack], previous[kPack] = {};
  load_parameters<scalar_t, kPack>(alpha, beta, pack, dim, a, b);
  const int64_t stride = k * packs;  // packs between two steps of the chain
  for (int64_t t0 = chain; t0 < length; t0 += kChunk * k) {
    const int64_t steps = (length - 1 - t0) / k + 1 < kChunk ? (length - 1 - t0) / k + 1 : kChunk;
    const int64_t base = t0 * packs + pack;
    pack_t x[kChunk];
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      if (i < steps) x[i] = x1_packs[base + i * stride];
    }
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      if (i < steps) {
        pack_t out;
#pragma unroll
        for (int j = 0; j < kPack; ++j) {
          const acc_t xv = to_acc(x[i].v[j]);
          const acc_t z = previous[j] - xv;
          previous[j] = sigmoid(a[j] * z + b[j]) * z + xv;
          out.v[j] = from_acc<scalar_t>(previous[j]);
        }
        c_packs[base + i * stride] = out;
      }
    }
  }
}

template <typename scalar_t, int kPack>
__global__ void backward_kernel(const scalar_t* __restrict__ grad_c,
                                const scalar_t* __restrict__ x1, const scalar_t* __restrict__ c,
                                const scalar_t* __restrict__ alpha,
                                const scalar_t* __restrict__ beta, scalar_t* __restrict__ grad_x1,
                                typename Acc<scalar_t>::type* __restrict__ grad_alpha_items,
                                typename Acc<scalar_t>::type* __restrict__ grad_beta_items,
                                int64_t length,
                                int64_t columns, int64_t dim, int64_t k) {
  using acc_t = typename Acc<scalar_t>::type;
  using pack_t = Pack<scalar_t, kPack>;
  const int64_t packs = columns / kPack;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= packs * k) return;
  const int64_t pack = item % packs, chain = item / packs;
  const pack_t* __restrict__ grad_c_packs = reinterpret_cast<const pack_t*>(grad_c);
  const pack_t* __restrict__ x1_packs = reinterpret_cast<const pack_t*>(x1);
  const pack_t* __restrict__ c_packs = reinterpret_cast<const pack_t*>(c);
  pack_t* __restrict__ grad_x1_packs = reinterpret_cast<pack_t*>(grad_x1);
  acc_t a[kPack], b[kPack], carry[kPack] = {}, d_alpha[kPack] = {}, d_beta[kPack] = {};
  load_parameters<scalar_t, kPack>(alpha, beta, pack, dim, a, b);
  const int64_t stride = k * packs;
  if (chain < length) {
    const int64_t last = chain + ((length - 1 - chain) / k) * k;
    // Reverse time, kChunk steps at a time: step i of a chunk is t = t0 - i k.
    for (int64_t t0 = last; t0 >= 0; t0 -= kChunk * k) {
      const int64_t steps = t0 / k + 1 < kChunk ? t0 / k + 1 : kChunk;
      const int64_t base = t0 * packs + pack;
      pack_t g[kChunk], x[kChunk], previous[kChunk];
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        if (i < steps) {
          g[i] = grad_c_packs[base - i * stride];
          x[i] = x1_packs[base - i * stride];
          if (t0 - i * k >= k) previous[i] = c_packs[base - (i + 1) * stride];
        }
      }
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        if (i < steps) {
          const bool first = t0 - i * k < k;  // c[t - k] = 0 before the start
          pack_t out;
#pragma unroll
          for (int j = 0; j < kPack; ++j) {
            const acc_t grad = to_acc(g[i].v[j]) + carry[j];
            const acc_t z = (first ? acc_t(0) : to_acc(previous[i].v[j])) - to_acc(x[i].v[j]);
            const acc_t s = sigmoid(a[j] * z + b[j]);
            const acc_t ds = s * (acc_t(1) - s);
            const acc_t dz = grad * (s + a[j] * z * ds);
            out.v[j] = from_acc<scalar_t>(grad - dz);
            d_alpha[j] += grad * z * z * ds;
            d_beta[j] += grad * z * ds;
            carry[j] = dz;
          }
          grad_x1_packs[base - i * stride] = out;
        }
      }
    }
  }
  // one partial sum per (chain, column): the (k, B, D) buffers the binding reduces
#pragma unroll
  for (int j = 0; j < kPack; ++j) {
    grad_alpha_items[chain * columns + pack * kPack + j] = d_alpha[j];
    grad_beta_items[chain * columns + pack * kPack + j] = d_beta[j];
  }
}

constexpr int kThreads = 256;

inline unsigned int blocks_for(int64_t items) {
  return static_cast<unsigned int>((items + kThreads - 1) / kThreads);
}

// The environment variable that sets one column per thread for every dtype ("1"), to compare
// with the packed 16-bit kernels (scripts/bench_swishrnn.py --part a); read at each launch.
constexpr const char* kColumnsPerThreadEnv = "FAIRSEQ_EXT_SWISH_COLUMNS_PER_THREAD";

// Columns per thread (kPack) of a launch: 2 for fp16/bf16 when the column count is even and
// every array read or written in packs starts on a pack boundary (a tensor view may start on
// any element), unless the environment sets 1; otherwise 1.
template <typename scalar_t>
int pack_for(int64_t columns, std::initializer_list<const void*> packed_arrays) {
  if constexpr (sizeof(scalar_t) != 2) {
    return 1;
  } else {
    const char* setting = std::getenv(kColumnsPerThreadEnv);
    if (setting != nullptr && std::strcmp(setting, "1") == 0) return 1;
    if (columns % 2 != 0) return 1;
    for (const void* array : packed_arrays) {
      if (reinterpret_cast<std::uintptr_t>(array) % sizeof(Pack<scalar_t, 2>) != 0) return 1;
    }
    return 2;
  }
}

template <typename scalar_t>
cudaError_t launch_forward(const scalar_t* x1, const scalar_t* alpha, const scalar_t* beta,
                           scalar_t* c, int64_t length, int64_t batch, int64_t dim, int64_t k,
                           cudaStream_t stream) {
  const int64_t columns = batch * dim;
  if (columns * k == 0) return cudaSuccess;
  if constexpr (sizeof(scalar_t) == 2) {
    if (pack_for<scalar_t>(columns, {x1, c}) == 2) {
      forward_kernel<scalar_t, 2><<<blocks_for(columns / 2 * k), kThreads, 0, stream>>>(
          x1, alpha, beta, c, length, columns, dim, k);
      return cudaGetLastError();
    }
  }
  forward_kernel<scalar_t, 1><<<blocks_for(columns * k), kThreads, 0, stream>>>(
      x1, alpha, beta, c, length, columns, dim, k);
  return cudaGetLastError();
}

template <typename scalar_t>
cudaError_t launch_backward(const scalar_t* grad_c, const scalar_t* x1, const scalar_t* c,
                            const scalar_t* alpha, const scalar_t* beta, scalar_t* grad_x1,
                            typename Acc<scalar_t>::type* grad_alpha_items,
                            typename Acc<scalar_t>::type* grad_beta_items, int64_t length,
                            int64_t batch, int64_t dim, int64_t k, cudaStream_t stream) {
  const int64_t columns = batch * dim;
  if (columns * k == 0) return cudaSuccess;
  if constexpr (sizeof(scalar_t) == 2) {
    if (pack_for<scalar_t>(columns, {grad_c, x1, c, grad_x1}) == 2) {
      backward_kernel<scalar_t, 2><<<blocks_for(columns / 2 * k), kThreads, 0, stream>>>(
          grad_c, x1, c, alpha, beta, grad_x1, grad_alpha_items, grad_beta_items, length,
          columns, dim, k);
      return cudaGetLastError();
    }
  }
  backward_kernel<scalar_t, 1><<<blocks_for(columns * k), kThreads, 0, stream>>>(
      grad_c, x1, c, alpha, beta, grad_x1, grad_alpha_items, grad_beta_items, length, columns,
      dim, k);
  return cudaGetLastError();
}

}  // namespace

// Raw-pointer launchers, one per dtype, on the caller's stream (never the default stream, which
// would break CUDA graphs). Return the launch's cudaError_t.
#define FAIRSEQ_EXT_SWISH_LAUNCHERS(scalar_t, suffix)                                            \
  cudaError_t launch_swish_recurrence_forward_##suffix(                                         \
      const scalar_t* x1, const scalar_t* alpha, const scalar_t* beta, scalar_t* c,             \
      int64_t length, int64_t batch, int64_t dim, int64_t k, cudaStream_t stream) {             \
    return launch_forward(x1, alpha, beta, c, length, batch, dim, k, stream);                   \
  }                                                                                             \
  cudaError_t launch_swish_recurrence_backward_##suffix(                                        \
      const scalar_t* grad_c, const scalar_t* x1, const scalar_t* c, const scalar_t* alpha,     \
      const scalar_t* beta, scalar_t* grad_x1, typename Acc<scalar_t>::type* grad_alpha_items,  \
      typename Acc<scalar_t>::type* grad_beta_items, int64_t length, int64_t batch,             \
      int64_t dim, int64_t k, cudaStream_t stream) {                                            \
    return launch_backward(grad_c, x1, c, alpha, beta, grad_x1, grad_alpha_items,               \
                           grad_beta_items, length, batch, dim, k, stream);                     \
  }

FAIRSEQ_EXT_SWISH_LAUNCHERS(float, f32)
FAIRSEQ_EXT_SWISH_LAUNCHERS(double, f64)
FAIRSEQ_EXT_SWISH_LAUNCHERS(__half, f16)
FAIRSEQ_EXT_SWISH_LAUNCHERS(__nv_bfloat16, bf16)

#undef FAIRSEQ_EXT_SWISH_LAUNCHERS

}  // namespace fairseq_ext
