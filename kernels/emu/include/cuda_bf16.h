// The emulation's <cuda_bf16.h> (kernels/emu): __nv_bfloat16 and its conversions.
#pragma once

#include "kernels/emu/bf16.h"
