// batchnorm.cu: the CUDA side of batchnorm.h, with the element math of batchnorm.cuh.
//
// x[M, C] is NHWC memory, so a row is one pixel's C channels, contiguous. Every kernel uses one
// thread layout: a thread owns a group of 8 consecutive channels (one byte of the ReLU mask) for
// its whole life, picked by threadIdx.x and blockIdx.x, so its per-channel constants sit in
// registers; threadIdx.y picks rows. A group moves as 16-byte packs (one of 8 bf16, two of 4
// floats) when C and the addresses allow, element by element otherwise. Neighbouring threads read
// neighbouring groups of a row: contiguous memory.
//
// The cooperative kernels (training forward and backward, and SyncBatchNorm's statistics and sums)
// have every block resident at once (launch_cooperative_kernel), one per multiprocessor:
//   1. block (gx, gy) takes chunk gy of the rows and group column gx of the channels; each thread
//      accumulates its rows (Welford's statistics forward, the sums t1, t2 backward) and keeps its
//      first plan.cached_rows of them in shared memory;
//   2. the block merges its threads' statistics in a fixed order (warp shuffles, then a pairwise
//      tree through shared memory) into partials[chunk][channel];
//   3. grid barrier; block b merges every chunk's partial of its share of the channels, in an
//      order fixed by the grid, and writes the result: mean, invstd and the running statistics,
//      or dgamma, dbeta;
//   4. grid barrier; every thread reads its channels' results and applies them to its rows, from
//      shared memory where it kept them, re-reading the rest.
// Nothing is atomic and nothing needs zeroing, and every merge happens in an order the plan fixes,
// so two runs give the same bits, eager or replayed from a CUDA graph.
//
// Why it cannot deadlock: a cooperative launch starts only when its whole grid fits the device at
// once (else it fails at launch, naming the kernel), so every block reaches each barrier. Kernels
// on other streams (the weight-gradient convolutions, NCCL's) may hold multiprocessors meanwhile,
// but none of them waits for a batch norm kernel, so they finish and free them; the batch norm
// kernels themselves run in order on the compute stream, never two at once. In a CUDA graph the
// kernel node keeps the cooperative attribute.
//
// A split plan (Note [Split batch norm] in batchnorm.h) launches the same kernels with the same
// grid as ordinary launches, which stop after step 2: each block takes a ticket once its partials
// are written, and the block that draws the last one does step 3 for every channel, merging in the
// order that merge_chunks gives each channel in the cooperative grid. No block ever waits for
// another, so the grid needs no residency. Step 4 is then an elementwise launch.
//
// The elementwise kernels (eval forward, SyncBatchNorm's apply stages, a split plan's step 4)
// stride down the rows with ordinary grids.
#include "kernels/batchnorm.h"

#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/base/check.h"
#include "kernels/batchnorm.cuh"
#include "kernels/launch.cuh"
#include "kernels/numeric.cuh"

