// vector_types.h: CUDA's small vector types for the emulation (emu/), with the alignment
// the device gives them: a float4, int4 or uint4 is one 16-byte load or store, so it must sit on a
// 16-byte boundary (the emulated build checks every such access, see docs/emulated-gpu.md).
// Also dim3, the launch's shape, whose missing sizes default to 1.
#pragma once

#define CUTRAIN_EMU_VECTOR2(name, T, align) \
  struct alignas(align) name {              \
    T x, y;                                 \
  };                                        \
  inline name make_##name(T x, T y) { return name{x, y}; }
#define CUTRAIN_EMU_VECTOR3(name, T) \
  struct name {                      \
    T x, y, z;                       \
  };                                 \
  inline name make_##name(T x, T y, T z) { return name{x, y, z}; }
#define CUTRAIN_EMU_VECTOR4(name, T, align) \
  struct alignas(align) name {              \
    T x, y, z, w;                           \
  };                                        \
  inline name make_##name(T x, T y, T z, T w) { return name{x, y, z, w}; }

CUTRAIN_EMU_VECTOR4(char4, signed char, 4)
CUTRAIN_EMU_VECTOR4(uchar4, unsigned char, 4)
CUTRAIN_EMU_VECTOR2(short2, short, 4)
CUTRAIN_EMU_VECTOR2(ushort2, unsigned short, 4)
CUTRAIN_EMU_VECTOR2(int2, int, 8)
CUTRAIN_EMU_VECTOR2(uint2, unsigned int, 8)
CUTRAIN_EMU_VECTOR2(float2, float, 8)
CUTRAIN_EMU_VECTOR3(int3, int)
CUTRAIN_EMU_VECTOR3(uint3, unsigned int)
CUTRAIN_EMU_VECTOR3(float3, float)
CUTRAIN_EMU_VECTOR4(int4, int, 16)
CUTRAIN_EMU_VECTOR4(uint4, unsigned int, 16)
CUTRAIN_EMU_VECTOR4(float4, float, 16)
CUTRAIN_EMU_VECTOR2(longlong2, long long, 16)
CUTRAIN_EMU_VECTOR2(ulonglong2, unsigned long long, 16)
CUTRAIN_EMU_VECTOR2(double2, double, 16)

#undef CUTRAIN_EMU_VECTOR2
#undef CUTRAIN_EMU_VECTOR3
#undef CUTRAIN_EMU_VECTOR4

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};
