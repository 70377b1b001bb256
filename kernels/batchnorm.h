// batchnorm.h: batch normalisation over NHWC activations, viewed as a matrix x[M, C] with
// M = N*H*W rows and one column per channel. Fusions: y = act(BN(x) [+ residual]), act = ReLU
// or identity, so one kernel family serves BN, BN+ReLU and BN+add+ReLU.
//
// Training forward, with xhat = (x - mean)*invstd and z the pre-activation:
//   mean[c] = (1/M) sum_m x[m,c],  m2[c] = sum_m (x[m,c] - mean[c])^2,  invstd = 1/sqrt(m2/M + eps)
//   (biased variance to normalise); as PyTorch, with the unbiased variance m2/(M-1):
//     running_mean = (1 - momentum)*running_mean + momentum*mean,  running_var likewise;
//   z = gamma*xhat + beta [+ residual],  y = act(z),  relu_mask = [z > 0] (ReLU only).
// The statistics are Welford's (count, mean, m2), partial ones merged pairwise (Chan, Golub and
// LeVeque): never E[x^2] - E[x]^2, which in fp32 cancels to noise once |mean| >> std.
// Backward, with dz = dy * relu_mask (dz = dy without the ReLU):
//   dbeta = t1 = sum_m dz,  dgamma = t2 = sum_m dz*xhat   (this rank's; DDP averages them later)
//   dx = gamma*invstd*(dz - t1/M - xhat*t2/M),  d_residual = dz (the residual's gradient).
// Eval forward: mean = running_mean, invstd = 1/sqrt(running_var + eps), y as above.
//
// On the GPU each is ONE launch: bn_forward_train_cuda, bn_backward_cuda (cooperative: every
// block writes its partial statistics, the grid waits at a barrier, each block combines a share of
// the channels in a fixed order, the grid waits again, every block applies) and bn_forward_eval_cuda
// (elementwise). The fixed order makes every result bit-identical from run to run. The forward
// keeps the 1-bit ReLU mask so that the backward never reads y, and each block keeps as much of its
// tile of x (backward: x and dz) in shared memory as its BatchNormPlan allows, so that the apply
// step re-reads only what did not fit.
//
// Note [Split batch norm]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A cooperative grid starts only when all of its blocks fit on the device at once, so it waits for
// whatever another stream is running (a weight-gradient convolution, NCCL) and then holds every
// multiprocessor. A plan of BatchNormLaunch::split runs each cooperative pass as ordinary
// launches instead: the same grid writes the same partials, the last block to finish (a ticket
// counter, as llm.c does) merges them for every channel in the cooperative grid's own order and
// writes the statistics or sums, and (training forward and backward) an elementwise launch then
// applies them, re-reading x. The results are the cooperative launch's, bit for bit, for the price
// of that re-read and a merge done by one block.
//
// SyncBatchNorm all-reduces between stages, so it has a staged path (same formulas):
//   forward:  bn_rank_statistics (this rank's count, mean, m2; sum = rows*mean)
//             all-reduce sum  ->  bn_rank_m2 (m2 = local_m2 + rows*(local_mean - mean)^2)
//             all-reduce m2   ->  bn_forward_apply (statistics, running statistics, y, mask)
//   backward: bn_backward_sums (t1, t2, this rank's dgamma and dbeta, d_residual)
//             all-reduce t1|t2 -> bn_backward_apply (dx with count = rows over all ranks)
// Every term all-reduced is a plain sum of non-negative m2 shares or of x: nothing cancels.
//
// Note [Batch norm before a fused convolution]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// In the fused unit bn-relu-conv (docs/cudnn-fusion.md) the convolution that follows the batch norm
// applies it in its own prologue, a = act_type(max(z, 0)) with
//   z = add_rn(mul_rn(x, scale), shift),  scale = mul_rn(gamma, invstd),  shift = sub_rn(beta, mul_rn(mean, scale)),
// two fp32 vectors of C, each product and sum rounded once (Note [Rounding that contraction cannot
// change]). The batch norm then runs in two other forms, with a ReLU and no residual:
//   forward:  bn_forward_statistics: the training forward's statistics alone, the same bits as
//             bn_forward_train's for the same plan (mean, invstd, running statistics), and scale
//             and shift; no y and no mask.
//   backward: bn_backward_recompute: bn_backward's dgamma, dbeta and dx, the same formulas and
//             order of sums, with the mask recomputed from x as [z > 0] with the z above, the
//             prologue's own; it also writes the activation a, which the forward never wrote, for
//             the convolution's filter gradient.
// The mask is the prologue's, not bn_forward_train's: z here is x*scale + shift, not
// (x - mean)*scale + beta, so the two may differ where z is within a rounding of zero. Given the
// same mask, the backward's results are bn_backward's, bit for bit.
//
// Statistics are fp32 arrays of C; x, y, residual and gradients are activations of type T (float,
// or __nv_bfloat16 on the GPU). The _cpu functions are the fp32 reference (sums in double).
// Pointers a fusion does not use may be null. Training needs more than one row over all ranks.
// All CUDA launchers are asynchronous and capturable in a CUDA graph.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace cutrain {

