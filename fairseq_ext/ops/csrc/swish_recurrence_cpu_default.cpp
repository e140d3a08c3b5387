// The fp32 CPU kernels (swish_recurrence_cpu_vec.h) for any CPU: ATen's portable
// at::vec::Vectorized<float> (compiled with the extension's default flags).
#include <ATen/cpu/vec/vec.h>

#include <cstdint>

#include "swish_recurrence_cpu_kernels.h"

namespace fairseq_ext {
namespace cpu_default {
namespace {
#include "swish_recurrence_cpu_vec.h"
}  // namespace

const SwishRecurrenceCpuKernels kernels = {"portable", forward_block, backward_block};

}  // namespace cpu_default
}  // namespace fairseq_ext
