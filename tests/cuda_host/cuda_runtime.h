// Host emulation (tests/cuda_host/cuda_host_shim.h) in place of CUDA's cuda_runtime.h, for the test build
// of the SwishRNN kernels on the CPU (tests/cuda_host_emulation.py).
#pragma once
#include "cuda_host_shim.h"
