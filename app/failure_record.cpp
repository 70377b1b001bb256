#include "app/failure_record.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace cutrain {
namespace {

// Writes `record` to the file named by `variable`, unless it is unset or the file exists already:
// a second failure (the one unwinding from the first) leaves the first's record. Best effort: the
// launchers fall back to the order of exits, or to the exit status.
void write_record(const char* variable, const std::string& record) {
  const char* path = std::getenv(variable);
  if (path == nullptr || *path == '\0') return;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return;
  (void)!::write(fd, record.data(), record.size());
  ::close(fd);
}

}  // namespace

void record_failure(const std::string& message) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
  write_record("CUTRAIN_ERROR_FILE", std::to_string(ns) + " " + message + "\n");
  // torchrun's summary shows extraInfo.py_callstack where the record has one, else the message;
  // cutrain has no Python stack, so both are its error line.
  const std::string line = "cutrain: error: " + message;
  const nlohmann::json record = {
      {"message",
       {{"message", line},
        {"extraInfo",
         {{"py_callstack", line},
          {"timestamp", std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count())}}}}}};
  write_record("TORCHELASTIC_ERROR_FILE", record.dump());
}

}  // namespace cutrain