namespace cutrain {

namespace {

constexpr int kGroup = 8;            // channels per thread: one byte of the ReLU mask
constexpr int kMaxGroupsAcross = 8;  // groups across a block: 64 channels, 128 or 256 bytes of a row
constexpr int kElementwiseThreads = 256;
constexpr int kElementwiseRowsPerThread = 8;

__host__ __device__ constexpr int ceil_div(int64_t a, int64_t b) { return int((a + b - 1) / b); }

// ---- a thread's group of channels ---------------------------------------------------------------

// A group's elements as they lie in memory: one or two 16-byte packs.
template <typename T>
struct Group {
  static constexpr int kPackWidth = kWidestPack<T>;
  static constexpr int kPacks = kGroup / kPackWidth;
  Pack<T, kPackWidth> packs[kPacks];
  __device__ T& operator[](int v) { return packs[v / kPackWidth].v[v % kPackWidth]; }
  __device__ const T& operator[](int v) const { return packs[v / kPackWidth].v[v % kPackWidth]; }
};

// Channels c0 .. c0+7 of a row. VECTOR: as 16-byte packs (C a multiple of 8, every row aligned);
// else element by element, zeros past the row's end.
template <bool VECTOR, typename T>
__device__ Group<T> load_group(const T* row, int c0, int C) {
  Group<T> g;
  if constexpr (VECTOR) {
    for (int p = 0; p < Group<T>::kPacks; ++p)
      g.packs[p] = load_pack<Group<T>::kPackWidth>(row + c0 + p * Group<T>::kPackWidth);
  } else {
    for (int v = 0; v < kGroup; ++v) g[v] = c0 + v < C ? row[c0 + v] : from_float<T>(0.0f);
  }
  return g;
}

template <bool VECTOR, typename T>
__device__ void store_group(T* row, int c0, int C, const Group<T>& g) {
  if constexpr (VECTOR) {
    for (int p = 0; p < Group<T>::kPacks; ++p)
      store_pack<Group<T>::kPackWidth>(row + c0 + p * Group<T>::kPackWidth, g.packs[p]);
  } else {
    for (int v = 0; v < kGroup; ++v)
      if (c0 + v < C) row[c0 + v] = g[v];
  }
}

// values[v] = per_channel[c0 + v], zero past the row's end: a thread's constants, into registers.
__device__ void load_channels(const float* per_channel, int c0, int C, float (&values)[kGroup]) {
  for (int v = 0; v < kGroup; ++v) values[v] = c0 + v < C ? per_channel[c0 + v] : 0.0f;
}

// The ReLU mask's byte of row m and the group from c0: bit v is [z > 0] of channel c0 + v.
template <typename Byte>
__device__ Byte& mask_byte(Byte* mask, int64_t m, int C, int c0) {
  return mask[m * ceil_div(C, 8) + c0 / kGroup];
}

// dz = dy * act'(z) for the group of row m: dy's elements, and under a ReLU the bits [z > 0].
template <bool VECTOR, typename T>
__device__ void load_dz(const T* dy, unsigned bits, int64_t m, int C, int c0, BatchNormFusion fusion,
                        float (&dz)[kGroup]) {
  const Group<T> dys = load_group<VECTOR>(dy + m * C, c0, C);
  for (int v = 0; v < kGroup; ++v) dz[v] = bn_dz(to_float(dys[v]), (bits >> v) & 1u, fusion);
}

// ... with the bits from the ReLU mask.
template <bool VECTOR, typename T>
__device__ void load_dz(const T* dy, const uint8_t* mask, int64_t m, int C, int c0, BatchNormFusion fusion,
                        float (&dz)[kGroup]) {
  load_dz<VECTOR>(dy, fusion.relu ? unsigned(mask_byte(mask, m, C, c0)) : 0u, m, C, c0, fusion, dz);
}

// What bn_backward_recompute takes instead of the mask (Note [Batch norm before a fused
// convolution]): the prologue's constants, and where its activation goes (null: nowhere).
template <typename T>
struct Recompute {
  const float* scale;
  const float* shift;
  T* activation;
};

// The prologue's z of a group: its mask bits [z > 0], and its activation max(z, 0) into `as`.
template <typename T>
__device__ unsigned prologue_group(const Group<T>& xs, const float (&scale)[kGroup], const float (&shift)[kGroup],
                                   int c0, int C, BatchNormFusion fusion, Group<T>& as) {
  unsigned bits = 0;
  for (int v = 0; v < kGroup; ++v) {
    const float z = bn_prologue_preactivation(to_float(xs[v]), scale[v], shift[v]);
    as[v] = from_float<T>(bn_activation(z, fusion));
    bits |= unsigned(z > 0.0f && c0 + v < C) << v;
  }
  return bits;
}

// The backward's constants of the thread's channels (batchnorm.cuh), from the sums t1 and t2.
template <typename T>
__device__ void load_backward_channels(const BatchNormBackward<T>& b, const float* t1, const float* t2, int c0, int C,
                                       float inv_count, BackwardChannel (&k)[kGroup]) {
  for (int v = 0; v < kGroup; ++v) {
    const int c = std::min(c0 + v, C - 1);  // past the row's end: a copy of the last channel, never stored
    k[v] = bn_backward_channel(b.gamma[c], b.invstd[c], t1[c], t2[c], inv_count);
  }
}

// The thread's first channel, its index in the block, the block's threads.
__device__ int thread_channel() { return int(blockIdx.x * blockDim.x + threadIdx.x) * kGroup; }
__device__ int block_thread() { return int(threadIdx.y * blockDim.x + threadIdx.x); }
__device__ int block_threads() { return int(blockDim.x * blockDim.y); }

// ---- fixed-order merges --------------------------------------------------------------------------

__device__ Welford shuffle_down(const Welford& w, int offset) {
  return {__shfl_down_sync(0xffffffffu, w.count, offset), __shfl_down_sync(0xffffffffu, w.mean, offset),
          __shfl_down_sync(0xffffffffu, w.m2, offset)};
}

__device__ Sums shuffle_down(const Sums& s, int offset) {
  return {__shfl_down_sync(0xffffffffu, s.t1, offset), __shfl_down_sync(0xffffffffu, s.t2, offset)};
}

// entries[e * width + j] for e < count merged pairwise in a fixed order into entries[j]:
// e with e+1, e+2 with e+3, ..., then in pairs of pairs, each level after a barrier.
template <typename Stat>
__device__ void tree_merge(Stat* entries, int count, int width) {
  for (int stride = 1; stride < count; stride *= 2) {
    const int tasks = ceil_div(count, 2 * stride) * width;
    for (int task = block_thread(); task < tasks; task += block_threads()) {
      const int e = task / width * 2 * stride, j = task % width;
      if (e + stride < count) entries[e * width + j] = merge(entries[e * width + j], entries[(e + stride) * width + j]);
    }
    __syncthreads();  // this level's merges done before the next level reads them
  }
}

// The block's statistics of its channels, into scratch[0 .. W) (W = blockDim.x * kGroup), from
// every thread's `mine`: inside each warp first (the lanes of one group are blockDim.x apart, a
// power of two up to 8), then the warps' results through shared memory.
template <typename Stat>
__device__ void merge_block(Stat (&mine)[kGroup], Stat* scratch) {
  const int lane = block_thread() % 32, warp = block_thread() / 32, width = int(blockDim.x) * kGroup;
  for (int offset = 16; offset >= int(blockDim.x); offset /= 2)
    for (int v = 0; v < kGroup; ++v) mine[v] = merge(mine[v], shuffle_down(mine[v], offset));
  if (lane < int(blockDim.x))  // the warp's first row: lane = threadIdx.x
    for (int v = 0; v < kGroup; ++v) scratch[warp * width + lane * kGroup + v] = mine[v];
  __syncthreads();  // every warp's entries written
  tree_merge(scratch, block_threads() / 32, width);
}

// partials[chunk][c] merged over every chunk for the channels c0 .. c0+width-1, into
// scratch[0 .. width): slice s of channel c merges chunks s, s + slices(c), s + 2*slices(c), ... in
// turn into scratch[s * width + c - c0] (nothing, for s >= slices(c)), then a tree merges the
// `entries` slices. Merging nothing leaves a statistic as it is, so the order depends on slices(c)
// only, not on `entries` (at least slices(c) or the chunks, whichever is fewer) nor on which
// thread merges what.
template <typename Stat, typename Slices>
__device__ void merge_chunk_slices(const Stat* partials, int chunks, int C, int c0, int width, int entries,
                                   Slices slices, Stat* scratch) {
  for (int task = block_thread(); task < entries * width; task += block_threads()) {
    const int j = task % width, slice = task / width, stride = slices(c0 + j);
    Stat total{};
    if (slice < stride)
      for (int chunk = slice; chunk < chunks; chunk += stride)
        total = merge(total, partials[int64_t(chunk) * C + c0 + j]);
    scratch[slice * width + j] = total;
  }
  __syncthreads();  // every slice's entry written
  tree_merge(scratch, entries, width);
}

// The slices of channel c in a cooperative grid of `blocks` blocks of `threads` (merge_chunks).
__device__ int cooperative_slices(int c, int C, int blocks, int threads) {
  const int share = ceil_div(C, blocks), first = c / share * share, end = std::min(C, first + share);
  const int c0 = first + (c - first) / threads * threads;
  return threads / std::min(threads, end - c0);
}

// After the grid barrier: block b of the grid merges partials[chunk][c] over all chunks for its
// share of the channels, and calls finish(c, total) from one thread per channel. Several threads
// share a channel's chunks (slices, as many as the block has threads for each channel), then a
// tree merges the slices: an order that depends on the grid only.
template <typename Stat, typename Finish>
__device__ void merge_chunks(const Stat* partials, int chunks, int C, Stat* scratch, Finish finish) {
  const int blocks = int(gridDim.x * gridDim.y), b = int(blockIdx.y * gridDim.x + blockIdx.x);
  const int share = ceil_div(C, blocks), first = std::min(C, b * share), end = std::min(C, first + share);
  for (int c0 = first; c0 < end; c0 += block_threads()) {
    const int width = std::min(block_threads(), end - c0), slices = block_threads() / width;
    merge_chunk_slices(
        partials, chunks, C, c0, width, slices, [=](int) { return slices; }, scratch);
    if (block_thread() < width) finish(c0 + block_thread(), scratch[block_thread()]);
    __syncthreads();  // before the next round reuses scratch
  }
}

// Note [Split batch norm], in the kernels: whether this block is the last of the grid to have
// written its partials. Each block makes its writes visible to the whole device and takes a ticket;
// the block that draws the last one resets the counter for the next launch, and then reads what
// the others wrote. (Emulated, blocks run one at a time, so the one static flag is the block's.)
__device__ bool last_block_to_finish(unsigned* ticket) {
  __shared__ bool last;
  __threadfence();  // this thread's partials visible to the whole device
  __syncthreads();  // ... and every thread's, before the block takes its ticket
  if (block_thread() == 0) {
    last = atomicAdd(ticket, 1u) == gridDim.x * gridDim.y - 1;
    if (last) *ticket = 0;  // every block has drawn its ticket
  }
  __syncthreads();
  if (last) __threadfence();  // the others' partials read only after the ticket
  return last;
}

// The last block's merge of a split launch: every channel's partials over all chunks, in the order
// of merge_chunks in the cooperative grid that has this launch's shape, so that both give the same
// bits. As many channels at a time as `capacity` entries of scratch hold with every chunk's slice.
template <typename Stat, typename Finish>
__device__ void merge_chunks_in_last_block(const Stat* partials, int chunks, int C, Stat* scratch, int capacity,
                                           Finish finish) {
  const int blocks = int(gridDim.x * gridDim.y), threads = block_threads();
  const int round = std::max(1, capacity / chunks);
  for (int c0 = 0; c0 < C; c0 += round) {
    const int width = std::min(round, C - c0);
    merge_chunk_slices(
        partials, chunks, C, c0, width, chunks, [=](int c) { return cooperative_slices(c, C, blocks, threads); },
        scratch);
    for (int j = block_thread(); j < width; j += threads) finish(c0 + j, scratch[j]);
    __syncthreads();  // before the next round reuses scratch
  }
}

// Step 3 of the cooperative kernels, and its split form: partials[chunk][c] merged over the chunks,
// finish(c, total) called once for every channel, by the grid after its barrier or by the last
// block of a split launch. True when the caller goes on to step 4 (only the cooperative grid).
template <typename Stat, typename Finish>
__device__ bool merge_partials(bool split, unsigned* ticket, const Stat* partials, int C, Stat* scratch,
                               int scratch_bytes, Finish finish) {
  if (split) {
    if (last_block_to_finish(ticket))
      merge_chunks_in_last_block(partials, int(gridDim.y), C, scratch, scratch_bytes / int(sizeof(Stat)), finish);
    return false;
  }
  cooperative_groups::this_grid().sync();  // every block's partials written
  merge_chunks(partials, int(gridDim.y), C, scratch, finish);
  return true;
}

// ---- the cooperative kernels ---------------------------------------------------------------------

// What a cooperative kernel takes of its plan.
struct Tiling {
  int64_t M;
  int C;
  BatchNormFusion fusion;
  int64_t rows_per_block;
  int cached_rows;
  int scratch_bytes;  // the front of shared memory; the cached rows follow
  bool split;         // Note [Split batch norm]: stop after step 3, which the last block does
};

// The rows of this thread: chunk blockIdx.y, then every blockDim.y-th row.
struct ThreadRows {
  int64_t first, end, stride;
  __device__ explicit ThreadRows(const Tiling& t)
      : first(int64_t(blockIdx.y) * t.rows_per_block + threadIdx.y),
        end(std::min(t.M, int64_t(blockIdx.y + 1) * t.rows_per_block)),
        stride(blockDim.y) {}
};

// Shared memory: the scratch of the merges, then the cached rows, `tensors` of them per row.
template <typename Stat>
__device__ Stat* scratch_memory(float4* shared) {
  return reinterpret_cast<Stat*>(shared);
}
template <typename T>
__device__ Group<T>* cache_memory(float4* shared, const Tiling& t) {
  return reinterpret_cast<Group<T>*>(reinterpret_cast<unsigned char*>(shared) + t.scratch_bytes);
}

// What bn_forward_train_kernel writes in step 3, and whether it goes on to step 4.
enum class ForwardWrites {
  train,            // the statistics and running statistics, then y and the mask
  rank_statistics,  // SyncBatchNorm: this rank's statistics, to s, and stops
  prologue,         // Note [Batch norm before a fused convolution]: the statistics, running
                    // statistics, scale and shift, and stops
};

// Training forward in one launch: Welford statistics, running statistics, y and the ReLU mask.
// Or less, as `writes` says. Split (t.split): stops after step 3, and bn_apply_kernel does step 4.
//   y = act((x - mean)*gamma*invstd + beta [+ residual]),  mask = [pre-activation > 0]
template <typename T, bool VECTOR>
__global__ void __launch_bounds__(1024, 1)
    bn_forward_train_kernel(Tiling t, BatchNormForward<T> f, BatchNormRankStats s, float* prologue_scale,
                            float* prologue_shift, Welford* partials, unsigned* ticket, ForwardWrites writes) {
  CUTRAIN_DYNAMIC_SHARED(float4, shared);
  Welford* scratch = scratch_memory<Welford>(shared);
  Group<T>* cache = cache_memory<T>(shared, t);
  const int C = t.C, c0 = thread_channel(), tid = block_thread(), threads = block_threads();
  const ThreadRows rows(t);

  // 1. This thread's rows: Welford's running statistics, the first rows kept.
  Welford mine[kGroup];
  if (c0 < C) {
    int k = 0;
    float count = 0.0f;
    for (int64_t m = rows.first; m < rows.end; m += rows.stride, ++k) {
      const Group<T> xs = load_group<VECTOR>(f.x + m * C, c0, C);
      if (k < t.cached_rows) cache[k * threads + tid] = xs;
      count += 1.0f;
      const float inv_count = 1.0f / count;
      for (int v = 0; v < kGroup; ++v) welford_add(mine[v], to_float(xs[v]), count, inv_count);
    }
  }

  // 2. The block's statistics, to partials[chunk][channel].
  merge_block(mine, scratch);
  const int width = int(blockDim.x) * kGroup, channel = int(blockIdx.x) * width + tid;
  if (tid < width && channel < C) partials[int64_t(blockIdx.y) * C + channel] = scratch[tid];

  // 3. Every chunk's partials merged, for this block's share of the channels.
  const auto finish = [&](int c, const Welford& total) {
    if (writes == ForwardWrites::rank_statistics) {
      s.local_mean[c] = total.mean;
      s.local_m2[c] = total.m2;
      s.sum[c] = float(double(t.M) * total.mean);
    } else {
      bn_finalize_channel(double(t.M), total.mean, total.m2, f.eps, f.momentum, &f.mean[c], &f.invstd[c],
                          &f.running_mean[c], &f.running_var[c]);
    }
    if (writes == ForwardWrites::prologue) {
      prologue_scale[c] = bn_prologue_scale(f.gamma[c], f.invstd[c]);
      prologue_shift[c] = bn_prologue_shift(f.beta[c], f.mean[c], prologue_scale[c]);
    }
  };
  const bool apply = merge_partials(t.split, ticket, partials, C, scratch, t.scratch_bytes, finish);
  if (writes != ForwardWrites::train || !apply) return;

  // 4. Every thread applies its channels' statistics to its rows.
  cooperative_groups::this_grid().sync();  // every channel's statistics written
  if (c0 >= C) return;
  float ch_mean[kGroup], invstd[kGroup], gamma[kGroup], beta[kGroup], scale[kGroup];
  load_channels(f.mean, c0, C, ch_mean);
  load_channels(f.invstd, c0, C, invstd);
  load_channels(f.gamma, c0, C, gamma);
  load_channels(f.beta, c0, C, beta);
  for (int v = 0; v < kGroup; ++v) scale[v] = bn_scale(gamma[v], invstd[v]);
  int k = 0;
  for (int64_t m = rows.first; m < rows.end; m += rows.stride, ++k) {
    const Group<T> xs = k < t.cached_rows ? cache[k * threads + tid] : load_group<VECTOR>(f.x + m * C, c0, C);
    Group<T> rs{};
    if (t.fusion.residual) rs = load_group<VECTOR>(f.residual + m * C, c0, C);
    Group<T> ys;
    unsigned bits = 0;
    for (int v = 0; v < kGroup; ++v) {
      const float z = bn_preactivation(to_float(xs[v]), to_float(rs[v]), ch_mean[v], scale[v], beta[v], t.fusion);
      ys[v] = from_float<T>(bn_activation(z, t.fusion));
      bits |= unsigned(z > 0.0f && c0 + v < C) << v;
    }
    store_group<VECTOR>(f.y + m * C, c0, C, ys);
    if (t.fusion.relu) mask_byte(f.relu_mask, m, C, c0) = uint8_t(bits);
  }
}

// Backward in one launch: t1 = sum dz, t2 = sum dz*xhat (dbeta and dgamma), d_residual = dz, and
//   dx = gamma*invstd*(dz - t1/M - xhat*t2/M).
// sums (SyncBatchNorm): also writes [t1 | t2] there, and stops after step 3. Split (t.split):
// stops after step 3 too, and bn_backward_apply_kernel does step 4. RECOMPUTE (Note [Batch norm
// before a fused convolution]): the mask bits from x and r's constants instead of b.relu_mask, and
// step 1 writes r.activation.
template <typename T, bool VECTOR, bool RECOMPUTE>
__global__ void __launch_bounds__(1024, 1) bn_backward_kernel(Tiling t, BatchNormBackward<T> b, float* sums,
                                                              Recompute<T> r, Sums* partials, unsigned* ticket) {
  CUTRAIN_DYNAMIC_SHARED(float4, shared);
  Sums* scratch = scratch_memory<Sums>(shared);
  Group<T>* cache = cache_memory<T>(shared, t);  // per kept row: x, then dz
  const int C = t.C, c0 = thread_channel(), tid = block_thread(), threads = block_threads();
  const ThreadRows rows(t);
  float mean[kGroup];
  load_channels(b.mean, c0, C, mean);
  float prologue_scale[kGroup], prologue_shift[kGroup];
  if constexpr (RECOMPUTE) {
    load_channels(r.scale, c0, C, prologue_scale);
    load_channels(r.shift, c0, C, prologue_shift);
  }

  // 1. This thread's rows: the two sums (t2 still without its factor invstd), d_residual (or the
  //    activation), the first rows kept.
  Sums mine[kGroup] = {};
  if (c0 < C) {
    int k = 0;
    for (int64_t m = rows.first; m < rows.end; m += rows.stride, ++k) {
      const Group<T> xs = load_group<VECTOR>(b.x + m * C, c0, C);
      float dz[kGroup];
      if constexpr (RECOMPUTE) {
        Group<T> as;
        const unsigned bits = prologue_group(xs, prologue_scale, prologue_shift, c0, C, t.fusion, as);
        store_group<VECTOR>(r.activation + m * C, c0, C, as);
        load_dz<VECTOR>(b.dy, bits, m, C, c0, t.fusion, dz);
      } else {
        load_dz<VECTOR>(b.dy, b.relu_mask, m, C, c0, t.fusion, dz);
      }
      Group<T> dzs;
      for (int v = 0; v < kGroup; ++v) {
        mine[v].t1 += dz[v];
        mine[v].t2 += dz[v] * (to_float(xs[v]) - mean[v]);
        dzs[v] = from_float<T>(dz[v]);  // exact: dz is dy or 0
      }
      if (t.fusion.residual) store_group<VECTOR>(b.d_residual + m * C, c0, C, dzs);
      if (k < t.cached_rows) {
        cache[(2 * k) * threads + tid] = xs;
        cache[(2 * k + 1) * threads + tid] = dzs;
      }
    }
  }

  // 2. The block's sums, to partials[chunk][channel].
  merge_block(mine, scratch);
  const int width = int(blockDim.x) * kGroup, channel = int(blockIdx.x) * width + tid;
  if (tid < width && channel < C) partials[int64_t(blockIdx.y) * C + channel] = scratch[tid];

  // 3. Every chunk's partials merged, for this block's share of the channels.
  const auto finish = [&](int c, const Sums& total) {
    const float t2 = b.invstd[c] * total.t2;
    b.dbeta[c] = total.t1;
    b.dgamma[c] = t2;
    if (sums) {
      sums[c] = total.t1;
      sums[C + c] = t2;
    }
  };
  const bool apply = merge_partials(t.split, ticket, partials, C, scratch, t.scratch_bytes, finish);
  if (sums || !apply) return;

  // 4. Every thread applies the sums to its rows.
  cooperative_groups::this_grid().sync();  // every channel's sums written
  if (c0 >= C) return;
  BackwardChannel coefficients[kGroup];
  load_backward_channels(b, b.dbeta, b.dgamma, c0, C, float(1.0 / double(t.M)), coefficients);
  int k = 0;
  for (int64_t m = rows.first; m < rows.end; m += rows.stride, ++k) {
    Group<T> xs, dzs;
    if (k < t.cached_rows) {
      xs = cache[(2 * k) * threads + tid];
      dzs = cache[(2 * k + 1) * threads + tid];
    } else {
      xs = load_group<VECTOR>(b.x + m * C, c0, C);
      float dz[kGroup];
      if constexpr (RECOMPUTE) {
        Group<T> unused;
        load_dz<VECTOR>(b.dy, prologue_group(xs, prologue_scale, prologue_shift, c0, C, t.fusion, unused), m, C, c0,
                        t.fusion, dz);
      } else {
        load_dz<VECTOR>(b.dy, b.relu_mask, m, C, c0, t.fusion, dz);
      }
      for (int v = 0; v < kGroup; ++v) dzs[v] = from_float<T>(dz[v]);
    }
    Group<T> dxs;
    for (int v = 0; v < kGroup; ++v)
      dxs[v] = from_float<T>(bn_backward_dx(to_float(dzs[v]), to_float(xs[v]), mean[v], coefficients[v]));
    store_group<VECTOR>(b.dx + m * C, c0, C, dxs);
  }
}

// ---- the elementwise kernels ---------------------------------------------------------------------

// This thread's rows under an elementwise grid: every (gridDim.y * blockDim.y)-th from its first.
struct GridRows {
  int64_t first, stride;
  __device__ GridRows()
      : first(int64_t(blockIdx.y) * blockDim.y + threadIdx.y), stride(int64_t(gridDim.y) * blockDim.y) {}
};

// Where bn_apply_kernel takes its statistics from.
enum class ApplyStatistics {
  running,    // eval: the running statistics
  rank_sums,  // SyncBatchNorm: the all-reduced sums in s, from which it also writes mean, invstd
              // and the running statistics (the first row of threads)
  batch,      // a split training forward: the mean and invstd that its first launch wrote
};

// y = act(z) with each channel's statistics, and in training the ReLU mask.
template <typename T, bool VECTOR>
__global__ void bn_apply_kernel(int64_t M, int C, BatchNormFusion fusion, BatchNormForward<T> f, BatchNormRankStats s,
                                double count, ApplyStatistics from) {
  const int c0 = thread_channel();
  if (c0 >= C) return;
  const bool train = from != ApplyStatistics::running;
  float mean[kGroup], invstd[kGroup], gamma[kGroup], beta[kGroup], scale[kGroup];
  for (int v = 0; v < kGroup; ++v) {
    const int c = std::min(c0 + v, C - 1);  // past the row's end: a copy of the last channel, never stored
    if (from == ApplyStatistics::rank_sums) {
      mean[v] = float(s.sum[c] / count);
      invstd[v] = bn_invstd(count, s.m2[c], f.eps);
      if (blockIdx.y == 0 && threadIdx.y == 0 && c0 + v < C) {
        f.mean[c] = mean[v];
        f.invstd[c] = invstd[v];
        bn_update_running(count, s.sum[c] / count, s.m2[c], f.momentum, &f.running_mean[c], &f.running_var[c]);
      }
    } else if (from == ApplyStatistics::batch) {
      mean[v] = f.mean[c];
      invstd[v] = f.invstd[c];
    } else {
      mean[v] = f.running_mean[c];
      invstd[v] = bn_eval_invstd(f.running_var[c], f.eps);
    }
  }
  load_channels(f.gamma, c0, C, gamma);
  load_channels(f.beta, c0, C, beta);
  for (int v = 0; v < kGroup; ++v) scale[v] = bn_scale(gamma[v], invstd[v]);
  const GridRows rows;
  for (int64_t m = rows.first; m < M; m += rows.stride) {
    const Group<T> xs = load_group<VECTOR>(f.x + m * C, c0, C);
    Group<T> rs{};
    if (fusion.residual) rs = load_group<VECTOR>(f.residual + m * C, c0, C);
    Group<T> ys;
    unsigned bits = 0;
    for (int v = 0; v < kGroup; ++v) {
      const float z = bn_preactivation(to_float(xs[v]), to_float(rs[v]), mean[v], scale[v], beta[v], fusion);
      ys[v] = from_float<T>(bn_activation(z, fusion));
      bits |= unsigned(z > 0.0f && c0 + v < C) << v;
    }
    store_group<VECTOR>(f.y + m * C, c0, C, ys);
    if (train && fusion.relu) mask_byte(f.relu_mask, m, C, c0) = uint8_t(bits);
  }
}

// SyncBatchNorm, between the two all-reduces, one thread per channel:
//   m2 = local_m2 + rows*(local_mean - mean)^2,  mean = sum/count.
__global__ void bn_rank_m2_kernel(int64_t rows, int C, BatchNormRankStats s, double count) {
  const int c = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (c < C) s.m2[c] = bn_rank_m2(double(rows), s.local_mean[c], s.local_m2[c], s.sum[c] / count);
}

// dx = gamma*invstd*(dz - t1/count - xhat*t2/count): SyncBatchNorm's, with t1 and t2 over all
// ranks, and a split backward's, with this batch's (dbeta and dgamma). RECOMPUTE: the mask bits
// from x and r's constants, as bn_backward_kernel's.
template <typename T, bool VECTOR, bool RECOMPUTE>
__global__ void bn_backward_apply_kernel(int64_t M, int C, BatchNormFusion fusion, BatchNormBackward<T> b,
                                         Recompute<T> r, const float* t1, const float* t2, float inv_count) {
  const int c0 = thread_channel();
  if (c0 >= C) return;
  float mean[kGroup];
  load_channels(b.mean, c0, C, mean);
  BackwardChannel coefficients[kGroup];
  load_backward_channels(b, t1, t2, c0, C, inv_count, coefficients);
  float prologue_scale[kGroup], prologue_shift[kGroup];
  if constexpr (RECOMPUTE) {
    load_channels(r.scale, c0, C, prologue_scale);
    load_channels(r.shift, c0, C, prologue_shift);
  }
  const GridRows rows;
  for (int64_t m = rows.first; m < M; m += rows.stride) {
    const Group<T> xs = load_group<VECTOR>(b.x + m * C, c0, C);
    float dz[kGroup];
    if constexpr (RECOMPUTE) {
      Group<T> unused;
      load_dz<VECTOR>(b.dy, prologue_group(xs, prologue_scale, prologue_shift, c0, C, fusion, unused), m, C, c0, fusion,
                      dz);
    } else {
      load_dz<VECTOR>(b.dy, b.relu_mask, m, C, c0, fusion, dz);
    }
    Group<T> dxs;
    for (int v = 0; v < kGroup; ++v)
      dxs[v] = from_float<T>(bn_backward_dx(dz[v], to_float(xs[v]), mean[v], coefficients[v]));
    store_group<VECTOR>(b.dx + m * C, c0, C, dxs);
  }
}

// y = act(y [+ residual]) in place, and the ReLU mask: the fused kernels' activation, after a
// batch norm that did not fuse it.
template <typename T, bool VECTOR>
__global__ void bn_activation_kernel(int64_t M, int C, BatchNormFusion fusion, T* y, const T* residual,
                                     uint8_t* relu_mask) {
  const int c0 = thread_channel();
  if (c0 >= C) return;
  const GridRows rows;
  for (int64_t m = rows.first; m < M; m += rows.stride) {
    Group<T> ys = load_group<VECTOR>(y + m * C, c0, C);
    Group<T> rs{};
    if (fusion.residual) rs = load_group<VECTOR>(residual + m * C, c0, C);
    unsigned bits = 0;
    for (int v = 0; v < kGroup; ++v) {
      const float z = fusion.residual ? to_float(ys[v]) + to_float(rs[v]) : to_float(ys[v]);
      ys[v] = from_float<T>(bn_activation(z, fusion));
      bits |= unsigned(z > 0.0f && c0 + v < C) << v;
    }
    store_group<VECTOR>(y + m * C, c0, C, ys);
    if (fusion.relu) mask_byte(relu_mask, m, C, c0) = uint8_t(bits);
  }
}

// dz = dy * act'(z), from the mask that bn_activation_kernel wrote.
template <typename T, bool VECTOR>
__global__ void bn_activation_backward_kernel(int64_t M, int C, BatchNormFusion fusion, const T* dy,
                                              const uint8_t* relu_mask, T* dz) {
  const int c0 = thread_channel();
  if (c0 >= C) return;
  const GridRows rows;
  for (int64_t m = rows.first; m < M; m += rows.stride) {
    float d[kGroup];
    load_dz<VECTOR>(dy, relu_mask, m, C, c0, fusion, d);
    Group<T> dzs;
    for (int v = 0; v < kGroup; ++v) dzs[v] = from_float<T>(d[v]);
    store_group<VECTOR>(dz + m * C, c0, C, dzs);
  }
}

// ---- launching -----------------------------------------------------------------------------------

bool cooperative(BatchNormPass pass) {
  return pass == BatchNormPass::forward_train || pass == BatchNormPass::backward ||
         pass == BatchNormPass::rank_statistics || pass == BatchNormPass::backward_sums ||
         pass == BatchNormPass::forward_statistics || pass == BatchNormPass::backward_recompute;
}

bool forward_pass(BatchNormPass pass) {
  return pass == BatchNormPass::forward_train || pass == BatchNormPass::rank_statistics ||
         pass == BatchNormPass::forward_statistics;
}

void check_pass(const BatchNormPlan& plan, BatchNormPass want, const char* launcher) {
  if (plan.pass != want) throw std::logic_error(std::string(launcher) + " given a plan for another pass");
}

// Calls launch(std::true_type{}) when every row of every tensor (nullptr skipped) can move in
// 16-byte packs of whole groups, else launch(std::false_type{}).
template <typename T, typename Launch>
void with_groups(int C, std::initializer_list<const void*> pointers, Launch&& launch) {
  if (C % kGroup == 0 && widest_packs_fit<T>(C, pointers)) {
    launch(std::true_type{});
  } else {
    launch(std::false_type{});
  }
}

// The shared memory of a cooperative block's merges, in front of its kept rows: the larger of a
// warp's entry per channel (merge_block) and one per thread (merge_chunks), 16-byte aligned.
size_t scratch_bytes(BatchNormPass pass, dim3 block) {
  const size_t stat_bytes = forward_pass(pass) ? sizeof(Welford) : sizeof(Sums);
  const size_t threads = size_t(block.x) * block.y;
  const size_t entries = std::max<size_t>(threads / 32 * block.x * kGroup, threads);
  return (entries * stat_bytes + 15) / 16 * 16;
}

Tiling tiling(const BatchNormPlan& plan) {
  return {plan.shape.rows,
          plan.shape.channels,
          plan.shape.fusion,
          plan.rows_per_block,
          plan.cached_rows,
          int(scratch_bytes(plan.pass, plan.block)),
          plan.launch == BatchNormLaunch::split};
}

// What the launches of `plan` read and write, for the step's inventory (emu/recording.h): the
// first, and a split plan's apply launch.
Traffic plan_traffic(const BatchNormPlan& plan) {
  return {plan.bytes_read - plan.apply_bytes_read, plan.bytes_written - plan.apply_bytes_written};
}
Traffic apply_traffic(const BatchNormPlan& plan) { return {plan.apply_bytes_read, plan.apply_bytes_written}; }

// A split plan's partials (Note [Split batch norm]): the ticket counter, then, 16 bytes in, the
// blocks' partial statistics.
constexpr int kTicketFloats = 4;
template <typename Stat>
Stat* partials_of(const BatchNormPlan& plan, float* partials) {
  return reinterpret_cast<Stat*>(plan.launch == BatchNormLaunch::split ? partials + kTicketFloats : partials);
}
unsigned* ticket_of(const BatchNormPlan& plan, float* partials) {
  return plan.launch == BatchNormLaunch::split ? reinterpret_cast<unsigned*>(partials) : nullptr;
}

// The elementwise grid over x[M, C]: `across` groups of channels side by side in a block, and
// kElementwiseRowsPerThread rows per thread.
void elementwise_grid(int64_t M, int groups, int across, dim3& grid, dim3& block) {
  block = dim3(across, kElementwiseThreads / across);
  const int64_t rows_per_block = int64_t(block.y) * kElementwiseRowsPerThread;
  grid = dim3(ceil_div(groups, across), unsigned(std::clamp<int64_t>(ceil_div(M, rows_per_block), 1, 65535)));
}

}  // namespace

// ---- plans ---------------------------------------------------------------------------------------

BatchNormDevice bn_device_of_current_gpu() {
  int device = 0, multiprocessors = 0, can_cooperate = 0, shared = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&can_cooperate, cudaDevAttrCooperativeLaunch, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (!can_cooperate)
    throw std::runtime_error("batch norm needs a GPU that can launch cooperative kernels (device " +
                             std::to_string(device) + " cannot)");
  return {multiprocessors, 1024, size_t(shared)};
}

BatchNormPlan bn_plan(BatchNormPass pass, const BatchNormShape& shape, size_t element_bytes,
                      const BatchNormDevice& device, BatchNormLaunch launch) {
  const int64_t M = shape.rows;
  const int C = shape.channels;
  if (M < 1 || C < 1) throw std::invalid_argument("batch norm plan: no rows or no channels");
  if (element_bytes != 2 && element_bytes != 4)
    throw std::invalid_argument("batch norm plan: elements of 2 or 4 bytes");
  const bool prologue = pass == BatchNormPass::forward_statistics || pass == BatchNormPass::backward_recompute;
  if (prologue && (!shape.fusion.relu || shape.fusion.residual))
    throw std::invalid_argument("batch norm plan: before a fused convolution, a ReLU without the residual");
  BatchNormPlan plan{};
  plan.pass = pass;
  plan.shape = shape;
  plan.element_bytes = element_bytes;
  plan.launch = launch;
  const int groups = ceil_div(C, kGroup);
  int across = 1;  // groups across a block: a power of two, at most kMaxGroupsAcross
  while (across < std::min(groups, kMaxGroupsAcross)) across *= 2;

  const int64_t tensor = M * C * int64_t(element_bytes);
  const int64_t mask = shape.fusion.relu ? M * ceil_div(C, 8) : 0;
  const int64_t residual = shape.fusion.residual ? tensor : 0;
  const int64_t per_channel = int64_t(C) * sizeof(float);

  if (!cooperative(pass)) {
    const int threads = pass == BatchNormPass::rank_m2 ? kBlockThreads : kElementwiseThreads;
    if (pass == BatchNormPass::rank_m2) {
      plan.block = dim3(threads);
      plan.grid = dim3(grid_for(C, threads));
    } else {
      elementwise_grid(M, groups, across, plan.grid, plan.block);
    }
    const int64_t channel_reads = int64_t(plan.grid.y) * per_channel;  // each row of blocks reads its channels
    switch (pass) {
      case BatchNormPass::forward_eval:
        plan.bytes_read = tensor + residual + 4 * channel_reads;
        plan.bytes_written = tensor;
        break;
      case BatchNormPass::rank_m2:
        plan.bytes_read = 3 * per_channel;
        plan.bytes_written = per_channel;
        break;
      case BatchNormPass::forward_apply:
        plan.bytes_read = tensor + residual + 4 * channel_reads + 2 * per_channel;
        plan.bytes_written = tensor + mask + 4 * per_channel;
        break;
      case BatchNormPass::activation:
        plan.bytes_read = tensor + residual;
        plan.bytes_written = tensor + mask;
        break;
      case BatchNormPass::activation_backward:
        plan.bytes_read = tensor + mask;
        plan.bytes_written = tensor;
        break;
      default:  // backward_apply
        plan.bytes_read = 2 * tensor + mask + 5 * channel_reads;
        plan.bytes_written = tensor;
    }
    return plan;
  }

  // Cooperative: one chunk of rows per block, as many chunks as the device holds blocks.
  const int threads = device.threads;
  if (threads < 32 || threads > 1024 || (threads & (threads - 1)) != 0)
    throw std::invalid_argument("batch norm plan: blocks of a power of two from 32 to 1024 threads");
  const int columns = ceil_div(groups, across);
  if (columns > device.blocks)
    throw std::invalid_argument("batch norm plan: " + std::to_string(C) + " channels need " + std::to_string(columns) +
                                " blocks side by side, the device holds " + std::to_string(device.blocks) + " at once");
  plan.block = dim3(across, threads / across);
  int chunks = std::clamp(ceil_div(M, plan.block.y), 1, device.blocks / columns);
  plan.rows_per_block = ceil_div(M, chunks);
  chunks = ceil_div(M, plan.rows_per_block);  // no empty chunk
  plan.grid = dim3(columns, chunks);

  const size_t stat_bytes = forward_pass(pass) ? sizeof(Welford) : sizeof(Sums);
  const size_t scratch = scratch_bytes(pass, plan.block);
  if (scratch > device.shared_bytes)
    throw std::invalid_argument("batch norm plan: a block needs " + std::to_string(scratch) +
                                " bytes of shared memory for its merges, the device offers " +
                                std::to_string(device.shared_bytes));
  // Kept rows: x forward, x and dz backward; none when nothing is applied, or when a split plan's
  // second launch applies.
  const bool split = launch == BatchNormLaunch::split;
  const bool backward = pass == BatchNormPass::backward || pass == BatchNormPass::backward_recompute;
  const int kept = split ? 0 : pass == BatchNormPass::forward_train ? 1 : backward ? 2 : 0;
  if (split && scratch / stat_bytes < size_t(chunks))
    throw std::invalid_argument("batch norm plan: a split launch's last block merges " + std::to_string(chunks) +
                                " chunks of partials in " + std::to_string(scratch / stat_bytes) + " entries");
  const size_t row_bytes = size_t(threads) * kGroup * element_bytes * size_t(kept);
  const int64_t rows_per_thread = ceil_div(plan.rows_per_block, plan.block.y);
  plan.cached_rows = kept ? int(std::min<int64_t>(rows_per_thread, (device.shared_bytes - scratch) / row_bytes)) : 0;
  plan.shared_bytes = scratch + size_t(plan.cached_rows) * row_bytes;
  plan.partial_floats = int64_t(chunks) * C * int64_t(stat_bytes / sizeof(float)) + (split ? kTicketFloats : 0);

  // Rows re-read after the barrier: those of each chunk beyond what its threads keep.
  int64_t reread = 0;
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int64_t rows = std::min(plan.rows_per_block, M - chunk * plan.rows_per_block);
    reread += rows - std::min<int64_t>(rows, int64_t(plan.cached_rows) * plan.block.y);
  }
  const int64_t reread_tensor = kept ? reread * C * int64_t(element_bytes) : 0;
  const int64_t reread_mask = shape.fusion.relu ? reread * ceil_div(C, 8) : 0;
  const int64_t partials = plan.partial_floats * int64_t(sizeof(float));
  const int64_t channel_reads = int64_t(chunks) * per_channel;  // each chunk's blocks read their channels
  plan.partial_bytes_read = partials;
  if (split && pass == BatchNormPass::backward_recompute) {
    // As a split backward's, with x, scale and shift for the mask, and the activation written.
    elementwise_grid(M, groups, across, plan.apply_grid, plan.apply_block);
    const int64_t apply_channel_reads = int64_t(plan.apply_grid.y) * per_channel;
    plan.apply_bytes_read = 2 * tensor + 7 * apply_channel_reads;
    plan.apply_bytes_written = tensor;
    plan.bytes_read = plan.apply_bytes_read + 2 * tensor + partials + 3 * channel_reads + per_channel;
    plan.bytes_written = plan.apply_bytes_written + tensor + partials + 2 * per_channel;
    return plan;
  }
  if (split && (pass == BatchNormPass::forward_train || pass == BatchNormPass::backward)) {
    // The statistics (sums) launch reads x (and dy, the mask) once; the apply launch reads them
    // again, and the per-channel results once per row of its blocks.
    elementwise_grid(M, groups, across, plan.apply_grid, plan.apply_block);
    const int64_t apply_channel_reads = int64_t(plan.apply_grid.y) * per_channel;
    const bool forward = pass == BatchNormPass::forward_train;
    plan.apply_bytes_read =
        forward ? tensor + residual + 4 * apply_channel_reads : 2 * tensor + mask + 5 * apply_channel_reads;
    plan.apply_bytes_written = tensor + (forward ? mask : 0);
    plan.bytes_read = plan.apply_bytes_read + (forward ? tensor + partials + 2 * per_channel
                                                       : 2 * tensor + mask + partials + channel_reads + per_channel);
    plan.bytes_written = plan.apply_bytes_written + partials + (forward ? 4 * per_channel : residual + 2 * per_channel);
    return plan;
  }
  switch (pass) {
    case BatchNormPass::forward_train:
      plan.bytes_read = tensor + reread_tensor + residual + partials + 4 * channel_reads + 2 * per_channel;
      plan.bytes_written = tensor + mask + partials + 4 * per_channel;
      break;
    case BatchNormPass::rank_statistics:
      plan.bytes_read = tensor + partials;
      plan.bytes_written = partials + 3 * per_channel;
      break;
    case BatchNormPass::forward_statistics:  // also gamma and beta; also scale and shift
      plan.bytes_read = tensor + partials + 4 * per_channel;
      plan.bytes_written = partials + 6 * per_channel;
      break;
    case BatchNormPass::backward:
      plan.bytes_read = 2 * tensor + 2 * reread_tensor + mask + reread_mask + partials + 5 * channel_reads;
      plan.bytes_written = tensor + residual + partials + 2 * per_channel;
      break;
    case BatchNormPass::backward_recompute:  // no mask: x, scale and shift instead; the activation written
      plan.bytes_read = 2 * tensor + 2 * reread_tensor + partials + 7 * channel_reads;
      plan.bytes_written = 2 * tensor + partials + 2 * per_channel;
      break;
    default:  // backward_sums
      plan.bytes_read = 2 * tensor + mask + partials + 2 * channel_reads;
      plan.bytes_written = residual + partials + 4 * per_channel;
  }
  return plan;
}

