// bf16.h: __nv_bfloat16 for the emulation (emu/), the conversions converting as the
// device's cvt.rn.bf16.f32 does:
//   float -> bf16: keep the top 16 bits of the float, rounded to nearest, ties to even
//                  (add 0x7fff plus the lowest kept bit, then truncate); every NaN becomes the
//                  canonical 0x7fff;
//   bf16 -> float: exact (the 16 bits become the float's top half).
// The constructors and conversions that cuda_bf16.h offers on the host are here too, so code
// that compiles against one compiles against the other.
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16_raw {
  unsigned short x;
};

inline unsigned short cutrain_emu_float_to_bf16_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  return static_cast<unsigned short>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

inline float cutrain_emu_bf16_bits_to_float(unsigned short x) {
  const uint32_t bits = uint32_t(x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

struct alignas(2) __nv_bfloat16 {
  unsigned short __x;

  __nv_bfloat16() = default;
  __nv_bfloat16(const __nv_bfloat16_raw& raw) : __x(raw.x) {}
  __nv_bfloat16& operator=(const __nv_bfloat16_raw& raw) {
    __x = raw.x;
    return *this;
  }
  operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }

  __nv_bfloat16(float f) : __x(cutrain_emu_float_to_bf16_bits(f)) {}
  operator float() const { return cutrain_emu_bf16_bits_to_float(__x); }
};

inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16_raw{cutrain_emu_float_to_bf16_bits(f)}; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return cutrain_emu_bf16_bits_to_float(h.__x); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { return __nv_bfloat16_raw{x}; }
