// refusal.h: how the emulated libraries (cudnn.cpp, cublas.cpp) explain a call they refuse. Each
// keeps, per thread, the status and the reason of its last refusal; its status string then gives
// the library's name of the status and, when it is the status of that refusal, the reason:
//   "CUDNN_STATUS_BAD_PARAM (emulated cuDNN: the workspace is 100 bytes; ... needs 200)"
// so that the product's check macro (kernels/base/check.h) prints what went wrong.
#pragma once

#include <string>
#include <utility>

namespace cutrain::emu {

template <typename Status>
class Refusal {
 public:
  Status refuse(Status status, std::string why) {
    status_ = status;
    why_ = std::move(why);
    return status;
  }
  // `name` is the library's name for `status`; the text lives until this thread's next describe.
  const char* describe(Status status, const char* name, const char* library) {
    if (status != status_ || why_.empty()) return name;
    message_ = std::string(name) + " (emulated " + library + ": " + why_ + ")";
    return message_.c_str();
  }
  // The status of this thread's last refusal; 0, success, before the first.
  Status last_status() const { return status_; }

 private:
  Status status_{};  // 0, success: never a refusal
  std::string why_, message_;
};

}  // namespace cutrain::emu
