// Fuzz target: the image decoder path, stb_image through cutrain's checks. An image file either
// becomes 32 x 32 RGB bytes or is refused in one line: no size it declares (0 x 0, more pixels than
// the limit) reaches stb_image_resize.
#include <stdexcept>

#include "data/image_folder.h"
#include "tests/fuzz/targets.h"

namespace cutrain::fuzz {

void image_file(const uint8_t* data, size_t size) {
  uint8_t out[32 * 32 * 3];
  try {
    // A limit well below the default keeps each run quick; the check is the same.
    decode_image(data, size, "class_a/00001.png", 32, 32, int64_t(1) << 18, out);
  } catch (const std::runtime_error&) {
    return;  // refused, in one line
  }
}

}  // namespace cutrain::fuzz

CUTRAIN_FUZZER_ENTRY(image_file)
