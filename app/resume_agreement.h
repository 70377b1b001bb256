// resume_agreement.h: the ranks of a distributed run hold the same state before the first step.
//
// Every rank reads its own --resume (node-local --save folders may hold different files, or a node
// may be given another path), and the trainer's broadcast of rank 0's weights would then quietly
// give all of them rank 0's model while each kept its own step, epoch and data shard: one rank's
// steps paired with another's. So every rank says through the store what it holds, and all of them
// stop, in the same one line, when any differs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cutrain {

class Store;

// Publishes this rank's `held` (what is compared: the step, the position, the seed, the run and a
// digest) and `from` (the checkpoint it came from: said, not compared, since node-local folders
// may be mounted at different places), reads every rank's, and throws std::runtime_error naming
// which ranks hold what when they differ.
void check_ranks_hold_alike(Store& store, int rank, int world_size, const std::string& held,
                            const std::string& from);

// A 64-bit FNV-1a digest of `bytes` bytes, going on from `hash` (kFnvStart for the first bytes).
inline constexpr uint64_t kFnvStart = 0xcbf29ce484222325ull;
uint64_t fnv1a(const void* data, size_t bytes, uint64_t hash = kFnvStart);

}  // namespace cutrain
