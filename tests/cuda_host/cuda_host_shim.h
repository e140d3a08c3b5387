// Host emulation of the CUDA that fairseq_ext/ops/csrc/swish_recurrence_kernels.cu uses, as plain
// C++, so that the kernels' own lines run on the CPU (tests/test_cuda_host_emulation.py). Test
// only. cuda_runtime.h, cuda_fp16.h and cuda_bf16.h beside this file forward here, so the .cu
// compiles unchanged but for its `kernel<<<grid, block, shmem, stream>>>(args)` launches, which
// tests/cuda_host_emulation.py rewrites to `cuda_host::launch(kernel, {grid, block, shmem,
// stream}, args)` when it builds.
//
// What is emulated, and how closely:
// * __global__, __device__, __forceinline__: nothing, nothing, inline.
// * blockIdx, threadIdx (uint3), blockDim, gridDim (dim3): globals that launch() sets before it
//   calls the kernel once per (block, thread). The kernels may use neither shared memory nor
//   __syncthreads (this file has none, so such a kernel does not compile here): each thread runs
//   to its end before the next starts. launch() can run the threads in reverse order; a kernel
//   whose threads depend on one another (a race on the GPU) then gives other results.
// * Launch configuration checked as CUDA checks it (grid 1..2^31-1 x 65535 x 65535, block x and y
//   <= 1024, z <= 64, x y z <= 1024, no dynamic shared memory here): a bad one runs nothing and
//   leaves cudaErrorInvalidConfiguration for cudaGetLastError(), which returns and clears it.
// * __half, __nv_bfloat16: 16-bit storage types with CUDA's conversion functions, float to half
//   and float to bfloat16 rounding to nearest even (as __float2half and __float2bfloat16 do,
//   subnormals, overflow to infinity and NaN included), and the exact conversions back. No
//   implicit conversions and no arithmetic operators, as in torch's builds, which define
//   __CUDA_NO_HALF_CONVERSIONS__, __CUDA_NO_HALF_OPERATORS__ and __CUDA_NO_BFLOAT16_CONVERSIONS__.
// * __expf(x): CUDA computes it as ex2.approx(x * log2(e)) in fp32; here exp2f of the same
//   fp32 product, so the error of the rounded product (which grows with |x|) is reproduced, the
//   last-ulp error of ex2.approx is not. nvcc's contraction of a * b + c into one FMA and
//   --use_fast_math's approximate division are not reproduced either: the emulation rounds every
//   operation (the test build uses -ffp-contract=off), so it predicts the GPU's fp32 results to a
//   few ulps, not bit for bit.
// * cudaStream_t, cudaError_t, cudaSuccess, cudaGetLastError, cudaGetErrorString.
// cuda_host::launches() records each launch (configuration, stream, threads run) for the tests.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

struct uint3 {
  unsigned int x, y, z;
};

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1)
      : x(x_), y(y_), z(z_) {}
};

inline uint3 blockIdx{0, 0, 0};
inline uint3 threadIdx{0, 0, 0};
inline dim3 blockDim;
inline dim3 gridDim;

// --- runtime API -------------------------------------------------------------------------------

struct CUstream_st;
typedef CUstream_st* cudaStream_t;

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorInvalidConfiguration = 9,
};
typedef enum cudaError cudaError_t;

namespace cuda_host {
inline cudaError_t last_error = cudaSuccess;
}  // namespace cuda_host

inline cudaError_t cudaGetLastError() {
  const cudaError_t error = cuda_host::last_error;
  cuda_host::last_error = cudaSuccess;
  return error;
}

inline const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  }
  return "unrecognized error code";
}

// --- math --------------------------------------------------------------------------------------

inline float __expf(float x) { return std::exp2(x * 1.44269504088896341f); }

// --- __half and __nv_bfloat16 ------------------------------------------------------------------

namespace cuda_host {
inline uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}
inline float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}
}  // namespace cuda_host

struct __half {
  unsigned short x;
};
struct __nv_bfloat16 {
  unsigned short x;
};
static_assert(sizeof(__half) == 2 && sizeof(__nv_bfloat16) == 2, "16-bit storage types");

