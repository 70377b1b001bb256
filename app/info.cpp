// `cutrain info`: what this build links and what this machine offers.
#include <cstdio>

#include "app/commands.h"
#include "kernels/check.h"
#include "kernels/device.h"

namespace cutrain {

void add_info_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("info", "Print library versions and the CUDA devices of this machine");
  cmd->callback([&exit_code] {
    size_t cudnn = cudnnGetVersion();
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    std::printf("cuDNN %zu.%zu.%zu, CUDA runtime %d.%d\n", cudnn / 10000, cudnn / 100 % 100, cudnn % 100,
                runtime / 1000, runtime % 1000 / 10);
    if (!cuda_available()) {
      std::printf("%s\n", cuda_unavailable_reason().c_str());
      exit_code = 0;
      return;
    }
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    for (int d = 0; d < count; ++d) std::printf("cuda:%d %s\n", d, cuda_device_description(d).c_str());
    exit_code = 0;
  });
}

}  // namespace cutrain