namespace {

// Both forms of the kernel that runs `plan`'s merging launch, by channel groups in packs or one by one:
// the launchers choose one per call.
template <typename T>
void prepare_merging(const BatchNormPlan& plan) {
  const bool forward = forward_pass(plan.pass);
  const char* name = forward ? "bn_forward_train_kernel" : "bn_backward_kernel";
  const void* kernels[2];
  if (forward) {
    kernels[0] = reinterpret_cast<const void*>(bn_forward_train_kernel<T, false>);
    kernels[1] = reinterpret_cast<const void*>(bn_forward_train_kernel<T, true>);
  } else if (plan.pass == BatchNormPass::backward_recompute) {
    kernels[0] = reinterpret_cast<const void*>(bn_backward_kernel<T, false, true>);
    kernels[1] = reinterpret_cast<const void*>(bn_backward_kernel<T, true, true>);
  } else {
    kernels[0] = reinterpret_cast<const void*>(bn_backward_kernel<T, false, false>);
    kernels[1] = reinterpret_cast<const void*>(bn_backward_kernel<T, true, false>);
  }
  for (const void* kernel : kernels) {
    if (plan.shared_bytes > kDefaultDynamicSharedBytes) raise_dynamic_shared_limit(kernel, plan.shared_bytes);
    if (plan.launch == BatchNormLaunch::cooperative)
      check_cooperative_grid_fits(name, kernel, plan.grid, plan.block, plan.shared_bytes);
  }
}

}  // namespace

