#include "dist/communicator.h"

#include "dist/gloo_communicator.h"
#include "dist/nccl_communicator.h"

namespace cutrain {

std::unique_ptr<Communicator> make_communicator(const DistEnv& env, TcpStore& store,
                                                const CommunicatorOptions& options) {
  if (options.use_cuda) return std::make_unique<NcclCommunicator>(env, store, options);
  return std::make_unique<GlooCommunicator>(env, store, options);
}

}  // namespace cutrain
