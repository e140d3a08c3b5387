// The fp32 CPU kernels of fairseq_ext::swish_recurrence, one set per instruction set
// (swish_recurrence_cpu_vec.h compiled by swish_recurrence_cpu_avx2.cpp and
// swish_recurrence_cpu_default.cpp); swish_recurrence.cpp chooses one at run time.
#pragma once
#include <cstdint>

namespace fairseq_ext {

struct SwishRecurrenceCpuKernels {
  const char* name;
  void (*forward_block)(const float* x1, const float* alpha, const float* beta, float* c,
                        float* state, int64_t length, int64_t columns, int64_t begin,
                        int64_t width, int64_t k);
  void (*backward_block)(const float* grad_c, const float* x1, const float* c,
                         const float* alpha, const float* beta, float* grad_x1, float* d_alpha,
                         float* d_beta, float* carry, int64_t length, int64_t columns,
                         int64_t begin, int64_t width, int64_t k);
};

namespace cpu_avx512 {
extern const SwishRecurrenceCpuKernels kernels;  // needs AVX-512 F, BW, VL and DQ
}
namespace cpu_avx2 {
extern const SwishRecurrenceCpuKernels kernels;  // needs AVX2 and FMA
}
namespace cpu_default {
extern const SwishRecurrenceCpuKernels kernels;  // any CPU
}

}  // namespace fairseq_ext
