// TensorBoard's event files as app/tensorboard_writer.h writes them, read back byte by byte: each
// record's framing and both masked CRC-32Cs (checked with a CRC computed here bit by bit, not with the
// writer's table), and each Event's fields. tests/scripts/test_tensorboard.sh reads the files of a
// real training with TensorBoard's own reader.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "app/tensorboard_writer.h"
#include "tests/temp_dir.h"

namespace {

uint32_t crc32c_bitwise(const std::string& bytes) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1)));
  }
  return ~crc;
}

uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint64_t read_le(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes.at(at + i))) << (8 * i);
  return v;
}

uint64_t read_varint(const std::string& bytes, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto b = static_cast<unsigned char>(bytes.at(at++));
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
}

// A protobuf message's fields: number -> the raw value (a varint or fixed number's bits, or the bytes).
struct Field {
  uint64_t number = 0;
  std::string bytes;
};
std::map<int, Field> fields(const std::string& message) {
  std::map<int, Field> out;
  size_t at = 0;
  while (at < message.size()) {
    const uint64_t key = read_varint(message, at);
    Field& f = out[static_cast<int>(key >> 3)];
    switch (key & 7) {
      case 0: f.number = read_varint(message, at); break;
      case 1: f.number = read_le(message, at, 8); at += 8; break;
      case 5: f.number = read_le(message, at, 4); at += 4; break;
      case 2: {
        const uint64_t n = read_varint(message, at);
        f.bytes = message.substr(at, n);
        at += n;
        break;
      }
      default: FAIL("wire type " << (key & 7));
    }
  }
  return out;
}

// The records of an event file, each checked against its framing and CRCs.
std::vector<std::string> records(const std::string& file) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < file.size()) {
    REQUIRE(at + 12 <= file.size());
    const std::string length = file.substr(at, 8);
    const uint64_t n = read_le(file, at, 8);
    CHECK(read_le(file, at + 8, 4) == masked(crc32c_bitwise(length)));
    REQUIRE(at + 12 + n + 4 <= file.size());
    const std::string data = file.substr(at + 12, n);
    CHECK(read_le(file, at + 12 + n, 4) == masked(crc32c_bitwise(data)));
    out.push_back(data);
    at += 12 + n + 4;
  }
  return out;
}

double as_double(uint64_t bits) {
  double v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

float as_float(uint64_t bits) {
  const auto b = static_cast<uint32_t>(bits);
  float v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

}  // namespace

TEST_CASE("The CRC-32C this test checks with is the standard one", "[app]") {
  CHECK(crc32c_bitwise("123456789") == 0xe3069283u);  // the check value of CRC-32C (RFC 3720, B.4)
}

TEST_CASE("An event file: a version record, then one framed and checksummed Event per scalar", "[app]") {
  cutrain::test::TempDir dir;
  {
    cutrain::TensorBoardWriter writer(dir / "tb/run");  // a folder that does not exist yet
    writer.scalar("train/loss", 25, 2.25);
    writer.scalar("test/accuracy", 1LL << 40, 0.875);
  }
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir / "tb/run")) files.push_back(e.path());
  REQUIRE(files.size() == 1);
  CHECK(files[0].filename().string().rfind("events.out.tfevents.", 0) == 0);

  const std::vector<std::string> events = records(cutrain::test::read_file(files[0].string()));
  REQUIRE(events.size() == 3);
  auto version = fields(events[0]);
  CHECK(version[3].bytes == "brain.Event:2");
  CHECK(as_double(version[1].number) > 1.7e9);  // wall time in seconds since 1970

  const struct {
    const char* tag;
    uint64_t step;
    float value;
  } expected[] = {{"train/loss", 25, 2.25f}, {"test/accuracy", 1ULL << 40, 0.875f}};
  for (int i = 0; i < 2; ++i) {
    auto event = fields(events[i + 1]);
    CHECK(as_double(event[1].number) >= as_double(version[1].number));
    CHECK(event[2].number == expected[i].step);
    auto summary = fields(event[5].bytes);
    auto value = fields(summary[1].bytes);
    CHECK(value[1].bytes == expected[i].tag);
    CHECK(as_float(value[2].number) == expected[i].value);
  }
}

TEST_CASE("A TensorBoard folder that cannot be made: one line naming it", "[app]") {
  cutrain::test::TempDir dir;
  std::FILE* f = std::fopen((dir / "file").c_str(), "w");
  std::fclose(f);
  CHECK_THROWS_WITH(cutrain::TensorBoardWriter(dir / "file/tb"),
                    Catch::StartsWith("--tensorboard " + (dir / "file/tb") + ": cannot make the folder"));
}