struct BatchNormFusion {
  bool relu = false;      // y = relu(...)
  bool residual = false;  // ... + residual before the activation
};

// One batch norm's activations: x[rows, channels].
struct BatchNormShape {
  int64_t rows = 0;
  int channels = 0;
  BatchNormFusion fusion;
};

// The ReLU mask: one bit per element; a row takes ceil(channels/8) bytes, channel c is bit c%8 of
// its byte c/8.
int64_t bn_mask_bytes(const BatchNormShape& shape);

// The tensors of one forward (training or eval).
template <typename T>
struct BatchNormForward {
  const T* x = nullptr;
  const T* residual = nullptr;  // fusion.residual
  const float* gamma = nullptr;
  const float* beta = nullptr;
  float eps = 1e-5f;
  float momentum = 0.1f;
  T* y = nullptr;
  uint8_t* relu_mask = nullptr;  // fusion.relu, training: bn_mask_bytes
  float* mean = nullptr;         // training: the batch's, kept for the backward
  float* invstd = nullptr;
  float* running_mean = nullptr;  // training: updated; eval: read
  float* running_var = nullptr;
};

// The tensors of one backward.
template <typename T>
struct BatchNormBackward {
  const T* x = nullptr;
  const T* dy = nullptr;
  const uint8_t* relu_mask = nullptr;  // fusion.relu: as the forward wrote it
  const float* mean = nullptr;
  const float* invstd = nullptr;
  const float* gamma = nullptr;
  T* dx = nullptr;
  T* d_residual = nullptr;  // fusion.residual: written with =
  float* dgamma = nullptr;  // this rank's share, written with =
  float* dbeta = nullptr;
};

// SyncBatchNorm's forward statistics: one fp32 buffer of 4*C, [local_mean | local_m2 | sum | m2].
struct BatchNormRankStats {
  float* local_mean;  // this rank's rows
  float* local_m2;
  float* sum;  // rows*local_mean, then all-reduced: sum of x over all ranks
  float* m2;   // local_m2 + rows*(local_mean - mean)^2, then all-reduced: m2 over all ranks
  static BatchNormRankStats in(float* buffer, int channels) {
    return {buffer, buffer + channels, buffer + 2 * channels, buffer + 3 * channels};
  }
};

// ---- CPU reference (fp32, sums in double) -------------------------------------------------------
void bn_forward_train_cpu(const BatchNormShape& shape, const BatchNormForward<float>& f);
void bn_forward_eval_cpu(const BatchNormShape& shape, const BatchNormForward<float>& f);
void bn_backward_cpu(const BatchNormShape& shape, const BatchNormBackward<float>& b);
// SyncBatchNorm's stages; count = rows over all ranks. sums: [t1 | t2], 2*C.
void bn_rank_statistics_cpu(const BatchNormShape& shape, const float* x, const BatchNormRankStats& s);
void bn_rank_m2_cpu(const BatchNormShape& shape, const BatchNormRankStats& s, double count);
void bn_forward_apply_cpu(const BatchNormShape& shape, const BatchNormForward<float>& f, const BatchNormRankStats& s,
                          double count);
