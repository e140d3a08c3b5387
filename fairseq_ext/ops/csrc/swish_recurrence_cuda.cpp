// CUDA implementation of fairseq_ext::swish_recurrence: the torch side. The kernels and their
// raw-pointer launchers are in swish_recurrence_kernels.cu (torch-free); this file checks the
// inputs, allocates, launches on the current stream under a device guard, and reduces the
// backward's per-item alpha/beta sums. Built only when torch has CUDA (setup.py).
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "swish_recurrence_checks.h"

namespace fairseq_ext {

// acc_t: the kernels' accumulation type, also that of the backward's alpha/beta partial sums.
#define FAIRSEQ_EXT_DECLARE_LAUNCHERS(scalar_t, acc_t, suffix)                                  \
  cudaError_t launch_swish_recurrence_forward_##suffix(                                        \
      const scalar_t*, const scalar_t*, const scalar_t*, scalar_t*, int64_t, int64_t, int64_t, \
      int64_t, cudaStream_t);                                                                  \
  cudaError_t launch_swish_recurrence_backward_##suffix(                                       \
      const scalar_t*, const scalar_t*, const scalar_t*, const scalar_t*, const scalar_t*,     \
      scalar_t*, acc_t*, acc_t*, int64_t, int64_t, int64_t, int64_t, cudaStream_t);
FAIRSEQ_EXT_DECLARE_LAUNCHERS(float, float, f32)
FAIRSEQ_EXT_DECLARE_LAUNCHERS(double, double, f64)
FAIRSEQ_EXT_DECLARE_LAUNCHERS(__half, float, f16)
FAIRSEQ_EXT_DECLARE_LAUNCHERS(__nv_bfloat16, float, bf16)
#undef FAIRSEQ_EXT_DECLARE_LAUNCHERS

namespace {

// at:: element type -> CUDA element type and its launchers.
template <typename T> struct Cuda;
template <> struct Cuda<float> {
  using type = float;
  static constexpr auto forward = launch_swish_recurrence_forward_f32;
  static constexpr auto backward = launch_swish_recurrence_backward_f32;
};
template <> struct Cuda<double> {
  using type = double;
  static constexpr auto forward = launch_swish_recurrence_forward_f64;
  static constexpr auto backward = launch_swish_recurrence_backward_f64;
};
template <> struct Cuda<at::Half> {
  using type = __half;
  static constexpr auto forward = launch_swish_recurrence_forward_f16;
  static constexpr auto backward = launch_swish_recurrence_backward_f16;
};
template <> struct Cuda<at::BFloat16> {
  using type = __nv_bfloat16;
  static constexpr auto forward = launch_swish_recurrence_forward_bf16;
  static constexpr auto backward = launch_swish_recurrence_backward_bf16;
};

template <typename T>
const typename Cuda<T>::type* ptr(const at::Tensor& t) {
  return reinterpret_cast<const typename Cuda<T>::type*>(t.data_ptr<T>());
}
template <typename T>
typename Cuda<T>::type* mutable_ptr(at::Tensor& t) {
  return reinterpret_cast<typename Cuda<T>::type*>(t.data_ptr<T>());
}

void check_launch(cudaError_t error) {
  TORCH_CHECK(error == cudaSuccess, "swish_recurrence CUDA launch failed: ",
              cudaGetErrorString(error));
}

at::Tensor swish_recurrence_cuda(const at::Tensor& x1_in, const at::Tensor& alpha_in,
                                 const at::Tensor& beta_in, int64_t step) {
  check_swish_recurrence_inputs(x1_in, alpha_in, beta_in, step);
  const c10::cuda::CUDAGuard guard(x1_in.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const at::Tensor x1 = x1_in.contiguous(), alpha = alpha_in.contiguous(),
                   beta = beta_in.contiguous();
  at::Tensor c = at::empty_like(x1);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x1.scalar_type(),
                                  "swish_recurrence_cuda", [&] {
    check_launch(Cuda<scalar_t>::forward(ptr<scalar_t>(x1), ptr<scalar_t>(alpha),
                                         ptr<scalar_t>(beta), mutable_ptr<scalar_t>(c),
                                         x1.size(0), x1.size(1), x1.size(2), step, stream));
  });
  return c;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> swish_recurrence_backward_cuda(
    const at::Tensor& grad_c_in, const at::Tensor& x1_in, const at::Tensor& c_in,
    const at::Tensor& alpha_in, const at::Tensor& beta_in, int64_t step) {
  check_swish_recurrence_inputs(x1_in, alpha_in, beta_in, step);
  TORCH_CHECK(grad_c_in.sizes() == x1_in.sizes() && c_in.sizes() == x1_in.sizes(),
              "swish_recurrence_backward: grad_c and c must have x1's shape");
  const c10::cuda::CUDAGuard guard(x1_in.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const at::Tensor grad_c = grad_c_in.contiguous().to(x1_in.scalar_type()),
                   x1 = x1_in.contiguous(), c = c_in.contiguous(),
                   alpha = alpha_in.contiguous(), beta = beta_in.contiguous();
  const int64_t T = x1.size(0), B = x1.size(1), D = x1.size(2);
  at::Tensor grad_x1 = at::empty_like(x1);
  // the partial sums in the kernels' accumulation type: fp64 for fp64, else fp32
  const auto acc_type = at::toOpMathType(x1.scalar_type());
  at::Tensor grad_alpha_items = at::empty({step, B, D}, x1.options().dtype(acc_type));
  at::Tensor grad_beta_items = at::empty({step, B, D}, x1.options().dtype(acc_type));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x1.scalar_type(),
                                  "swish_recurrence_backward_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    check_launch(Cuda<scalar_t>::backward(
        ptr<scalar_t>(grad_c), ptr<scalar_t>(x1), ptr<scalar_t>(c), ptr<scalar_t>(alpha),
        ptr<scalar_t>(beta), mutable_ptr<scalar_t>(grad_x1),
        grad_alpha_items.data_ptr<acc_t>(), grad_beta_items.data_ptr<acc_t>(), T, B, D, step,
        stream));
  });
  // The dims as an IntArrayRef: a bare {0, 1} is ambiguous between Tensor::sum's IntArrayRef
  // and DimnameList overloads in torch 2.11's headers (the first GPU build failed on it; 2.13's
  // headers no longer declare the DimnameList one).
  const std::array<int64_t, 2> step_and_batch = {0, 1};
  const at::IntArrayRef dims(step_and_batch);
  return {grad_x1, grad_alpha_items.sum(dims).to(alpha.scalar_type()),
          grad_beta_items.sum(dims).to(beta.scalar_type())};
}

}  // namespace

TORCH_LIBRARY_IMPL(fairseq_ext, CUDA, m) {
  m.impl("swish_recurrence", &swish_recurrence_cuda);
  m.impl("swish_recurrence_backward", &swish_recurrence_backward_cuda);
}

}  // namespace fairseq_ext
