// Fuzz target: the safetensors reader. A file either parses into tensors whose bytes match their
// dtype and shape, or is refused in one line; no header, however it lies, makes it crash or
// allocate more than the file holds.
#include <stdexcept>

#include "nn/safetensors.h"
#include "tests/fuzz/targets.h"

namespace cutrain::fuzz {

void safetensors_file(const uint8_t* data, size_t size) {
  SafeTensorsFile file;
  try {
    file = parse_safetensors(std::vector<uint8_t>(data, data + size), "model.safetensors");
  } catch (const std::runtime_error&) {
    return;  // refused, in one line
  }
  for (const auto& [name, tensor] : file.tensors) {
    size_t numel = 1;
    for (int64_t d : tensor.shape) numel *= size_t(d);
    if (name.empty() || tensor.data.size() != numel * safetensors_dtype_size(tensor.dtype))
      throw std::logic_error("parse_safetensors accepted a tensor it should have refused: '" + name + "'");
  }
}

}  // namespace cutrain::fuzz

CUTRAIN_FUZZER_ENTRY(safetensors_file)