void bn_backward_sums_cpu(const BatchNormShape& shape, const BatchNormBackward<float>& b, float* sums);
void bn_backward_apply_cpu(const BatchNormShape& shape, const BatchNormBackward<float>& b, const float* sums,
                           double count);
// Note [Batch norm before a fused convolution]: the forward's statistics, and scale and shift
// (fp32 [C]); f.y and f.relu_mask are not used. The backward with the mask recomputed from b.x,
// scale and shift (b.relu_mask is not used), and activation = max(z, 0) written. shape.fusion must
// be a ReLU without the residual (std::invalid_argument otherwise).
void bn_forward_statistics_cpu(const BatchNormShape& shape, const BatchNormForward<float>& f, float* scale,
                               float* shift);
void bn_backward_recompute_cpu(const BatchNormShape& shape, const BatchNormBackward<float>& b, const float* scale,
                               const float* shift, float* activation);

// ---- CUDA: plans -------------------------------------------------------------------------------

// How the blocks of a training pass combine their partial statistics: at the grid's barrier of one
// cooperative launch, or in the last block of an ordinary one (Note [Split batch norm]).
enum class BatchNormLaunch { cooperative, split };

// What a device offers one cooperative batch norm launch: every block must be resident at once.
struct BatchNormDevice {
  int blocks = 0;           // blocks the grid may have (one per multiprocessor)
  int threads = 1024;       // per block: a power of two from 32 to 1024
  size_t shared_bytes = 0;  // dynamic shared memory per block
};
// The current CUDA device: one block of 1024 threads per multiprocessor, with all the shared
// memory a block may opt into. Throws std::runtime_error when it cannot launch cooperatively.
BatchNormDevice bn_device_of_current_gpu();

enum class BatchNormPass {
  forward_train,        // bn_forward_train_cuda (cooperative)
  forward_eval,         // bn_forward_eval_cuda
  backward,             // bn_backward_cuda (cooperative)
  rank_statistics,      // SyncBatchNorm's stages: bn_rank_statistics_cuda (cooperative)
  rank_m2,              //   bn_rank_m2_cuda
  forward_apply,        //   bn_forward_apply_cuda
  backward_sums,        //   bn_backward_sums_cuda (cooperative)
  backward_apply,       //   bn_backward_apply_cuda
  activation,           // a batch norm that did not fuse its activation: bn_activation_cuda
  activation_backward,  //   bn_activation_backward_cuda
  forward_statistics,   // Note [Batch norm before a fused convolution]: bn_forward_statistics_cuda (cooperative)
  backward_recompute,   //   bn_backward_recompute_cuda (cooperative)
};

// One launch, planned once: its grid, what each block keeps in shared memory, the scratch it needs
// for its blocks' partial statistics, and the bytes it reads and writes in global memory (for the
// step's inventory; computed here, never measured).
struct BatchNormPlan {
  BatchNormPass pass;
  BatchNormShape shape;
  size_t element_bytes;    // of T: 4 (float) or 2 (bf16)
  BatchNormLaunch launch;  // of the passes that merge partials; the others are elementwise
  dim3 grid, block;        // grid.x: groups of channels, grid.y: chunks of rows
  int64_t rows_per_block;  // cooperative passes: each block's chunk of rows
  int cached_rows;         // per thread: how many of its rows stay in shared memory for the apply
  size_t shared_bytes;     // dynamic, per block
  int64_t partial_floats;  // cooperative passes: the partials scratch (fp32) the launch needs
  int64_t bytes_read, bytes_written;
  int64_t partial_bytes_read;  // of bytes_read: the partials, a few KB that the L2 cache serves
  // A split training forward or backward's second launch, elementwise, and its share of the bytes.
  dim3 apply_grid, apply_block;
  int64_t apply_bytes_read, apply_bytes_written;
};

// Throws std::invalid_argument for a shape or device it cannot plan (no rows or channels, more
// channel groups than the device holds blocks, a block too small for its scratch). A split plan
// has the cooperative plan's grid, so that its blocks write the same partials.
BatchNormPlan bn_plan(BatchNormPass pass, const BatchNormShape& shape, size_t element_bytes,
                      const BatchNormDevice& device, BatchNormLaunch launch = BatchNormLaunch::cooperative);

