#include "kernels/base/crc32c.h"

#include <array>
#include <cstring>

#include <nmmintrin.h>

namespace cutrain {
namespace {

// A byte at a time from a table, for a CPU without SSE 4.2: the state is the CRC so far, inverted.
uint32_t crc32c_table(const unsigned char* p, size_t size, uint32_t state) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  for (size_t i = 0; i < size; ++i) state = table[(state ^ p[i]) & 0xff] ^ (state >> 8);
  return state;
}

// Eight bytes at a time with the crc32 instruction, which computes the same polynomial.
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const unsigned char* p, size_t size, uint32_t state) {
  uint64_t wide = state;
  for (; size >= 8; p += 8, size -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    wide = _mm_crc32_u64(wide, word);
  }
  state = uint32_t(wide);
  for (; size > 0; ++p, --size) state = _mm_crc32_u8(state, *p);
  return state;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const bool hardware = __builtin_cpu_supports("sse4.2");
  const auto* p = static_cast<const unsigned char*>(data);
  const uint32_t state = hardware ? crc32c_sse42(p, size, 0xffffffffu) : crc32c_table(p, size, 0xffffffffu);
  return state ^ 0xffffffffu;
}

}  // namespace cutrain
