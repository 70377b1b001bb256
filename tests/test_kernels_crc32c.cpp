// CRC-32C: the check value of its standard, and every length against the bitwise definition, so that the
// hardware path's eight-byte steps and its tail agree with the polynomial.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "kernels/base/crc32c.h"

namespace {

// The definition, a bit at a time: reflected polynomial 0x82f63b78, initial and final inversion.
uint32_t crc32c_bitwise(const std::vector<uint8_t>& bytes) {
  uint32_t crc = 0xffffffffu;
  for (uint8_t b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
  }
  return crc ^ 0xffffffffu;
}

}  // namespace

TEST_CASE("crc32c: the standard's check value, and every length from 0 to 40 as the definition gives", "[kernels]") {
  CHECK(cutrain::crc32c("123456789", 9) == 0xe3069283u);
  std::vector<uint8_t> bytes;
  for (int n = 0; n <= 40; ++n) {
    CHECK(cutrain::crc32c(bytes.data(), bytes.size()) == crc32c_bitwise(bytes));
    bytes.push_back(uint8_t(n * 37 + 11));
  }
}
