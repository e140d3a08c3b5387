// CUDA kernels of fairseq_ext::swish_recurrence (SwishRNN, Lei et al., Eq. 3), torch-free: the
// torch binding is swish_recurrence_cuda.cpp. Keeping torch headers out of this file lets CI
// compile-check it with nvcc on a CPU machine (the CPU torch wheel lacks the CUDA headers).
//
//   c[t] = Swish(c[t-k] - x1[t]) + x1[t],  Swish(z) = sigmoid(alpha z + beta) z,  c[t<0] = 0
//
// x1, c: (T, B, D) time-major; alpha, beta: (D). One thread per (column, chain), column = b*D + d:
// item = chain * columns + column, so neighbouring threads read neighbouring addresses at every
// time step (coalesced); each thread loads kChunk steps of its chain at once, ahead of the
// recurrence (below). Arithmetic in the accumulation type acc_t: fp32 for fp32/fp16/bf16
// (with the fast __expf), fp64 for fp64 (with exp, so gradcheck holds at double precision). The
// backward mirrors the CPU one: reverse time, z and the sigmoid recomputed from the saved c,
// per-item alpha/beta partial sums written to a (k * columns) acc_t buffer that the binding
// reduces (no atomics).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

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

template <typename scalar_t>
__global__ void forward_kernel(const scalar_t* __restrict__ x1, const scalar_t* __restrict__ alpha,
                               const scalar_t* __restrict__ beta, scalar_t* __restrict__ c,
                               int64_t length, int64_t columns, int64_t dim, int64_t k) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= columns * k) return;
  using acc_t = typename Acc<scalar_t>::type;
  const int64_t column = item % columns, chain = item / columns;
  const acc_t a = to_acc(alpha[column % dim]), b = to_acc(beta[column % dim]);
  const int64_t stride = k * columns;  // elements between two steps of the chain
  acc_t previous = 0;
  for (int64_t t0 = chain; t0 < length; t0 += kChunk * k) {
    const int64_t steps = (length - 1 - t0) / k + 1 < kChunk ? (length - 1 - t0) / k + 1 : kChunk;
    const int64_t base = t0 * columns + column;
    acc_t x[kChunk];
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      if (i < steps) x[i] = to_acc(x1[base + i * stride]);
    }
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      if (i < steps) {
        const acc_t z = previous - x[i];
        previous = sigmoid(a * z + b) * z + x[i];
        c[base + i * stride] = from_acc<scalar_t>(previous);
      }
    }
  }
}

template <typename scalar_t>
__global__ void backward_kernel(const scalar_t* __restrict__ grad_c,
                                const scalar_t* __restrict__ x1, const scalar_t* __restrict__ c,
                                const scalar_t* __restrict__ alpha,
                                const scalar_t* __restrict__ beta, scalar_t* __restrict__ grad_x1,
                                typename Acc<scalar_t>::type* __restrict__ grad_alpha_items,
                                typename Acc<scalar_t>::type* __restrict__ grad_beta_items,
                                int64_t length,
                                int64_t columns, int64_t dim, int64_t k) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= columns * k) return;
  using acc_t = typename Acc<scalar_t>::type;
  const int64_t column = item % columns, chain = item / columns;
  const acc_t a = to_acc(alpha[column % dim]), b = to_acc(beta[column % dim]);
  const int64_t stride = k * columns;
  acc_t carry = 0, d_alpha = 0, d_beta = 0;
  if (chain < length) {
    const int64_t last = chain + ((length - 1 - chain) / k) * k;
    // Reverse time, kChunk steps at a time: step i of a chunk is t = t0 - i k.
    for (int64_t t0 = last; t0 >= 0; t0 -= kChunk * k) {
      const int64_t steps = t0 / k + 1 < kChunk ? t0 / k + 1 : kChunk;
      const int64_t base = t0 * columns + column;
      acc_t g[kChunk], x[kChunk], previous[kChunk];
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        if (i < steps) {
          g[i] = to_acc(grad_c[base - i * stride]);
          x[i] = to_acc(x1[base - i * stride]);
          previous[i] = t0 - i * k >= k ? to_acc(c[base - (i + 1) * stride]) : acc_t(0);
        }
      }
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        if (i < steps) {
          const acc_t grad = g[i] + carry;
          const acc_t z = previous[i] - x[i];
          const acc_t s = sigmoid(a * z + b);
          const acc_t ds = s * (acc_t(1) - s);
          const acc_t dz = grad * (s + a * z * ds);
          grad_x1[base - i * stride] = from_acc<scalar_t>(grad - dz);
          d_alpha += grad * z * z * ds;
          d_beta += grad * z * ds;
          carry = dz;
        }
      }
    }
  }
  grad_alpha_items[item] = d_alpha;
  grad_beta_items[item] = d_beta;
}

constexpr int kThreads = 256;

inline unsigned int blocks_for(int64_t items) {
  return static_cast<unsigned int>((items + kThreads - 1) / kThreads);
}

}  // namespace

// Raw-pointer launchers, one per dtype, on the caller's stream (never the default stream, which
// would break CUDA graphs). Return the launch's cudaError_t.
#define FAIRSEQ_EXT_SWISH_LAUNCHERS(scalar_t, suffix)                                            \
  cudaError_t launch_swish_recurrence_forward_##suffix(                                         \
      const scalar_t* x1, const scalar_t* alpha, const scalar_t* beta, scalar_t* c,             \
      int64_t length, int64_t batch, int64_t dim, int64_t k, cudaStream_t stream) {             \
    const int64_t columns = batch * dim;                                                        \
    if (columns * k == 0) return cudaSuccess;                                                   \
    forward_kernel<scalar_t><<<blocks_for(columns * k), kThreads, 0, stream>>>(                 \
        x1, alpha, beta, c, length, columns, dim, k);                                           \
    return cudaGetLastError();                                                                  \
  }                                                                                             \
  cudaError_t launch_swish_recurrence_backward_##suffix(                                        \
      const scalar_t* grad_c, const scalar_t* x1, const scalar_t* c, const scalar_t* alpha,     \
      const scalar_t* beta, scalar_t* grad_x1, typename Acc<scalar_t>::type* grad_alpha_items,  \
      typename Acc<scalar_t>::type* grad_beta_items, int64_t length, int64_t batch,             \
      int64_t dim, int64_t k, cudaStream_t stream) {                                            \
    const int64_t columns = batch * dim;                                                        \
    if (columns * k == 0) return cudaSuccess;                                                   \
    backward_kernel<scalar_t><<<blocks_for(columns * k), kThreads, 0, stream>>>(                \
        grad_c, x1, c, alpha, beta, grad_x1, grad_alpha_items, grad_beta_items, length,         \
        columns, dim, k);                                                                       \
    return cudaGetLastError();                                                                  \
  }

FAIRSEQ_EXT_SWISH_LAUNCHERS(float, f32)
FAIRSEQ_EXT_SWISH_LAUNCHERS(double, f64)
FAIRSEQ_EXT_SWISH_LAUNCHERS(__half, f16)
FAIRSEQ_EXT_SWISH_LAUNCHERS(__nv_bfloat16, bf16)

#undef FAIRSEQ_EXT_SWISH_LAUNCHERS

}  // namespace fairseq_ext
