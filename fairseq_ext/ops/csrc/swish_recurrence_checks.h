// Input checks shared by the CPU kernels and the CUDA binding of fairseq_ext::swish_recurrence.
#pragma once
#include <ATen/ATen.h>

namespace fairseq_ext {

inline void check_swish_recurrence_inputs(const at::Tensor& x1, const at::Tensor& alpha,
                                          const at::Tensor& beta, int64_t step) {
  TORCH_CHECK(step >= 1, "swish_recurrence: step must be >= 1, got ", step);
  TORCH_CHECK(x1.dim() == 3, "swish_recurrence: x1 must be (T, B, D), got ", x1.sizes());
  TORCH_CHECK(alpha.dim() == 1 && alpha.size(0) == x1.size(2) && beta.sizes() == alpha.sizes(),
              "swish_recurrence: alpha and beta must be (D,) with D = ", x1.size(2));
  TORCH_CHECK(alpha.scalar_type() == x1.scalar_type() && beta.scalar_type() == x1.scalar_type(),
              "swish_recurrence: x1, alpha and beta must have one dtype");
  TORCH_CHECK(alpha.device() == x1.device() && beta.device() == x1.device(),
              "swish_recurrence: x1, alpha and beta must be on one device");
}

}  // namespace fairseq_ext