// float -> half, round to nearest even (cvt.rn.f16.f32). Normal results: rebias the exponent
// and round the 13 dropped mantissa bits to nearest even with an integer add; subnormal results:
// let one float addition (round to nearest even) align the mantissa; at and past 65520 the
// rounding carries into infinity; NaN stays NaN (CUDA's canonical 0x7fff).
inline __half __float2half(float value) {
  uint32_t bits = cuda_host::float_bits(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  bits &= 0x7fffffffu;
  unsigned short out;
  if (bits > 0x7f800000u) {
    out = 0x7fff;
  } else if (bits >= 0x47800000u) {  // >= 65536: infinity (65520..65536 rounds up below)
    out = 0x7c00;
  } else if (bits < 0x38800000u) {  // below half's smallest normal 2^-14: subnormal or zero
    const float magic = cuda_host::bits_float(((127 - 15) + (23 - 10) + 1) << 23);  // 0.5
    out = static_cast<unsigned short>(
        cuda_host::float_bits(cuda_host::bits_float(bits) + magic) - cuda_host::float_bits(magic));
  } else {
    const uint32_t odd = (bits >> 13) & 1u;
    out = static_cast<unsigned short>((bits + 0xc8000fffu + odd) >> 13);  // exponent - 112
  }
  return __half{static_cast<unsigned short>(out | sign)};
}

inline float __half2float(__half value) {
  const uint32_t sign = static_cast<uint32_t>(value.x & 0x8000u) << 16;
  const uint32_t exponent = (value.x >> 10) & 0x1fu, mantissa = value.x & 0x3ffu;
  if (exponent == 0x1f) {
    return cuda_host::bits_float(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return cuda_host::bits_float(sign | cuda_host::float_bits(magnitude));
  }
  return cuda_host::bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// float -> bfloat16, round to nearest even (cvt.rn.bf16.f32): the upper 16 bits after adding
// 0x7fff plus the lowest kept bit; NaN stays NaN (CUDA's canonical 0x7fff).
inline __nv_bfloat16 __float2bfloat16(float value) {
  const uint32_t bits = cuda_host::float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return __nv_bfloat16{static_cast<unsigned short>(((bits >> 16) & 0x8000u) | 0x7fffu)};
  }
  const uint32_t odd = (bits >> 16) & 1u;
  return __nv_bfloat16{static_cast<unsigned short>((bits + 0x7fffu + odd) >> 16)};
}

inline float __bfloat162float(__nv_bfloat16 value) {
  return cuda_host::bits_float(static_cast<uint32_t>(value.x) << 16);
}

// --- launches ----------------------------------------------------------------------------------

namespace cuda_host {

// The <<<grid, block, shared_bytes, stream>>> of a launch (the rewrite brace-initializes it, so
// the two- and three-part forms work too).
struct LaunchConfig {
  dim3 grid;
  dim3 block;
  size_t shared_bytes = 0;
  cudaStream_t stream = nullptr;
};

struct LaunchRecord {
  LaunchConfig config;
  int64_t threads_run;
};

inline std::vector<LaunchRecord>& launches() {
  static std::vector<LaunchRecord> records;
  return records;
}

// false: blocks and threads in increasing order; true: both in decreasing order.
inline bool reverse_thread_order = false;

inline bool valid(const LaunchConfig& c) {
  const uint64_t threads = uint64_t{c.block.x} * c.block.y * c.block.z;
  return c.grid.x >= 1 && c.grid.x <= 0x7fffffffu && c.grid.y >= 1 && c.grid.y <= 65535 &&
         c.grid.z >= 1 && c.grid.z <= 65535 && c.block.x >= 1 && c.block.x <= 1024 &&
         c.block.y >= 1 && c.block.y <= 1024 && c.block.z >= 1 && c.block.z <= 64 &&
         threads <= 1024;
}

// Runs kernel(args...) once per (block, thread) of the grid, as its <<<config>>> launch would.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), const LaunchConfig& config, Args... args) {
  if (config.shared_bytes != 0) {
    throw std::logic_error("cuda_host::launch: the host emulation has no shared memory");
  }
  if (!valid(config)) {
    launches().push_back({config, 0});
    last_error = cudaErrorInvalidConfiguration;
    return;
  }
  gridDim = config.grid;
  blockDim = config.block;
  int64_t threads_run = 0;
  const auto index = [](unsigned int i, unsigned int n) {
    return reverse_thread_order ? n - 1 - i : i;
  };
  for (unsigned int bz = 0; bz < config.grid.z; ++bz)
    for (unsigned int by = 0; by < config.grid.y; ++by)
      for (unsigned int bx = 0; bx < config.grid.x; ++bx)
        for (unsigned int tz = 0; tz < config.block.z; ++tz)
          for (unsigned int ty = 0; ty < config.block.y; ++ty)
            for (unsigned int tx = 0; tx < config.block.x; ++tx) {
              blockIdx = {index(bx, config.grid.x), index(by, config.grid.y),
                          index(bz, config.grid.z)};
              threadIdx = {index(tx, config.block.x), index(ty, config.block.y),
                           index(tz, config.block.z)};
              kernel(args...);
              ++threads_run;
            }
  launches().push_back({config, threads_run});
}

}  // namespace cuda_host
