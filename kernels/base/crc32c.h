// crc32c.h: CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), the checksum of iSCSI, ext4 and
// TensorBoard's records. It finds every burst error of up to 32 bits and any odd number of flipped bits,
// and x86-64 CPUs since 2008 compute it in hardware (SSE 4.2's crc32 instruction, several GB/s), so that
// checking a whole checkpoint costs milliseconds (Note [Tensor checksums] in nn/safetensors.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cutrain {

// The CRC-32C of `size` bytes at `data`; crc32c("123456789", 9) is 0xe3069283.
uint32_t crc32c(const void* data, size_t size);

}  // namespace cutrain
