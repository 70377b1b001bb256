// mount.h: real mounts for fault tests (a full or read-only disk, a file that cannot be removed),
// undone when the test ends. Mounting needs root (CI runs as root); without it a test prints
// "SKIPPED: <why>" and returns, which CTest reports as skipped.
//
//   cutrain::test::Mount ro = cutrain::test::Mount::tmpfs(dir / "ro", "size=64k", MS_RDONLY);
//   if (!ro.ok()) { SKIP_WITHOUT_MOUNT(ro); }
#pragma once

#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>

namespace cutrain::test {

class Mount {
 public:
  // A tmpfs at `target` (created if needed) with `options` such as "size=64k".
  static Mount tmpfs(const std::string& target, const std::string& options, unsigned long flags = 0) {
    std::filesystem::create_directories(target);
    return Mount(target, ::mount("tmpfs", target.c_str(), "tmpfs", flags, options.c_str()));
  }
  // `source` bound over `target`, an existing file or folder: removing `target` then fails (EBUSY).
  static Mount bind(const std::string& source, const std::string& target) {
    return Mount(target, ::mount(source.c_str(), target.c_str(), nullptr, MS_BIND, nullptr));
  }
  Mount(Mount&& other) noexcept : target_(std::move(other.target_)), error_(std::move(other.error_)) {
    other.target_.clear();
  }
  ~Mount() {
    if (!target_.empty() && error_.empty()) ::umount2(target_.c_str(), MNT_DETACH);
  }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  Mount(std::string target, int result)
      : target_(std::move(target)), error_(result == 0 ? "" : "cannot mount at " + target_ + ": " + std::strerror(errno)) {}

  std::string target_;
  std::string error_;
};

}  // namespace cutrain::test

// Ends the test as skipped when `mount` failed (not root, no mount namespace).
#define SKIP_WITHOUT_MOUNT(mount)                       \
  do {                                                  \
    std::cout << "SKIPPED: " << (mount).error() << "\n"; \
    WARN("SKIPPED: " << (mount).error());               \
    return;                                             \
  } while (0)
