// The emulation's <cuda_runtime.h> (emu/): the emulated build puts this folder on the
// include path instead of the CUDA toolkit's, so kernels/, their tests and the GPU loader compile
// unchanged against the emulated runtime and device.
#pragma once

#include <library_types.h>

#include "emu/device.h"
#include "emu/runtime.h"
