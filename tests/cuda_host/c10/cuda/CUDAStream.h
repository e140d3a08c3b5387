// Host emulation in place of c10's CUDAStream.h, for the test build of the SwishRNN CUDA binding
// (fairseq_ext/ops/csrc/swish_recurrence_cuda.cpp) on the CPU (tests/cuda_host_emulation.py):
// getCurrentCUDAStream().stream() returns a stream handle that is not the default stream (0), so
// the test can check that the launchers launch on the stream the binding hands them.
#pragma once
#include <c10/core/Device.h>

#include "cuda_host_shim.h"

namespace cuda_host {
// The handle of "the current stream": never dereferenced, only compared.
inline cudaStream_t current_stream() { return reinterpret_cast<cudaStream_t>(0x5EA5EA); }
}  // namespace cuda_host

namespace c10::cuda {
struct CUDAStream {
  cudaStream_t stream() const { return cuda_host::current_stream(); }
};
inline CUDAStream getCurrentCUDAStream(c10::DeviceIndex = -1) { return {}; }
}  // namespace c10::cuda
