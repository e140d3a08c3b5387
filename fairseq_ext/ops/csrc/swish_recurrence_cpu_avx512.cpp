// The fp32 CPU kernels (swish_recurrence_cpu_vec.h) for x86-64 CPUs with AVX-512 (F, BW, VL,
// DQ): setup.py compiles this file alone with those -m flags and CPU_CAPABILITY_AVX512, so
// at::vec::Vectorized<float> is ATen's 16-lane AVX-512 vector (its own inline namespace).
// swish_recurrence.cpp calls these kernels only when the CPU reports all four extensions.
// Built without those flags (another architecture), it holds the portable kernels again.
#include <ATen/cpu/vec/vec.h>

#include <cstdint>

#include "swish_recurrence_cpu_kernels.h"

#if defined(CPU_CAPABILITY_AVX512)
#define FAIRSEQ_EXT_KERNELS_NAME "AVX512"
#else
#define FAIRSEQ_EXT_KERNELS_NAME "portable"
#endif

namespace fairseq_ext {
namespace cpu_avx512 {
namespace {
#include "swish_recurrence_cpu_vec.h"
}  // namespace

const SwishRecurrenceCpuKernels kernels = {FAIRSEQ_EXT_KERNELS_NAME, forward_block,
                                           backward_block};

}  // namespace cpu_avx512
}  // namespace fairseq_ext
