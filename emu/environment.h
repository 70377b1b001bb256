// environment.h: how the emulation (emu/) reads its CUTRAIN_EMU_* variables that hold a
// number: CUTRAIN_EMU_STREAM_SEED (stream_scheduler.h) and CUTRAIN_EMU_DEVICES (runtime.h).
#pragma once

#include <cstdint>

namespace cutrain::emu {

// The variable `name` as a decimal integer from `least` to `most`, or `fallback` where it is unset
// or empty. Any other value (a sign, a space, a letter, a number out of range) ends the program
// with one line naming the variable, its value and what is expected, and exit status 2.
uint64_t integer_from_environment(const char* name, uint64_t fallback, uint64_t least, uint64_t most);

}  // namespace cutrain::emu
