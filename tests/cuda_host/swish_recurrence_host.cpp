// The test build of the SwishRNN CUDA kernels and of their torch binding on the CPU: the very
// lines of fairseq_ext/ops/csrc/swish_recurrence_kernels.cu and swish_recurrence_cuda.cpp, on the
// CUDA emulated by cuda_host_shim.h. tests/cuda_host_emulation.py compiles this file into a
// library that torch.ops.load_library loads; tests/test_cuda_host_emulation.py drives it.
//
// Ops of the test namespace fairseq_ext_cuda_host (CPU tensors):
// * swish_recurrence, swish_recurrence_backward: the binding's own functions, with the real op's
//   schemas (the binding's contiguity handling, dtype dispatch, partial-sum buffers and their
//   reduction included);
// * launch_forward, launch_backward: the raw launchers on flat buffers at an element offset (so
//   the test can surround every array with guard elements), returning the cudaError_t;
// * launches, clear_launches, current_stream, set_reverse_thread_order: the emulated launches;
// * float_to_half_bits, half_bits_to_float, float_to_bfloat16_bits, bfloat16_bits_to_float: the
//   shim's conversions, elementwise.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include <vector>

#include "cuda_host_shim.h"

// The kernels: the .cu with its launches rewritten, written into the build folder by
// tests/cuda_host_emulation.py, a #line directive first so diagnostics name the .cu's own lines.
#include "swish_recurrence_kernels_host.inc"

// The binding, unchanged. Its TORCH_LIBRARY_IMPL(fairseq_ext, CUDA, m) becomes the CPU kernels of
// this test namespace, so it registers its own functions under its own names, and the real
// op's registrations stay as they are.
#undef TORCH_LIBRARY_IMPL
#define TORCH_LIBRARY_IMPL(ns, k, m) _TORCH_LIBRARY_IMPL(fairseq_ext_cuda_host, CPU, m, C10_UID)
#include "swish_recurrence_cuda.cpp"
#undef TORCH_LIBRARY_IMPL
#define TORCH_LIBRARY_IMPL(ns, k, m) _TORCH_LIBRARY_IMPL(ns, k, m, C10_UID)

namespace cuda_host {
namespace {

template <typename T>
const typename fairseq_ext::Cuda<T>::type* at_offset(const at::Tensor& t, int64_t offset) {
  TORCH_CHECK(t.is_contiguous() && offset >= 0 && offset <= t.numel(), "bad buffer");
  return reinterpret_cast<const typename fairseq_ext::Cuda<T>::type*>(t.data_ptr<T>()) + offset;
}
template <typename T>
typename fairseq_ext::Cuda<T>::type* mutable_at_offset(const at::Tensor& t, int64_t offset) {
  return const_cast<typename fairseq_ext::Cuda<T>::type*>(at_offset<T>(t, offset));
}
template <typename T>
T* acc_at_offset(const at::Tensor& t, int64_t offset) {
  TORCH_CHECK(t.is_contiguous() && offset >= 0 && offset <= t.numel(), "bad buffer");
  return t.data_ptr<T>() + offset;
}

int64_t launch_forward(const at::Tensor& x1, const at::Tensor& alpha, const at::Tensor& beta,
                       const at::Tensor& c, int64_t offset, int64_t length, int64_t batch, int64_t dim,
                       int64_t k) {
  cudaError_t error = cudaSuccess;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x1.scalar_type(), "launch_forward",
                                  [&] {
    error = fairseq_ext::Cuda<scalar_t>::forward(
        at_offset<scalar_t>(x1, offset), at_offset<scalar_t>(alpha, offset),
        at_offset<scalar_t>(beta, offset), mutable_at_offset<scalar_t>(c, offset), length, batch,
        dim, k, current_stream());
  });
  return error;
}

int64_t launch_backward(const at::Tensor& grad_c, const at::Tensor& x1, const at::Tensor& c,
                        const at::Tensor& alpha, const at::Tensor& beta, const at::Tensor& grad_x1,
                        const at::Tensor& grad_alpha_items, const at::Tensor& grad_beta_items,
                        int64_t offset,
                        int64_t length, int64_t batch, int64_t dim, int64_t k) {
  cudaError_t error = cudaSuccess;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x1.scalar_type(), "launch_backward",
                                  [&] {
    using acc_t = at::opmath_type<scalar_t>;
    error = fairseq_ext::Cuda<scalar_t>::backward(
        at_offset<scalar_t>(grad_c, offset), at_offset<scalar_t>(x1, offset),
        at_offset<scalar_t>(c, offset), at_offset<scalar_t>(alpha, offset),
        at_offset<scalar_t>(beta, offset), mutable_at_offset<scalar_t>(grad_x1, offset),
        acc_at_offset<acc_t>(grad_alpha_items, offset),
        acc_at_offset<acc_t>(grad_beta_items, offset), length, batch, dim, k, current_stream());
  });
  return error;
}

