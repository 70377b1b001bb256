#include "dist/ddp/communicator.h"

#include <stdexcept>
#include <string>

#include "dist/ddp/gloo_communicator.h"
#include "dist/ddp/nccl_communicator.h"

namespace cutrain {

void Communicator::check_root(int root) const {
  if (root < 0 || root >= world_size())
    throw std::invalid_argument("broadcast: root " + std::to_string(root) + " is outside the world of " +
                                std::to_string(world_size()));
}

std::unique_ptr<Communicator> make_communicator(const DistEnv& env, Store& store, const CommunicatorOptions& options) {
  if (options.use_cuda) return std::make_unique<NcclCommunicator>(env, store, options);
  return std::make_unique<GlooCommunicator>(env, store, options);
}

}  // namespace cutrain
