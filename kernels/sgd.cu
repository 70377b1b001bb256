// sgd.cu: the CUDA side of sgd.h: one launch over a bucket's segments, every block working on
// every segment in turn with a grid-stride loop, four elements per thread and iteration where the
// segment is packed.
#include "kernels/sgd.h"

#include "kernels/launch.cuh"
#include "kernels/sgd.cuh"

namespace cutrain {

namespace {

constexpr int kVec = 4;  // elements per packed iteration: 16 bytes of fp32, 8 of bf16

template <typename T>
__device__ inline void load_floats(const void* data, int64_t i, float* out) {
  const Pack<T, kVec> pack = load_pack<kVec>(static_cast<const T*>(data) + i);
  for (int v = 0; v < kVec; ++v) out[v] = to_float(pack.v[v]);
}

template <typename T>
__device__ inline void store_floats(void* data, int64_t i, const float* in) {
  Pack<T, kVec> pack;
  for (int v = 0; v < kVec; ++v) pack.v[v] = from_float<T>(in[v]);
  store_pack<kVec>(static_cast<T*>(data) + i, pack);
}

// Elements i .. i+3 of a packed segment: the update of sgd.cuh, with 16-byte loads and stores.
__device__ inline void sgd_update_pack(float* param, float* momentum, const SgdSegment& s, int64_t i, float lr,
                                       float scale, const SgdConfig& cfg) {
  float grad[kVec];
  if (s.grad.bf16) {
    load_floats<__nv_bfloat16>(s.grad.data, i, grad);
  } else {
    load_floats<float>(s.grad.data, i, grad);
  }
  Pack<float, kVec> p = load_pack<kVec>(param + s.offset + i), buf = load_pack<kVec>(momentum + s.offset + i);
  const float decay = sgd_weight_decay(s, cfg);
  for (int v = 0; v < kVec; ++v) sgd_update(p.v[v], sgd_scaled(grad[v], scale), buf.v[v], lr, decay, cfg);
  store_pack<kVec>(param + s.offset + i, p);
  store_pack<kVec>(momentum + s.offset + i, buf);
  if (s.copy.data && s.copy.bf16) {
    store_floats<__nv_bfloat16>(s.copy.data, i, p.v);
  } else if (s.copy.data) {
    store_floats<float>(s.copy.data, i, p.v);
  }
}

// For each segment: its packs, then the elements after the last whole pack (or, unpacked, every
// element), spread over all the grid's threads.
__global__ void sgd_update_kernel(float* param, float* momentum, const SgdSegment* segments, int count, const float* lr,
                                  SgdConfig cfg, const float* grad_scale) {
  const float rate = *lr, scale = grad_scale ? *grad_scale : 1.0f;
  const int64_t thread = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t threads = int64_t(gridDim.x) * blockDim.x;
  for (int k = 0; k < count; ++k) {
    const SgdSegment s = segments[k];
    const int64_t packed_elements = s.packed ? s.numel / kVec * kVec : 0;
    for (int64_t i = thread * kVec; i < packed_elements; i += threads * kVec)
      sgd_update_pack(param, momentum, s, i, rate, scale, cfg);
    for (int64_t i = packed_elements + thread; i < s.numel; i += threads)
      sgd_update_element(param, momentum, s, i, rate, scale, cfg);
  }
}

// One block: each thread sums the squares of every blockDim.x-th element of every segment, then
// the block adds the threads' sums in a tree; with clip.factor, thread 0 also writes the clip factor.
__global__ void sgd_grad_squares_kernel(const SgdSegment* segments, int count, double* squares, SgdClip clip) {
  __shared__ double sums[kBlockThreads];
  double sum = 0;
  for (int k = 0; k < count; ++k) {
    const SgdSegment s = segments[k];
    for (int64_t i = threadIdx.x; i < s.numel; i += blockDim.x) {
      const double g = sgd_load(s.grad, i);
      sum += g * g;
    }
  }
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < unsigned(half)) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();  // this level's sums written before the next level reads them
  }
  if (threadIdx.x == 0) {
    *squares = sums[0];
    if (clip.factor) *clip.factor = sgd_clip_factor(sums[0], clip.max_norm);
  }
}

}  // namespace

void sgd_grad_squares_cuda(const SgdSegment* segments, const SgdSegment* device_segments, int count, double* squares,
                           cudaStream_t stream, const SgdClip* clip) {
  Traffic bytes{0, bytes_of<double>(1) + (clip ? bytes_of<float>(1) : 0)};
  for (int k = 0; k < count; ++k)
    bytes.read += segments[k].numel * (segments[k].grad.bf16 ? 2 : 4) + bytes_of<SgdSegment>(1);
  launch_kernel({"sgd_grad_squares_kernel", bytes}, sgd_grad_squares_kernel, dim3(1), kBlockThreads, 0, stream,
                device_segments, count, squares, clip ? *clip : SgdClip{});
}

void sgd_update_cuda(float* param, float* momentum, const SgdSegment* segments, const SgdSegment* device_segments,
                     int count, const float* lr, SgdConfig cfg, cudaStream_t stream, const float* grad_scale) {
  Traffic bytes{bytes_of<float>(grad_scale ? 2 : 1), 0};  // the rate, and the scale
  int64_t most_packs = 1;                                 // the grid covers the largest segment once
  for (int k = 0; k < count; ++k) {
    const SgdSegment& s = segments[k];
    bytes.read += s.numel * (8 + (s.grad.bf16 ? 2 : 4)) + bytes_of<SgdSegment>(1);
    bytes.written += s.numel * (8 + (s.copy.data ? (s.copy.bf16 ? 2 : 4) : 0));
    most_packs = std::max(most_packs, (s.numel + kVec - 1) / kVec);
  }
  launch_kernel({"sgd_update_kernel", bytes}, sgd_update_kernel, grid_for(most_packs), kBlockThreads, 0, stream, param,
                momentum, device_segments, count, lr, cfg, grad_scale);
}

}  // namespace cutrain