// Per launch: grid x, y, z, block x, y, z, shared bytes, stream handle, threads run.
std::vector<int64_t> launch_records() {
  std::vector<int64_t> out;
  for (const LaunchRecord& r : launches()) {
    const LaunchConfig& c = r.config;
    out.insert(out.end(), {c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z,
                           static_cast<int64_t>(c.shared_bytes),
                           static_cast<int64_t>(reinterpret_cast<intptr_t>(c.stream)),
                           r.threads_run});
  }
  return out;
}

void clear_launches() { launches().clear(); }

int64_t current_stream_handle() {
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(current_stream()));
}

void set_reverse_thread_order(bool reverse) { reverse_thread_order = reverse; }

template <typename Storage, Storage (*convert)(float)>
at::Tensor to_bits(const at::Tensor& values) {
  const at::Tensor in = values.to(at::kFloat).contiguous();
  at::Tensor out = at::empty(in.sizes(), in.options().dtype(at::kShort));
  const float* src = in.data_ptr<float>();
  int16_t* dst = out.data_ptr<int16_t>();
  for (int64_t i = 0; i < in.numel(); ++i) dst[i] = static_cast<int16_t>(convert(src[i]).x);
  return out;
}

template <typename Storage, float (*convert)(Storage)>
at::Tensor from_bits(const at::Tensor& bits) {
  const at::Tensor in = bits.contiguous();
  TORCH_CHECK(in.scalar_type() == at::kShort, "bits must be int16");
  at::Tensor out = at::empty(in.sizes(), in.options().dtype(at::kFloat));
  const int16_t* src = in.data_ptr<int16_t>();
  float* dst = out.data_ptr<float>();
  for (int64_t i = 0; i < in.numel(); ++i) {
    dst[i] = convert(Storage{static_cast<unsigned short>(src[i])});
  }
  return out;
}

}  // namespace
}  // namespace cuda_host

TORCH_LIBRARY(fairseq_ext_cuda_host, m) {
  // The real op's schemas (swish_recurrence.cpp; the test checks they are the same).
  m.def("swish_recurrence(Tensor x1, Tensor alpha, Tensor beta, int step) -> Tensor");
  m.def("swish_recurrence_backward(Tensor grad_c, Tensor x1, Tensor c, Tensor alpha, "
        "Tensor beta, int step) -> (Tensor, Tensor, Tensor)");
  m.def("launch_forward(Tensor x1, Tensor alpha, Tensor beta, Tensor(a!) c, int offset, "
        "int length, int batch, int dim, int k) -> int", &cuda_host::launch_forward);
  m.def("launch_backward(Tensor grad_c, Tensor x1, Tensor c, Tensor alpha, Tensor beta, "
        "Tensor(a!) grad_x1, Tensor(b!) grad_alpha_items, Tensor(c!) grad_beta_items, "
        "int offset, int length, int batch, int dim, int k) -> int",
        &cuda_host::launch_backward);
  m.def("launches() -> int[]", &cuda_host::launch_records);
  m.def("clear_launches() -> ()", &cuda_host::clear_launches);
  m.def("current_stream() -> int", &cuda_host::current_stream_handle);
  m.def("set_reverse_thread_order(bool reverse) -> ()", &cuda_host::set_reverse_thread_order);
  m.def("float_to_half_bits(Tensor x) -> Tensor",
        &cuda_host::to_bits<__half, __float2half>);
  m.def("half_bits_to_float(Tensor bits) -> Tensor",
        &cuda_host::from_bits<__half, __half2float>);
  m.def("float_to_bfloat16_bits(Tensor x) -> Tensor",
        &cuda_host::to_bits<__nv_bfloat16, __float2bfloat16>);
  m.def("bfloat16_bits_to_float(Tensor bits) -> Tensor",
        &cuda_host::from_bits<__nv_bfloat16, __bfloat162float>);
}
