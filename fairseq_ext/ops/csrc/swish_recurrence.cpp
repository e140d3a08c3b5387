// fairseq_ext::swish_recurrence: the SwishRNN recurrence (Lei et al., Eq. 3) and its backward,
// CPU kernels, registered with TORCH_LIBRARY (autograd and fake kernels are registered from
// Python in fairseq_ext/ops/swish_recurrence.py, as pytorch/extension-cpp does).
//
//   c[i] = Swish(c[i-k] - x1[i]) + x1[i],  Swish(z) = sigmoid(alpha * z + beta) * z,
//   c[i] = 0 for i < 0,   x1, c: (T, B, D) time-major, alpha, beta: (D).
//
// Work is split into blocks of contiguous columns (column = b * D + d) with at::parallel_for; a
// block walks the time axis in order, so every step reads and writes one contiguous row
// segment, and keeps its k chains' carried values in a small per-block buffer.
//
// * fp32 (and fp16/bf16, converted to fp32 and back, so the arithmetic is fp32): the kernels of
//   swish_recurrence_cpu_vec.h, vectorized across the row segment with at::vec::Vectorized
//   <float>; the AVX2+FMA build of them when the CPU has both, else ATen's portable one.
// * fp64: the scalar kernels below, in double throughout (exact enough for gradcheck).
//
// Backward, reverse time, for one chain with G = dL/dc[i] (incoming plus what c[i + k] sends):
//   z = c[i-k] - x1[i] (recomputed from the saved c), s = sigmoid(alpha z + beta),
//   dz = G (s + alpha z s (1 - s)),  dx1[i] = G - dz,  dL/dc[i-k] += dz,
//   dalpha += G z^2 s (1 - s),  dbeta += G z s (1 - s).
// The alpha/beta gradients of each column go to its own entry of a (B, D) buffer (a column
// belongs to exactly one block) that is summed over the batch at the end: no atomics.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <Python.h>
#include <torch/library.h>

#include "swish_recurrence_checks.h"
#include "swish_recurrence_cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

