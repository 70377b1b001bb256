// rng.cuh: counter-based random numbers, the same on the CPU and the GPU.
//
// A counter-based generator has no state to carry or split: the random bits for an event are a
// hash of the event's coordinates, here (seed, epoch, sample index). Any thread on any rank that
// asks about sample 17 of epoch 3 gets the same bits, whatever the thread count, batch size or
// world size. The hash is splitmix64's finaliser (Steele, Lea & Flood, "Fast splittable
// pseudorandom number generators", 2014), chained once per coordinate.
#pragma once

#include <cstdint>

// Functions compiled for both sides when nvcc builds a .cu file, plain C++ under g++.
#ifndef CUTRAIN_HOST_DEVICE
#ifdef __CUDACC__
#define CUTRAIN_HOST_DEVICE __host__ __device__
#else
#define CUTRAIN_HOST_DEVICE
#endif
#endif

namespace cutrain {

// splitmix64's output function: a bijection on 64 bits whose every output bit depends on every
// input bit. x += 0x9e3779b97f4a7c15 (the golden ratio), then two xorshift-multiply rounds.
CUTRAIN_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// 64 random bits for one (seed, epoch, index) event: hash(hash(hash(seed) ^ epoch) ^ index).
CUTRAIN_HOST_DEVICE inline uint64_t random_bits(uint64_t seed, uint64_t epoch, uint64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ epoch) ^ index);
}

}  // namespace cutrain
