// nvtx.cpp: the emulated NVTX of emu/include/nvtx3/nvToolsExt.h.
#include <nvtx3/nvToolsExt.h>

#include "emu/recording.h"

int nvtxRangePushA(const char* name) {
  if (cutrain::Recorder* r = cutrain::recording()) r->push_phase(name);
  return 0;
}

int nvtxRangePop() {
  if (cutrain::Recorder* r = cutrain::recording()) r->pop_phase();
  return 0;
}
