// fairseq_ext::swish_recurrence: the SwishRNN recurrence (Lei et al., Eq. 3) and its backward,
// CPU kernels, registered with TORCH_LIBRARY (autograd and fake kernels are registered from
// Python in fairseq_ext/modules/swish_rnn.py, as pytorch/extension-cpp does).
//
//   c[i] = Swish(c[i-k] - x1[i]) + x1[i],  Swish(z) = sigmoid(alpha * z + beta) * z,
//   c[i] = 0 for i < 0,   x1, c: (T, B, D) time-major, alpha, beta: (D).
//
// Forward: at::parallel_for over blocks of (batch, channel) columns; each block loops over time
// and carries its k chains (position t continues chain t % k). Accumulation in opmath (fp32 for
// fp16/bf16).
//
// Backward, reverse time, for one chain with G = dL/dc[i] (incoming plus what c[i + k] sends):
//   z = c[i-k] - x1[i] (recomputed from the saved c), s = sigmoid(alpha z + beta),
//   dz = G (s + alpha z s (1 - s)),  dx1[i] = G - dz,  dL/dc[i-k] += dz,
//   dalpha += G z^2 s (1 - s),  dbeta += G z s (1 - s).
// The alpha/beta gradients of each column go to its own entry of a (B, D) buffer (a column
// belongs to exactly one block) that is summed over the batch at the end: no atomics.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <Python.h>
#include <torch/library.h>

#include "swish_recurrence_checks.h"

#include <cmath>
#include <tuple>
#include <vector>

namespace fairseq_ext {
namespace {


// Work is split into blocks of contiguous columns (batch x channel); a block walks the time
// axis in order, so every step reads and writes one contiguous row segment (cache- and
// SIMD-friendly on the time-major layout), and keeps the k chains' carried values in a small
// per-block buffer: state[chain][column].
constexpr int64_t kColumnBlock = 256;

template <typename scalar_t>
void forward_kernel(const scalar_t* x1, const scalar_t* alpha, const scalar_t* beta,
                    scalar_t* c, int64_t T, int64_t B, int64_t D, int64_t k) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t columns = B * D;
  at::parallel_for(0, columns, kColumnBlock, [&](int64_t begin, int64_t end) {
    const int64_t width = end - begin;
    std::vector<acc_t> state(static_cast<size_t>(k * width), acc_t(0));
    std::vector<acc_t> a(width), b(width);
    for (int64_t j = 0; j < width; ++j) {
      a[j] = static_cast<acc_t>(alpha[(begin + j) % D]);
      b[j] = static_cast<acc_t>(beta[(begin + j) % D]);
    }
    for (int64_t t = 0; t < T; ++t) {
      acc_t* previous = state.data() + (t % k) * width;
      const scalar_t* x_row = x1 + t * columns + begin;
      scalar_t* c_row = c + t * columns + begin;
      for (int64_t j = 0; j < width; ++j) {
        const acc_t x = static_cast<acc_t>(x_row[j]);
        const acc_t z = previous[j] - x;
        const acc_t s = acc_t(1) / (acc_t(1) + std::exp(-(a[j] * z + b[j])));
        previous[j] = s * z + x;
        c_row[j] = static_cast<scalar_t>(previous[j]);
      }
    }
  });
}

template <typename scalar_t>
void backward_kernel(const scalar_t* grad_c, const scalar_t* x1, const scalar_t* c,
                     const scalar_t* alpha, const scalar_t* beta, scalar_t* grad_x1,
                     at::opmath_type<scalar_t>* grad_alpha_columns,
                     at::opmath_type<scalar_t>* grad_beta_columns, int64_t T, int64_t B, int64_t D,
                     int64_t k) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t columns = B * D;
  at::parallel_for(0, columns, kColumnBlock, [&](int64_t begin, int64_t end) {
    const int64_t width = end - begin;
    std::vector<acc_t> carry(static_cast<size_t>(k * width), acc_t(0));  // dL/dc[t] from t + k
    std::vector<acc_t> a(width), b(width), d_alpha(width, acc_t(0)), d_beta(width, acc_t(0));
    for (int64_t j = 0; j < width; ++j) {
      a[j] = static_cast<acc_t>(alpha[(begin + j) % D]);
      b[j] = static_cast<acc_t>(beta[(begin + j) % D]);
    }
    for (int64_t t = T - 1; t >= 0; --t) {
      acc_t* incoming = carry.data() + (t % k) * width;
      const int64_t row = t * columns + begin;
      const bool has_previous = t >= k;
      for (int64_t j = 0; j < width; ++j) {
        const acc_t g = static_cast<acc_t>(grad_c[row + j]) + incoming[j];
        const acc_t x = static_cast<acc_t>(x1[row + j]);
        const acc_t previous = has_previous ? static_cast<acc_t>(c[row - k * columns + j]) : acc_t(0);
        const acc_t z = previous - x;
        const acc_t s = acc_t(1) / (acc_t(1) + std::exp(-(a[j] * z + b[j])));
        const acc_t ds = s * (acc_t(1) - s);
        const acc_t dz = g * (s + a[j] * z * ds);
        grad_x1[row + j] = static_cast<scalar_t>(g - dz);
        d_alpha[j] += g * z * z * ds;
        d_beta[j] += g * z * ds;
        incoming[j] = dz;  // becomes dL/dc[t - k]'s extra term (same chain)
      }
    }
    for (int64_t j = 0; j < width; ++j) {  // each column belongs to exactly one block
      grad_alpha_columns[begin + j] = d_alpha[j];
      grad_beta_columns[begin + j] = d_beta[j];
    }
  });
}