void bn_prepare_launch(const BatchNormPlan& plan) {
  if (!cooperative(plan.pass)) return;
  if (plan.element_bytes == 2) {
    prepare_merging<__nv_bfloat16>(plan);
  } else {
    prepare_merging<float>(plan);
  }
}

// ---- launchers -----------------------------------------------------------------------------------

// A pass's first launch: cooperative, or an ordinary one of a split plan (same grid, same kernel).
template <typename... Params, typename... Args>
void launch_merging_kernel(const BatchNormPlan& plan, const char* name, void (*kernel)(Params...), cudaStream_t stream,
                           Args&&... args) {
  if (plan.launch == BatchNormLaunch::split) {
    launch_kernel({name, plan_traffic(plan)}, kernel, plan.grid, plan.block, plan.shared_bytes, stream,
                  std::forward<Args>(args)...);
  } else {
    launch_cooperative_kernel({name, plan_traffic(plan)}, kernel, plan.grid, plan.block, plan.shared_bytes, stream,
                              std::forward<Args>(args)...);
  }
}

template <typename T>
void bn_forward_train_cuda(const BatchNormPlan& plan, const BatchNormForward<T>& f, float* partials,
                           cudaStream_t stream) {
  check_pass(plan, BatchNormPass::forward_train, "bn_forward_train_cuda");
  const BatchNormFusion fusion = plan.shape.fusion;
  with_groups<T>(plan.shape.channels, {f.x, f.y, fusion.residual ? f.residual : nullptr}, [&](auto vector) {
    launch_merging_kernel(plan, "bn_forward_train_kernel", bn_forward_train_kernel<T, decltype(vector)::value>, stream,
                          tiling(plan), f, BatchNormRankStats{}, nullptr, nullptr, partials_of<Welford>(plan, partials),
                          ticket_of(plan, partials), ForwardWrites::train);
    if (plan.launch == BatchNormLaunch::split)
      launch_kernel({"bn_apply_kernel", apply_traffic(plan)}, bn_apply_kernel<T, decltype(vector)::value>,
                    plan.apply_grid, plan.apply_block, 0, stream, plan.shape.rows, plan.shape.channels, fusion, f,
                    BatchNormRankStats{}, 1.0, ApplyStatistics::batch);
  });
}

