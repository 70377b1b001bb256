// sgd.h: the optimizer, PyTorch's torch.optim.SGD (dampening 0, with weight decay, momentum and
// Nesterov) and its learning-rate schedule, over the flat parameter and momentum buffers. The
// training step updates one span of the buffers at a time, each bucket of parameters as soon as
// its gradients are final (Note [The step]). In bf16 mode the same pass also writes the bf16
// weights that the next forward reads. The update's formula is in kernels/sgd.h.
//
// A step comes in two pieces, both enqueued and neither waited for:
//   sgd.begin_step(stream);             // lr = schedule.at(step counter); ++counter   (on the device)
//   sgd.update(begin, end, stream);     // params[begin, end) -= lr * update(grads)      (per bucket)
//
// With gradient clipping, one more piece comes between the two, once every gradient is final and
// before the step's first update:
//   sgd.clip_grad_norm(max_norm, stream);   // this step's updates read grads * clip factor (on the device)
//
// The step counter and the rate live in device memory, so that no step waits for the host to set
// a rate and a replayed CUDA graph uses each step's own rate. The counter is optimizer state,
// which a resumed run restores with set_step. The schedule itself is a kernel argument, so a
// captured graph keeps the schedule it was captured with.
//
// With one process, SGD reads each gradient where backward wrote it, which in bf16 mode is
// cuDNN's bf16 filter gradient or the padded stem's gradient, and widens it as it reads it. With
// several ranks it reads the fp32 buffer, where ParameterSet::gather_grads put the gradients so
// that the all-reduce averages them in fp32, as DDP does. Sections 6 and 7 of
// docs/how-it-works.md say why.
#pragma once

#include <vector>

#include "kernels/lr_schedule.h"
#include "kernels/sgd.h"
#include "nn/parameters.h"

namespace cutrain {

class Context;

class SGD {
 public:
  enum class Grads { as_written, gathered };  // where SGD reads the gradients, as said above

  SGD(Context& ctx, ParameterSet& params, SgdConfig config, LrSchedule schedule = {}, Grads grads = Grads::as_written);
  SGD(const SGD&) = delete;
  SGD& operator=(const SGD&) = delete;

  // The step counter is the number of steps taken (begin_step calls that ran). Both calls wait
  // for the device, so they belong outside steps.
  void set_step(int64_t step);
  int64_t step_count() const;

  void begin_step(cudaStream_t stream);
  void update(int64_t begin, int64_t end, cudaStream_t stream);

  // torch.nn.utils.clip_grad_norm_(parameters, max_norm) for this step's updates: they read the
  // gradient times min(max_norm / (total norm + 1e-6), 1), where the total norm is grad_norm's
  // (kernels/sgd.h). The factor is computed on the device into device memory, never waited for;
  // the gradients themselves are left as they are, where PyTorch scales them in place. Every
  // gradient must be final, and no update of this step enqueued yet; begin_step ends the scaling.
  void clip_grad_norm(double max_norm, cudaStream_t stream);

  // The 2-norm of the gradient that the last step's updates read, over every parameter: after the
  // ranks' average and before weight decay, torch.nn.utils.clip_grad_norm_'s total norm. It waits
  // for the device, so it belongs between steps, as at a log line.
  double grad_norm(cudaStream_t stream);

  // Momentum buffers, laid out like the parameters (checkpointing); zero until the first step.
  Tensor momentum() const;

 private:
  // The sum of the squares of every gradient into grad_squares_ (GPU) or cpu_grad_squares_ (CPU),
  // and with `clip`, the clip factor too.
  void sum_grad_squares(const SgdClip* clip, cudaStream_t stream);

  Context& ctx_;
  ParameterSet& params_;
  SgdConfig config_;
  LrSchedule schedule_;
  DeviceBuffer momentum_;
  DeviceBuffer step_;                 // int64
  DeviceBuffer lr_;                   // float
  DeviceBuffer grad_squares_;         // double, written by grad_norm and clip_grad_norm on the GPU
  double cpu_grad_squares_ = 0;       // the same on the CPU
  DeviceBuffer clip_factor_;          // float, written by clip_grad_norm
  bool clipped_ = false;              // whether this step's updates read the gradients times *clip_factor_
  std::vector<SgdSegment> segments_;  // one per parameter, in layout order
  DeviceBuffer device_segments_;
};

}  // namespace cutrain