at::Tensor swish_recurrence_cpu(const at::Tensor& x1_in, const at::Tensor& alpha_in,
                                const at::Tensor& beta_in, int64_t step) {
  check_swish_recurrence_inputs(x1_in, alpha_in, beta_in, step);
  const at::Tensor x1 = x1_in.contiguous(), alpha = alpha_in.contiguous(),
                   beta = beta_in.contiguous();
  at::Tensor c = at::empty_like(x1);
  const int64_t T = x1.size(0), B = x1.size(1), D = x1.size(2);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x1.scalar_type(),
                                  "swish_recurrence_cpu", [&] {
    forward_kernel<scalar_t>(x1.data_ptr<scalar_t>(), alpha.data_ptr<scalar_t>(),
                             beta.data_ptr<scalar_t>(), c.data_ptr<scalar_t>(), T, B, D, step);
  });
  return c;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> swish_recurrence_backward_cpu(
    const at::Tensor& grad_c_in, const at::Tensor& x1_in, const at::Tensor& c_in,
    const at::Tensor& alpha_in, const at::Tensor& beta_in, int64_t step) {
  check_swish_recurrence_inputs(x1_in, alpha_in, beta_in, step);
  TORCH_CHECK(grad_c_in.sizes() == x1_in.sizes() && c_in.sizes() == x1_in.sizes(),
              "swish_recurrence_backward: grad_c and c must have x1's shape");
  const at::Tensor grad_c = grad_c_in.contiguous().to(x1_in.scalar_type()),
                   x1 = x1_in.contiguous(), c = c_in.contiguous(),
                   alpha = alpha_in.contiguous(), beta = beta_in.contiguous();
  const int64_t T = x1.size(0), B = x1.size(1), D = x1.size(2);
  at::Tensor grad_x1 = at::empty_like(x1);
  const auto acc_type = at::toOpMathType(x1.scalar_type());
  at::Tensor grad_alpha_columns = at::empty({B, D}, x1.options().dtype(acc_type));
  at::Tensor grad_beta_columns = at::empty({B, D}, x1.options().dtype(acc_type));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x1.scalar_type(),
                                  "swish_recurrence_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    backward_kernel<scalar_t>(grad_c.data_ptr<scalar_t>(), x1.data_ptr<scalar_t>(),
                              c.data_ptr<scalar_t>(), alpha.data_ptr<scalar_t>(),
                              beta.data_ptr<scalar_t>(), grad_x1.data_ptr<scalar_t>(),
                              grad_alpha_columns.data_ptr<acc_t>(), grad_beta_columns.data_ptr<acc_t>(),
                              T, B, D, step);
  });
  return {grad_x1, grad_alpha_columns.sum(0).to(alpha.scalar_type()),
          grad_beta_columns.sum(0).to(beta.scalar_type())};
}

}  // namespace

TORCH_LIBRARY(fairseq_ext, m) {
  m.def("swish_recurrence(Tensor x1, Tensor alpha, Tensor beta, int step) -> Tensor");
  m.def("swish_recurrence_backward(Tensor grad_c, Tensor x1, Tensor c, Tensor alpha, "
        "Tensor beta, int step) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(fairseq_ext, CPU, m) {
  m.impl("swish_recurrence", &swish_recurrence_cpu);
  m.impl("swish_recurrence_backward", &swish_recurrence_backward_cpu);
}

}  // namespace fairseq_ext

// An importable module (``fairseq_ext._C``) whose import runs the registrations above.
extern "C" {
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}
