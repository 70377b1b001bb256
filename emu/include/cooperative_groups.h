// The emulation's <cooperative_groups.h> (emu/): the grid of a cooperative launch and its
// barrier, this_grid().sync() (block.h says how the emulation runs it).
#pragma once

#include "emu/block.h"

namespace cooperative_groups {

class grid_group {
 public:
  void sync() const { cutrain::emu::sync_grid(); }
};

inline grid_group this_grid() { return grid_group{}; }

}  // namespace cooperative_groups
