// The CUDA runtime and cuBLAS headers of the cuda backend: the real ones, or in the
// emulated build (PPTRAIN_EMULATED: tests and pptrain-emu) the host shims of emu/ that run
// the same host code on the CPU with the kernels under the SIMT emulator.
#pragma once
#ifdef PPTRAIN_EMULATED
#include "emu/cublas_emu.h"
#include "emu/cuda_runtime_emu.h"
#else
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif
