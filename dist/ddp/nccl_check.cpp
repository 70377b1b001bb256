#include "dist/ddp/nccl_check.h"

namespace cutrain {

std::string nccl_error_string(ncclResult_t result) {
  static const char* names[] = {"ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
                                "ncclInvalidArgument", "ncclInvalidUsage",       "ncclRemoteError", "ncclInProgress"};
  const char* name = (result >= 0 && result < ncclNumResults) ? names[result] : "unknown ncclResult_t";
  return std::string(ncclGetErrorString(result)) + " (" + name + ")";
}

}  // namespace cutrain
