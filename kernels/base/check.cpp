#include "kernels/base/check.h"

namespace cutrain {

void check_failed(const char* call, const char* file, int line, const std::string& why) {
  throw CheckError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + why);
}

void check_failed(const char* call, const char* file, int line, cudnnStatus_t status) {
  throw CudnnError(
      std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + cudnnGetErrorString(status),
      status);
}

}  // namespace cutrain
