// The fp32 CPU kernels (swish_recurrence_cpu_vec.h) for x86-64 CPUs with AVX2 and FMA. setup.py
// compiles this file alone with -mavx2 -mfma -DCPU_CAPABILITY=AVX2 -DCPU_CAPABILITY_AVX2, so
// at::vec::Vectorized<float> is ATen's 8-lane AVX2 vector (in its own inline namespace, so
// nothing clashes with the portable build). The file holds only these kernels, and
// swish_recurrence.cpp calls them only when the CPU reports AVX2 and FMA. Built without those
// flags (another architecture), it holds the portable kernels again.
#include <ATen/cpu/vec/vec.h>

#include <cstdint>

#include "swish_recurrence_cpu_kernels.h"

#if defined(CPU_CAPABILITY_AVX2)
#define FAIRSEQ_EXT_KERNELS_NAME "AVX2"
#else
#define FAIRSEQ_EXT_KERNELS_NAME "portable"
#endif

namespace fairseq_ext {
namespace cpu_avx2 {
namespace {
#include "swish_recurrence_cpu_vec.h"
}  // namespace

const SwishRecurrenceCpuKernels kernels = {FAIRSEQ_EXT_KERNELS_NAME, forward_block,
                                           backward_block};

}  // namespace cpu_avx2
}  // namespace fairseq_ext
