// The NCCL header for NcclComm (parallel/nccl_comm.h): the real one, or in the emulated
// build (PPTRAIN_EMULATED: tests and pptrain-emu) the shim of emu/ that carries NCCL
// calls on MPI. Chosen here, beside cuda_api.h, so only the cuda backend names the emulator.
#pragma once
#include "backend/cuda/cuda_api.h"
#ifdef PPTRAIN_EMULATED
#include "emu/nccl_emu.h"
#else
#include <nccl.h>
#endif
