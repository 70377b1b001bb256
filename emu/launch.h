// launch.h: a kernel launch under the emulation (emu/), the other side of
// kernels/launch.cuh's launch_kernel and launch_cooperative_kernel. As a launch does, it checks
// the configuration at once (an error is the launch's), converts the arguments to the kernel's
// parameter types and copies them once; the launch is then enqueued on its stream, and when it
// runs, block.h's run_grid runs every thread of the grid on that copy (each thread's parameters
// are its own copy of it, as its registers would be). A launch that passed the checks is written
// down, with the bytes its launcher declares, when a recorder is installed (emu/recording.h),
// and not enqueued when it plans (Note [Record-only device] in runtime.h).
#pragma once

#include <cstddef>
#include <memory>
#include <tuple>
#include <utility>

#include "emu/block.h"
#include "emu/recording.h"
#include "emu/runtime.h"

namespace cutrain::emu {

template <typename... Params, typename... Args>
void launch(const char* name, Traffic bytes, bool cooperative, void (*kernel)(Params...), dim3 grid, dim3 block,
            size_t dynamic_shared_bytes, cudaStream_t stream, Args&&... args) {
  if (!valid_stream(stream)) {
    set_last_error(cudaErrorInvalidResourceHandle);
    return;
  }
  struct Launch {
    void (*kernel)(Params...);
    std::tuple<Params...> parameters;
  };
  const auto launch =
      std::make_shared<const Launch>(Launch{kernel, std::tuple<Params...>(std::forward<Args>(args)...)});
  const auto run_thread = [](const void* p) {
    const Launch& l = *static_cast<const Launch*>(p);
    std::apply(l.kernel, l.parameters);
  };
  const void* function = reinterpret_cast<const void*>(kernel);
  const Grid g{name,        grid,       block,       dynamic_shared_bytes, max_dynamic_shared_bytes(function),
               cooperative, run_thread, launch.get()};
  if (const cudaError_t error = check_grid(g)) {
    set_last_error(error);
    return;
  }
  if (recording()) {
    RecordedOp op;
    op.name = name;
    op.detail = describe_launch(name, grid, block, dynamic_shared_bytes);
    op.function = function;
    op.bytes = bytes;
    op.stream = stream;
    if (record_instead(std::move(op))) return;
  }
  enqueue_kernel(stream, g, function, launch);
}

}  // namespace cutrain::emu
