// binaries.h: where tests find the programs they start (cutrain, cutrun, cutrain_tests itself):
// beside the running test binary, in build/bin or wherever a prebuilt copy was carried to.
#pragma once

#include <filesystem>
#include <string>

namespace cutrain::test {

inline std::string binary(const std::string& name) {
  static const std::filesystem::path dir = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  return (dir / name).string();
}

// The launcher, beside the tests' binary.
inline const std::string kCutrun = binary("cutrun");

}  // namespace cutrain::test