namespace fairseq_ext {
namespace {


// Columns per parallel task (at::parallel_for's grain).
constexpr int64_t kColumnGrain = 256;
// The fp32 kernels walk a thread's columns in blocks of at most this many. Each time step then
// reads and writes row segments of up to 16 KB: long enough for the hardware prefetchers to
// stream them. (With 256-column blocks, 1 KB segments 4 B * columns apart, every segment began
// a new 4 KB page and the walk waited on memory: forward + backward took 1.5-1.8x as long on one
// thread at T = 512, B = 8, d' = 512; docs/benchmarks.md.) A block's carried state (k x width)
// and parameters still fit in L2.
constexpr int64_t kMaxColumnBlock = 4096;

// Width of the blocks that split `columns` columns evenly into blocks of at most
// kMaxColumnBlock (a multiple of 16 floats, one cache line, but for the last).
int64_t column_block_width(int64_t columns) {
  const int64_t blocks = (columns + kMaxColumnBlock - 1) / kMaxColumnBlock;
  const int64_t width = (columns + blocks - 1) / blocks;
  return (width + 15) / 16 * 16;
}

// --- fp64: scalar kernels in double ------------------------------------------------------------

void forward_kernel_f64(const double* x1, const double* alpha, const double* beta, double* c,
                        int64_t T, int64_t B, int64_t D, int64_t k) {
  const int64_t columns = B * D;
  at::parallel_for(0, columns, kColumnGrain, [&](int64_t begin, int64_t end) {
    const int64_t width = end - begin;
    std::vector<double> state(static_cast<size_t>(k * width), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      double* previous = state.data() + (t % k) * width;
      const double* x_row = x1 + t * columns + begin;
      double* c_row = c + t * columns + begin;
      for (int64_t j = 0; j < width; ++j) {
        const int64_t d = (begin + j) % D;
        const double z = previous[j] - x_row[j];
        const double s = 1.0 / (1.0 + std::exp(-(alpha[d] * z + beta[d])));
        previous[j] = s * z + x_row[j];
        c_row[j] = previous[j];
      }
    }
  });
}

void backward_kernel_f64(const double* grad_c, const double* x1, const double* c,
                         const double* alpha, const double* beta, double* grad_x1,
                         double* grad_alpha_columns, double* grad_beta_columns, int64_t T,
                         int64_t B, int64_t D, int64_t k) {
  const int64_t columns = B * D;
  at::parallel_for(0, columns, kColumnGrain, [&](int64_t begin, int64_t end) {
    const int64_t width = end - begin;
    std::vector<double> carry(static_cast<size_t>(k * width), 0.0);  // dL/dc[t] from t + k
    std::vector<double> d_alpha(width, 0.0), d_beta(width, 0.0);
    for (int64_t t = T - 1; t >= 0; --t) {
      double* incoming = carry.data() + (t % k) * width;
      const int64_t row = t * columns + begin;
      for (int64_t j = 0; j < width; ++j) {
        const int64_t d = (begin + j) % D;
        const double g = grad_c[row + j] + incoming[j];
        const double x = x1[row + j];
        const double previous = t >= k ? c[row - k * columns + j] : 0.0;
        const double z = previous - x;
        const double s = 1.0 / (1.0 + std::exp(-(alpha[d] * z + beta[d])));
        const double ds = s * (1.0 - s);
        const double dz = g * (s + alpha[d] * z * ds);
        grad_x1[row + j] = g - dz;
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

// --- fp32: the vectorized kernels of swish_recurrence_cpu_vec.h ------------------------------

// The widest kernels this CPU runs: AVX-512, else AVX2+FMA (x86-64), else the portable ones.
// FAIRSEQ_EXT_CPU_KERNELS=avx2|portable caps the choice (for benchmarks and tests).
const SwishRecurrenceCpuKernels& choose_cpu_kernels() {
#if defined(__GNUC__) && defined(__x86_64__)
  const char* cap = std::getenv("FAIRSEQ_EXT_CPU_KERNELS");
  const std::string limit = cap ? cap : "";
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx512 && limit.empty()) return cpu_avx512::kernels;
  if (avx2 && limit != "portable") return cpu_avx2::kernels;
#endif
  return cpu_default::kernels;
}

const SwishRecurrenceCpuKernels& cpu_kernels() {
  static const SwishRecurrenceCpuKernels& chosen = choose_cpu_kernels();
  return chosen;
}

// alpha/beta of the columns [begin, begin + width): column b * D + d takes entry d.
void column_parameters(const float* parameter, int64_t D, int64_t begin, int64_t width,
                       float* out) {
  for (int64_t j = 0; j < width; ++j) out[j] = parameter[(begin + j) % D];
}

void forward_f32(const float* x1, const float* alpha, const float* beta, float* c, int64_t T,
                 int64_t B, int64_t D, int64_t k) {
  const int64_t columns = B * D;
  const SwishRecurrenceCpuKernels& kernels = cpu_kernels();
  at::parallel_for(0, columns, kColumnGrain, [&](int64_t chunk_begin, int64_t chunk_end) {
    // a thread's chunk, walked in blocks (kMaxColumnBlock)
    const int64_t block = column_block_width(chunk_end - chunk_begin);
    std::vector<float> state(static_cast<size_t>(k * block)), a(block), b(block);
    for (int64_t begin = chunk_begin; begin < chunk_end; begin += block) {
      const int64_t width = std::min(block, chunk_end - begin);
      std::fill(state.begin(), state.end(), 0.0f);
      column_parameters(alpha, D, begin, width, a.data());
      column_parameters(beta, D, begin, width, b.data());
      kernels.forward_block(x1, a.data(), b.data(), c, state.data(), T, columns, begin, width,
                            k);
    }
  });
}

void backward_f32(const float* grad_c, const float* x1, const float* c, const float* alpha,
                  const float* beta, float* grad_x1, float* grad_alpha_columns,
                  float* grad_beta_columns, int64_t T, int64_t B, int64_t D, int64_t k) {
  const int64_t columns = B * D;
  const SwishRecurrenceCpuKernels& kernels = cpu_kernels();
  at::parallel_for(0, columns, kColumnGrain, [&](int64_t chunk_begin, int64_t chunk_end) {
    const int64_t block = column_block_width(chunk_end - chunk_begin);
    std::vector<float> carry(static_cast<size_t>(k * block)), a(block), b(block);
    for (int64_t begin = chunk_begin; begin < chunk_end; begin += block) {
      const int64_t width = std::min(block, chunk_end - begin);
      std::fill(carry.begin(), carry.end(), 0.0f);
      column_parameters(alpha, D, begin, width, a.data());
      column_parameters(beta, D, begin, width, b.data());
      std::fill(grad_alpha_columns + begin, grad_alpha_columns + begin + width, 0.0f);
      std::fill(grad_beta_columns + begin, grad_beta_columns + begin + width, 0.0f);
      kernels.backward_block(grad_c, x1, c, a.data(), b.data(), grad_x1,
                             grad_alpha_columns + begin, grad_beta_columns + begin,
                             carry.data(), T, columns, begin, width, k);
    }
  });
}

at::Tensor swish_recurrence_cpu(const at::Tensor& x1_in, const at::Tensor& alpha_in,
                                const at::Tensor& beta_in, int64_t step) {
  check_swish_recurrence_inputs(x1_in, alpha_in, beta_in, step);
  const int64_t T = x1_in.size(0), B = x1_in.size(1), D = x1_in.size(2);
  if (x1_in.scalar_type() == at::kDouble) {
    const at::Tensor x1 = x1_in.contiguous(), alpha = alpha_in.contiguous(),
                     beta = beta_in.contiguous();
    at::Tensor c = at::empty_like(x1, at::MemoryFormat::Contiguous);
    forward_kernel_f64(x1.data_ptr<double>(), alpha.data_ptr<double>(),
                       beta.data_ptr<double>(), c.data_ptr<double>(), T, B, D, step);
    return c;
  }
  // fp32, and fp16/bf16 computed in fp32
  const at::Tensor x1 = x1_in.to(at::kFloat).contiguous(),
                   alpha = alpha_in.to(at::kFloat).contiguous(),
                   beta = beta_in.to(at::kFloat).contiguous();
  at::Tensor c = at::empty_like(x1, at::MemoryFormat::Contiguous);
  forward_f32(x1.data_ptr<float>(), alpha.data_ptr<float>(), beta.data_ptr<float>(),
              c.data_ptr<float>(), T, B, D, step);
  return c.to(x1_in.scalar_type());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> swish_recurrence_backward_cpu(
    const at::Tensor& grad_c_in, const at::Tensor& x1_in, const at::Tensor& c_in,
    const at::Tensor& alpha_in, const at::Tensor& beta_in, int64_t step) {
  check_swish_recurrence_inputs(x1_in, alpha_in, beta_in, step);
  TORCH_CHECK(grad_c_in.sizes() == x1_in.sizes() && c_in.sizes() == x1_in.sizes(),
              "swish_recurrence_backward: grad_c and c must have x1's shape");
  const int64_t T = x1_in.size(0), B = x1_in.size(1), D = x1_in.size(2);
  const auto dtype = x1_in.scalar_type();
  const auto compute = dtype == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor grad_c = grad_c_in.to(compute).contiguous(),
                   x1 = x1_in.to(compute).contiguous(), c = c_in.to(compute).contiguous(),
                   alpha = alpha_in.to(compute).contiguous(),
                   beta = beta_in.to(compute).contiguous();
  at::Tensor grad_x1 = at::empty_like(x1, at::MemoryFormat::Contiguous);
  at::Tensor grad_alpha_columns = at::empty({B, D}, x1.options());
  at::Tensor grad_beta_columns = at::empty({B, D}, x1.options());
  if (compute == at::kDouble) {
    backward_kernel_f64(grad_c.data_ptr<double>(), x1.data_ptr<double>(), c.data_ptr<double>(),
                        alpha.data_ptr<double>(), beta.data_ptr<double>(),
                        grad_x1.data_ptr<double>(), grad_alpha_columns.data_ptr<double>(),
                        grad_beta_columns.data_ptr<double>(), T, B, D, step);
  } else {
    backward_f32(grad_c.data_ptr<float>(), x1.data_ptr<float>(), c.data_ptr<float>(),
                 alpha.data_ptr<float>(), beta.data_ptr<float>(), grad_x1.data_ptr<float>(),
                 grad_alpha_columns.data_ptr<float>(), grad_beta_columns.data_ptr<float>(), T, B,
                 D, step);
  }
  return {grad_x1.to(dtype), grad_alpha_columns.sum(0).to(alpha_in.scalar_type()),
          grad_beta_columns.sum(0).to(beta_in.scalar_type())};
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

// An importable module (``fairseq_ext.ops._C``) whose import runs the registrations above;
// ``_C.cpu_kernels()`` names the fp32 CPU kernels in use ("AVX2" or "portable").
namespace {
PyObject* cpu_kernels_name(PyObject*, PyObject*) {
  return PyUnicode_FromString(fairseq_ext::cpu_kernels().name);
}
PyMethodDef module_methods[] = {
    {"cpu_kernels", cpu_kernels_name, METH_NOARGS,
     "Name of the fp32 CPU kernels of fairseq_ext::swish_recurrence in use."},
    {nullptr, nullptr, 0, nullptr}};
}  // namespace

extern "C" {
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1,
                                          module_methods};
  return PyModule_Create(&module_def);
}
}