template <typename T>
void bn_rank_statistics_cuda(const BatchNormPlan& plan, const T* x, const BatchNormRankStats& s, float* partials,
                             cudaStream_t stream) {
  check_pass(plan, BatchNormPass::rank_statistics, "bn_rank_statistics_cuda");
  BatchNormForward<T> f;
  f.x = x;
  with_groups<T>(plan.shape.channels, {x}, [&](auto vector) {
    launch_merging_kernel(plan, "bn_forward_train_kernel", bn_forward_train_kernel<T, decltype(vector)::value>, stream,
                          tiling(plan), f, s, nullptr, nullptr, partials_of<Welford>(plan, partials),
                          ticket_of(plan, partials), ForwardWrites::rank_statistics);
  });
}

// The launch is labelled with its pass's name, for the step's inventory; the kernel is the training
// forward's.
template <typename T>
void bn_forward_statistics_cuda(const BatchNormPlan& plan, const BatchNormForward<T>& f, float* scale, float* shift,
                                float* partials, cudaStream_t stream) {
  check_pass(plan, BatchNormPass::forward_statistics, "bn_forward_statistics_cuda");
  with_groups<T>(plan.shape.channels, {f.x}, [&](auto vector) {
    launch_merging_kernel(plan, "bn_forward_statistics_kernel", bn_forward_train_kernel<T, decltype(vector)::value>,
                          stream, tiling(plan), f, BatchNormRankStats{}, scale, shift,
                          partials_of<Welford>(plan, partials), ticket_of(plan, partials), ForwardWrites::prologue);
  });
}

