#include "kernels/check.h"

namespace cutrain {

void check_failed(const char* call, const char* file, int line, const std::string& why) {
  throw CheckError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + why);
}

const char* cublas_error_string(cublasStatus_t status) {
  // cublasGetStatusString exists since CUDA 11.4; wrapped so the macro reads like the others.
  return cublasGetStatusString(status);
}

}  // namespace cutrain
