// The emulated tests' runner: Catch2's, plus --thread-order forward|reverse|shuffle[:SEED], the
// order in which the CUDA emulation runs a block's threads between barriers (emu/block.h).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <iostream>
#include <stdexcept>
#include <string>

#include "emu/block.h"

int main(int argc, char* argv[]) {
  Catch::Session session;
  std::string order = "forward";
  session.cli(session.cli() | Catch::clara::Opt(order, "order")["--thread-order"](
                                  "how a block's threads take turns: forward, reverse, shuffle or shuffle:SEED"));
  if (const int status = session.applyCommandLine(argc, argv)) return status;
  try {
    cutrain::emu::set_schedule(cutrain::emu::parse_schedule(order));
  } catch (const std::invalid_argument& e) {
    std::cerr << "cutrain_emu_tests: " << e.what() << "\n";
    return 2;
  }
  return session.run();
}