template <typename T>
void bn_backward_cuda(const BatchNormPlan& plan, const BatchNormBackward<T>& b, float* partials, cudaStream_t stream) {
  check_pass(plan, BatchNormPass::backward, "bn_backward_cuda");
  const BatchNormFusion fusion = plan.shape.fusion;
  with_groups<T>(plan.shape.channels, {b.x, b.dy, b.dx, fusion.residual ? b.d_residual : nullptr}, [&](auto vector) {
    launch_merging_kernel(plan, "bn_backward_kernel", bn_backward_kernel<T, decltype(vector)::value, false>, stream,
                          tiling(plan), b, nullptr, Recompute<T>{}, partials_of<Sums>(plan, partials),
                          ticket_of(plan, partials));
    if (plan.launch == BatchNormLaunch::split)
      launch_kernel({"bn_backward_apply_kernel", apply_traffic(plan)},
                    bn_backward_apply_kernel<T, decltype(vector)::value, false>, plan.apply_grid, plan.apply_block, 0,
                    stream, plan.shape.rows, plan.shape.channels, fusion, b, Recompute<T>{}, b.dbeta, b.dgamma,
                    float(1.0 / double(plan.shape.rows)));
  });
}

// Labelled with its pass's name, as bn_forward_statistics_cuda's; the kernels are the backward's.
template <typename T>
void bn_backward_recompute_cuda(const BatchNormPlan& plan, const BatchNormBackward<T>& b, const float* scale,
                                const float* shift, T* activation, float* partials, cudaStream_t stream) {
  check_pass(plan, BatchNormPass::backward_recompute, "bn_backward_recompute_cuda");
  const BatchNormFusion fusion = plan.shape.fusion;
  with_groups<T>(plan.shape.channels, {b.x, b.dy, b.dx, activation}, [&](auto vector) {
    launch_merging_kernel(plan, "bn_backward_recompute_kernel", bn_backward_kernel<T, decltype(vector)::value, true>,
                          stream, tiling(plan), b, nullptr, Recompute<T>{scale, shift, activation},
                          partials_of<Sums>(plan, partials), ticket_of(plan, partials));
    if (plan.launch == BatchNormLaunch::split)
      launch_kernel({"bn_backward_recompute_apply_kernel", apply_traffic(plan)},
                    bn_backward_apply_kernel<T, decltype(vector)::value, true>, plan.apply_grid, plan.apply_block, 0,
                    stream, plan.shape.rows, plan.shape.channels, fusion, b, Recompute<T>{scale, shift, nullptr},
                    b.dbeta, b.dgamma, float(1.0 / double(plan.shape.rows)));
  });
}

