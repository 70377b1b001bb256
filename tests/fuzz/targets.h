// targets.h: the fuzz targets, each a function over the bytes of one input that must never crash,
// leak or hang, whatever the bytes: it either accepts them or refuses them with the usual one-line
// error. Two programs call them:
//   - libFuzzer (tests/fuzz/CMakeLists.txt, scripts/fuzz.sh): one fuzzer per target, which mutates
//     the seed corpus in tests/fuzz/corpus/<target>/ looking for a crash;
//   - cutrain_tests (tests/test_fuzz_inputs.cpp): every seed, and every input a fuzzer ever crashed
//     on (kept in tests/fuzz/crashes/<target>/ once fixed), replayed as a plain test.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cutrain::fuzz {

// One CIFAR-10 .bin file (data/cifar10.h).
void cifar10_records(const uint8_t* data, size_t size);
// One safetensors file: header length, JSON header, data (nn/safetensors.h).
void safetensors_file(const uint8_t* data, size_t size);
// One image file, decoded and resized to 32 x 32 as the image folder reader does (data/image_folder.h).
void image_file(const uint8_t* data, size_t size);
// What clients send to the store: frames from a few connections into one store (dist/launch/store_state.h).
void store_messages(const uint8_t* data, size_t size);

}  // namespace cutrain::fuzz

// Each target's source ends with this, so that the fuzz build (which defines CUTRAIN_FUZZER) makes
// a libFuzzer program of it.
#ifdef CUTRAIN_FUZZER
#define CUTRAIN_FUZZER_ENTRY(target)                                                \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {        \
    cutrain::fuzz::target(data, size);                                              \
    return 0;                                                                       \
  }
#else
#define CUTRAIN_FUZZER_ENTRY(target)
#endif
