// Host emulation in place of c10's CUDAGuard.h, for the test build of the SwishRNN CUDA binding
// on the CPU (tests/cuda_host_emulation.py): one device, so the guard has nothing to switch.
#pragma once
#include <c10/core/Device.h>

namespace c10::cuda {
struct CUDAGuard {
  explicit CUDAGuard(c10::Device) {}
};
}  // namespace c10::cuda