template <typename T>
void bn_backward_sums_cuda(const BatchNormPlan& plan, const BatchNormBackward<T>& b, float* sums, float* partials,
                           cudaStream_t stream) {
  check_pass(plan, BatchNormPass::backward_sums, "bn_backward_sums_cuda");
  const BatchNormFusion fusion = plan.shape.fusion;
  with_groups<T>(plan.shape.channels, {b.x, b.dy, fusion.residual ? b.d_residual : nullptr}, [&](auto vector) {
    launch_merging_kernel(plan, "bn_backward_kernel", bn_backward_kernel<T, decltype(vector)::value, false>, stream,
                          tiling(plan), b, sums, Recompute<T>{}, partials_of<Sums>(plan, partials),
                          ticket_of(plan, partials));
  });
}

template <typename T>
void bn_forward_eval_cuda(const BatchNormPlan& plan, const BatchNormForward<T>& f, cudaStream_t stream) {
  check_pass(plan, BatchNormPass::forward_eval, "bn_forward_eval_cuda");
  const BatchNormFusion fusion = plan.shape.fusion;
  with_groups<T>(plan.shape.channels, {f.x, f.y, fusion.residual ? f.residual : nullptr}, [&](auto vector) {
    launch_kernel({"bn_apply_kernel", plan_traffic(plan)}, bn_apply_kernel<T, decltype(vector)::value>, plan.grid,
                  plan.block, 0, stream, plan.shape.rows, plan.shape.channels, fusion, f, BatchNormRankStats{}, 1.0,
                  ApplyStatistics::running);
  });
}

