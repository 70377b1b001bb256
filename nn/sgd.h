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

  // The 2-norm of the gradient that the last step's updates read, over every parameter: after the
  // ranks' average and before weight decay, torch.nn.utils.clip_grad_norm_'s total norm. It waits
  // for the device, so it belongs between steps, as at a log line.
  double grad_norm(cudaStream_t stream);

  const SgdConfig& config() const { return config_; }
  // Momentum buffers, laid out like the parameters (checkpointing); zero until the first step.
  Tensor momentum() const;

 private:
  Context& ctx_;
  ParameterSet& params_;
  SgdConfig config_;
  LrSchedule schedule_;
  DeviceBuffer momentum_;
  DeviceBuffer step_;                 // int64
  DeviceBuffer lr_;                   // float
  DeviceBuffer grad_squares_;         // double, written by grad_norm on the GPU
  std::vector<SgdSegment> segments_;  // one per parameter, in layout order
  DeviceBuffer device_segments_;
};

}  // namespace cutrain
