// The emulation's <cuda_bf16.h> (emu/): __nv_bfloat16 and its conversions.
#pragma once

#include "emu/bf16.h"
