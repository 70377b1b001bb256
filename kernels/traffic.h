// traffic.h: what a kernel launch is labelled with besides its name: the bytes its threads read and
// write (Traffic), which the launcher knows from its sizes, and the launch written out for messages.
// nvcc ignores the bytes; the record-only emulated device hands them to the step's inventory
// (emu/recording.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace cutrain {

// The bytes a kernel's threads read and write in all, each element counted once.
struct Traffic {
  int64_t read = 0;
  int64_t written = 0;
};

// "name<<<(gx,gy,gz), (bx,by,bz), bytes>>>": a launch, for messages and for the record.
inline std::string describe_launch(const char* name, dim3 grid, dim3 block, size_t dynamic_shared_bytes) {
  char text[256];
  std::snprintf(text, sizeof text, "%s<<<(%u,%u,%u), (%u,%u,%u), %zu>>>", name, grid.x, grid.y, grid.z, block.x,
                block.y, block.z, dynamic_shared_bytes);
  return text;
}

}  // namespace cutrain