// Readies the current GPU for launches of `plan`, once, outside any capture (Note [Cooperative
// launches] in kernels/cooperative.h): raises its kernels' shared-memory limit to what the plan
// needs, and throws std::runtime_error, in one line, when a cooperative plan's grid cannot be
// resident on this GPU all at once.
void bn_prepare_launch(const BatchNormPlan& plan);

// ---- CUDA: launchers (T = float or __nv_bfloat16; statistics always fp32) ---------------------
// Each takes the plan of its pass and checks that it is; partials: plan.partial_floats of fp32,
// never initialised (every launch writes them before reading), except that a split plan's begin
// with its ticket counter (Note [Split batch norm]): the first 4 bytes must be zero before the
// first split launch, and every split launch leaves them zero, so the passes of one batch norm,
// run in turn on one stream, may share one buffer.
template <typename T>
void bn_forward_train_cuda(const BatchNormPlan& plan, const BatchNormForward<T>& f, float* partials,
                           cudaStream_t stream);
template <typename T>
void bn_forward_eval_cuda(const BatchNormPlan& plan, const BatchNormForward<T>& f, cudaStream_t stream);
template <typename T>
void bn_backward_cuda(const BatchNormPlan& plan, const BatchNormBackward<T>& b, float* partials, cudaStream_t stream);
template <typename T>
void bn_rank_statistics_cuda(const BatchNormPlan& plan, const T* x, const BatchNormRankStats& s, float* partials,
                             cudaStream_t stream);
void bn_rank_m2_cuda(const BatchNormPlan& plan, const BatchNormRankStats& s, double count, cudaStream_t stream);
template <typename T>
void bn_forward_apply_cuda(const BatchNormPlan& plan, const BatchNormForward<T>& f, const BatchNormRankStats& s,
                           double count, cudaStream_t stream);
template <typename T>
void bn_backward_sums_cuda(const BatchNormPlan& plan, const BatchNormBackward<T>& b, float* sums, float* partials,
                           cudaStream_t stream);
template <typename T>
void bn_backward_apply_cuda(const BatchNormPlan& plan, const BatchNormBackward<T>& b, const float* sums, double count,
                            cudaStream_t stream);

// Note [Batch norm before a fused convolution]. The plans' shape.fusion must be a ReLU without the
// residual (bn_plan throws std::invalid_argument otherwise); partials as above, so a batch norm's
// two passes may share one buffer. bn_forward_statistics_cuda writes f.mean, f.invstd, updates
// f.running_mean and f.running_var, and writes scale and shift (fp32 [C]); f.y and f.relu_mask are
// not used. Its statistics are bn_forward_train_cuda's, bit for bit, under a plan of the same shape,
// device and launch. bn_backward_recompute_cuda writes b.dgamma, b.dbeta and b.dx as
// bn_backward_cuda does, with the mask [z > 0] recomputed from b.x, scale and shift (b.relu_mask
// is not used), and activation[rows, channels] = T(max(z, 0)).
template <typename T>
void bn_forward_statistics_cuda(const BatchNormPlan& plan, const BatchNormForward<T>& f, float* scale, float* shift,
                                float* partials, cudaStream_t stream);
template <typename T>
void bn_backward_recompute_cuda(const BatchNormPlan& plan, const BatchNormBackward<T>& b, const float* scale,
                                const float* shift, T* activation, float* partials, cudaStream_t stream);

// The activation after a batch norm that did not fuse it (cuDNN's plain batch norm, under
// --batchnorm cudnn where cuDNN refuses its fused ops: Note [cuDNN's batch norm types] in
// nn/cudnn_batchnorm.h), elementwise with the fused kernels' formulas and mask:
//   forward:  y = act(y [+ residual]) in place, and the ReLU mask of its argument;
//   backward: dz = dy * mask, which may be the residual's gradient.
// The plan's shape names the fusion (a ReLU, perhaps after the residual).
template <typename T>
void bn_activation_cuda(const BatchNormPlan& plan, T* y, const T* residual, uint8_t* relu_mask, cudaStream_t stream);
template <typename T>
void bn_activation_backward_cuda(const BatchNormPlan& plan, const T* dy, const uint8_t* relu_mask, T* dz,
                                 cudaStream_t stream);

}  // namespace cutrain
