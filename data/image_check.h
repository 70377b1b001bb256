// image_check.h: what an image file must pass before stb_image decodes it.
//
// Debian 12 ships stb_image 2.27, whose decoders have memory errors that later versions fixed;
// fuzzing (tests/fuzz/image_file.cpp) finds them within seconds. So stb_image sees only the three
// formats an image folder holds, PNG, JPEG and BMP, told apart by their first bytes (its GIF, PSD,
// PIC, PNM, TGA and HDR decoders are never reached, whatever a file is named), no JPEG whose
// Huffman table declares more than 256 codes (2.27 writes past the table; 2.28 refuses it too),
// no JPEG scan that decodes with a Huffman table the file never defined (2.27 reads the table's
// uninitialised memory), and no PNG with a chunk longer than the file (2.27 allocates what the
// chunk declares first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cutrain {

// Throws std::runtime_error("<source>: <what is wrong>") in one line when `bytes` must not reach
// stb_image.
void check_image_before_decoding(const uint8_t* bytes, size_t size, const std::string& source);

}  // namespace cutrain
