// Fuzz target: the CIFAR-10 record parser. A .bin file either loads as whole records with labels
// below 10, or is refused in one line.
#include <stdexcept>

#include "data/cifar10.h"
#include "tests/fuzz/targets.h"

namespace cutrain::fuzz {

void cifar10_records(const uint8_t* data, size_t size) {
  Dataset dataset;
  dataset.num_classes = kCifarClasses;
  try {
    append_cifar10_records(data, size, "data_batch_1.bin", dataset);
  } catch (const std::runtime_error&) {
    return;  // refused, in one line
  }
  if (size > 0) dataset.validate("data_batch_1.bin");  // what loads is a valid dataset, or this throws
}

}  // namespace cutrain::fuzz

CUTRAIN_FUZZER_ENTRY(cifar10_records)
