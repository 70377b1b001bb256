// torch_python.h: the project's Python with PyTorch 2.11 (scripts/setup.sh --with-tests), for the
// tests that meet PyTorch's side of a protocol: its TCPStore, torchrun. As scripts/python_env.sh
// says, that is $PYTHON where set, else the environment in cutrain's cache folder
// (kernels/base/cache_dir.h). Without it, or without torch in it, a test prints "SKIPPED: <why>" and
// returns, which CTest reports as skipped.
//
//   const std::string python = cutrain::test::torch_python();
//   CUTRAIN_REQUIRE_TORCH(python);
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "kernels/base/cache_dir.h"
#include "tests/process.h"

namespace cutrain::test {

// The interpreter, or "" when there is none with torch; `why` then says what is missing.
inline std::string torch_python(std::string* why = nullptr) {
  const char* own = std::getenv("PYTHON");
  const std::string python = own && *own ? own : cutrain_cache_dir() + "/venv/bin/python";
  std::string reason;
  if (::access(python.c_str(), X_OK) != 0) {
    reason = "no Python at " + python + " (scripts/setup.sh --with-tests makes it)";
  } else {
    // find_spec does not import torch, which takes seconds.
    const Process::Result found =
        run({python, "-c", "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is None)"});
    if (found.exit_code != 0) reason = python + " has no torch (scripts/setup.sh --with-tests installs it)";
  }
  if (why) *why = reason;
  return reason.empty() ? python : "";
}

}  // namespace cutrain::test

#define CUTRAIN_REQUIRE_TORCH(python)                          \
  do {                                                         \
    std::string why_;                                          \
    python = ::cutrain::test::torch_python(&why_);             \
    if (python.empty()) {                                      \
      std::cout << "SKIPPED: " << why_ << "\n";                \
      WARN("SKIPPED: " << why_);                               \
      return;                                                  \
    }                                                          \
  } while (0)
