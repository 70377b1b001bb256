// sgd.h: the optimizer, PyTorch's torch.optim.SGD (dampening 0; weight decay, momentum,
// Nesterov) with its learning-rate schedule, over the flat parameter and momentum buffers
// (kernels/sgd.h has the math), a span of them at a time: the training step updates each bucket
// of parameters as soon as its gradients are final (Note [The step]). In bf16 mode the same pass
// writes the bf16 weights the next forward reads.
//
// A step in pieces, all enqueued, nothing waited for:
//   sgd.begin_step(stream);             // lr = schedule.at(step counter); ++counter   (on the device)
//   sgd.update(begin, end, stream);     // params[begin, end) -= lr * update(grads)      (per bucket)
//
// The step counter and the rate live in device memory, so no step waits for the host to set a
// rate and a CUDA graph replays with each step's own; the counter is optimizer state, which a
// resumed run restores (set_step). The schedule itself is a kernel argument: a captured graph
// keeps the one it was captured with.
//
// Which gradients SGD reads (kernels/sgd.h's segments): with one process, those backward wrote,
// where it wrote them -- in bf16 mode cuDNN's bf16 filter gradients as they are, and the padded
// stem's -- so no copy widens them (20 kernels fewer per step, 2 bytes read per weight instead of
// 2 + 4 written + 4 read), and the result is the same: widening bf16 to fp32 is exact. With
// several ranks the fp32 buffer, where ParameterSet::gather_grads put them for the all-reduce: an
// average in bf16 would round each partial sum to 8 bits (the error grows with the world size),
// where DDP (which under autocast all-reduces the fp32 .grad) averages in fp32; one widening
// launch per bucket keeps that exactness.
#pragma once

#include <vector>

#include "kernels/lr_schedule.h"
#include "kernels/sgd.h"
#include "nn/parameters.h"

namespace cutrain {

class Context;

class SGD {
 public:
  enum class Grads { as_written, gathered };  // see the note above

  SGD(Context& ctx, ParameterSet& params, SgdConfig config, LrSchedule schedule = {},
      Grads grads = Grads::as_written);
  SGD(const SGD&) = delete;
  SGD& operator=(const SGD&) = delete;

  // The step counter: the number of steps taken (begin_step calls that ran). Outside steps only:
  // both wait for the device.
  void set_step(int64_t step);
  int64_t step_count() const;

  void begin_step(cudaStream_t stream);
  void update(int64_t begin, int64_t end, cudaStream_t stream);

  const SgdConfig& config() const { return config_; }
  // Momentum buffers, laid out like the parameters (checkpointing); zero until the first step.
  Tensor momentum() const;

 private:
  Context& ctx_;
  ParameterSet& params_;
  SgdConfig config_;
  LrSchedule schedule_;
  DeviceBuffer momentum_;
  DeviceBuffer step_;  // int64
  DeviceBuffer lr_;    // float
  std::vector<SgdSegment> segments_;  // one per parameter, in layout order
  DeviceBuffer device_segments_;
};

}  // namespace cutrain