template <typename T>
void bn_forward_apply_cuda(const BatchNormPlan& plan, const BatchNormForward<T>& f, const BatchNormRankStats& s,
                           double count, cudaStream_t stream) {
  check_pass(plan, BatchNormPass::forward_apply, "bn_forward_apply_cuda");
  const BatchNormFusion fusion = plan.shape.fusion;
  with_groups<T>(plan.shape.channels, {f.x, f.y, fusion.residual ? f.residual : nullptr}, [&](auto vector) {
    launch_kernel({"bn_apply_kernel", plan_traffic(plan)}, bn_apply_kernel<T, decltype(vector)::value>, plan.grid,
                  plan.block, 0, stream, plan.shape.rows, plan.shape.channels, fusion, f, s, count,
                  ApplyStatistics::rank_sums);
  });
}

void bn_rank_m2_cuda(const BatchNormPlan& plan, const BatchNormRankStats& s, double count, cudaStream_t stream) {
  check_pass(plan, BatchNormPass::rank_m2, "bn_rank_m2_cuda");
  launch_kernel({"bn_rank_m2_kernel", plan_traffic(plan)}, bn_rank_m2_kernel, plan.grid, plan.block, 0, stream,
                plan.shape.rows, plan.shape.channels, s, count);
}

template <typename T>
void bn_backward_apply_cuda(const BatchNormPlan& plan, const BatchNormBackward<T>& b, const float* sums, double count,
                            cudaStream_t stream) {
  check_pass(plan, BatchNormPass::backward_apply, "bn_backward_apply_cuda");
  with_groups<T>(plan.shape.channels, {b.x, b.dy, b.dx}, [&](auto vector) {
    launch_kernel({"bn_backward_apply_kernel", plan_traffic(plan)},
                  bn_backward_apply_kernel<T, decltype(vector)::value, false>, plan.grid, plan.block, 0, stream,
                  plan.shape.rows, plan.shape.channels, plan.shape.fusion, b, Recompute<T>{}, sums,
                  sums + plan.shape.channels, float(1.0 / count));
  });
}

template <typename T>
void bn_activation_cuda(const BatchNormPlan& plan, T* y, const T* residual, uint8_t* relu_mask, cudaStream_t stream) {
  check_pass(plan, BatchNormPass::activation, "bn_activation_cuda");
  const BatchNormFusion fusion = plan.shape.fusion;
  with_groups<T>(plan.shape.channels, {y, fusion.residual ? residual : nullptr}, [&](auto vector) {
    launch_kernel({"bn_activation_kernel", plan_traffic(plan)}, bn_activation_kernel<T, decltype(vector)::value>,
                  plan.grid, plan.block, 0, stream, plan.shape.rows, plan.shape.channels, fusion, y, residual,
                  relu_mask);
  });
}

template <typename T>
void bn_activation_backward_cuda(const BatchNormPlan& plan, const T* dy, const uint8_t* relu_mask, T* dz,
                                 cudaStream_t stream) {
  check_pass(plan, BatchNormPass::activation_backward, "bn_activation_backward_cuda");
  with_groups<T>(plan.shape.channels, {dy, dz}, [&](auto vector) {
    launch_kernel({"bn_activation_backward_kernel", plan_traffic(plan)},
                  bn_activation_backward_kernel<T, decltype(vector)::value>, plan.grid, plan.block, 0, stream,
                  plan.shape.rows, plan.shape.channels, plan.shape.fusion, dy, relu_mask, dz);
  });
}

#define CUTRAIN_INSTANTIATE_BATCHNORM(T)                                                                              \
  template void bn_forward_train_cuda<T>(const BatchNormPlan&, const BatchNormForward<T>&, float*, cudaStream_t);     \
  template void bn_forward_eval_cuda<T>(const BatchNormPlan&, const BatchNormForward<T>&, cudaStream_t);              \
  template void bn_backward_cuda<T>(const BatchNormPlan&, const BatchNormBackward<T>&, float*, cudaStream_t);         \
  template void bn_rank_statistics_cuda<T>(const BatchNormPlan&, const T*, const BatchNormRankStats&, float*,         \
                                           cudaStream_t);                                                             \
  template void bn_forward_apply_cuda<T>(const BatchNormPlan&, const BatchNormForward<T>&, const BatchNormRankStats&, \
                                         double, cudaStream_t);                                                       \
  template void bn_backward_sums_cuda<T>(const BatchNormPlan&, const BatchNormBackward<T>&, float*, float*,           \
                                         cudaStream_t);                                                               \
  template void bn_backward_apply_cuda<T>(const BatchNormPlan&, const BatchNormBackward<T>&, const float*, double,    \
                                          cudaStream_t);                                                              \
  template void bn_activation_cuda<T>(const BatchNormPlan&, T*, const T*, uint8_t*, cudaStream_t);                    \
  template void bn_activation_backward_cuda<T>(const BatchNormPlan&, const T*, const uint8_t*, T*, cudaStream_t);     \
  template void bn_forward_statistics_cuda<T>(const BatchNormPlan&, const BatchNormForward<T>&, float*, float*,       \
                                              float*, cudaStream_t);                                                  \
  template void bn_backward_recompute_cuda<T>(const BatchNormPlan&, const BatchNormBackward<T>&, const float*,        \
                                              const float*, T*, float*, cudaStream_t);
CUTRAIN_INSTANTIATE_BATCHNORM(float)
CUTRAIN_INSTANTIATE_BATCHNORM(__nv_bfloat16)

}  // namespace cutrain
