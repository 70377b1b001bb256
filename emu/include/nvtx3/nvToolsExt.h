// The emulation's <nvtx3/nvToolsExt.h> (emu/): the tool that listens is the step's
// inventory. A range pushed or popped while a recorder is installed (emu/recording.h) names
// the work enqueued inside it; otherwise a push or pop does nothing. Each answers as NVTX does
// without a profiler attached.
#pragma once

int nvtxRangePushA(const char* name);
int nvtxRangePop();
