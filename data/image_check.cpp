#include "data/image_check.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace cutrain {
namespace {

bool starts_with(const uint8_t* bytes, size_t size, const char* magic, size_t length) {
  return size >= length && std::memcmp(bytes, magic, length) == 0;
}

// A JPEG is a sequence of segments, each a marker (0xFF, a code) and, for most codes, a 16-bit
// big-endian length that counts itself; after a start of scan (SOS) come entropy-coded bytes, in
// which 0xFF is followed by 0x00 (a stuffed byte) or a restart code, up to the next marker. A
// define-Huffman-table segment (DHT) holds tables of [class (DC 0, AC 1) and id byte][16 code
// counts][codes]. A start of scan holds [component count] and, per component, [component id][DC
// table id << 4 | AC table id], then [first and last coefficient][successive approximation].
// Walks the segments as stb_image does and refuses any table whose counts add up to over 256, and
// any scan that decodes with a table no DHT before it defined: stb_image 2.27 leaves an undefined
// table's memory as malloc returned it and decodes with that, so the symbol it computes can fall
// outside the table (found by fuzzing: a DHT whose AC class byte was changed to DC failed
// stb_image's assert that the code matches the symbol, and valgrind saw the uninitialised reads).
void check_jpeg_tables(const uint8_t* bytes, size_t size, const std::string& source) {
  auto byte = [&](size_t at) -> size_t { return at < size ? bytes[at] : 0; };  // stb_image reads 0 past the end
  const std::string corrupt = source + ": cannot decode image: corrupt JPEG: ";
  bool defined[2][16] = {};  // [class][id]
  bool progressive = false;
  size_t at = 2;  // after the start of image (FF D8)
  while (at + 1 < size) {
    const size_t code = bytes[at + 1];
    const bool marker = bytes[at] == 0xFF && code != 0x00 && code != 0xFF && !(code >= 0xD0 && code <= 0xD7);
    if (!marker) {  // entropy-coded data, a stuffed byte, a restart or a fill byte
      ++at;
      continue;
    }
    if (code == 0xD9) return;  // end of image
    const size_t length = byte(at + 2) << 8 | byte(at + 3);
    const size_t begin = at + 4, end = at + 2 + length;
    if (code == 0xC2) progressive = true;  // the start of a progressive frame
    if (code == 0xC4) {
      for (size_t table = begin; table < end;) {
        size_t codes = 0;
        for (size_t i = 1; i <= 16; ++i) codes += byte(table + i);
        if (codes > 256)
          throw std::runtime_error(corrupt + "a Huffman table declares " + std::to_string(codes) +
                                   " codes, more than 256");
        defined[byte(table) >> 4 & 1][byte(table) & 15] = true;  // stb_image refuses the other classes
        table += 17 + codes;
      }
    }
    if (code == 0xDA) {
      // Which tables the scan decodes with: a baseline scan, both of each component's; a
      // progressive one, the DC table in a first DC scan (first coefficient 0, no successive
      // approximation high bit) and the AC table in an AC scan (first coefficient above 0).
      const size_t components = byte(begin), after = begin + 1 + 2 * components;
      const bool dc_scan = byte(after) == 0;
      const bool uses_dc = !progressive || (dc_scan && (byte(after + 2) >> 4) == 0);
      const bool uses_ac = !progressive || !dc_scan;
      auto require = [&](bool used, int table_class, size_t id) {
        if (used && !defined[table_class][id])
          throw std::runtime_error(corrupt + "a scan decodes with Huffman table " + (table_class ? "AC " : "DC ") +
                                   std::to_string(id) + ", which no table segment before it defines");
      };
      for (size_t i = 0; i < components; ++i) {
        const size_t tables = byte(begin + 2 + 2 * i);
        require(uses_dc, 0, tables >> 4);
        require(uses_ac, 1, tables & 15);
      }
    }
    at = std::max(end, at + 2);
  }
}

// A PNG is its 8-byte signature, then chunks: a 32-bit big-endian length, a 4-byte type, that many
// bytes of data and a 4-byte CRC. stb_image 2.27 grows its buffer of IDAT data to a chunk's declared
// length before it reads the chunk, so a 100-byte file that declares a 1 GB chunk makes it allocate
// 2 GB. Refuses any chunk that runs past the end of the file.
void check_png_chunks(const uint8_t* bytes, size_t size, const std::string& source) {
  for (size_t at = 8; at + 8 <= size;) {
    const size_t length =
        size_t(bytes[at]) << 24 | size_t(bytes[at + 1]) << 16 | size_t(bytes[at + 2]) << 8 | size_t(bytes[at + 3]);
    if (length > size - at - 8)
      throw std::runtime_error(source + ": cannot decode image: corrupt PNG: a chunk of " + std::to_string(length) +
                               " bytes runs past the end of the file (" + std::to_string(size) + " bytes)");
    if (std::memcmp(bytes + at + 4, "IEND", 4) == 0) return;
    at += 12 + length;
  }
}

}  // namespace

void check_image_before_decoding(const uint8_t* bytes, size_t size, const std::string& source) {
  if (starts_with(bytes, size, "\x89PNG\r\n\x1a\n", 8)) return check_png_chunks(bytes, size, source);
  if (starts_with(bytes, size, "BM", 2)) return;
  if (starts_with(bytes, size, "\xFF\xD8", 2)) return check_jpeg_tables(bytes, size, source);
  throw std::runtime_error(source + ": cannot decode image: not a PNG, JPEG or BMP file");
}

}  // namespace cutrain
