#include "app/failure_record.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

namespace cutrain {

void record_failure(const std::string& message) {
  const char* path = std::getenv("CUTRAIN_ERROR_FILE");
  if (path == nullptr || *path == '\0') return;
  // Exclusive: a second failure (the one unwinding from the first) leaves the first's record.
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string record = std::to_string(ns) + " " + message + "\n";
  (void)!::write(fd, record.data(), record.size());  // best effort: cutrun falls back to the order of exits
  ::close(fd);
}

}  // namespace cutrain
