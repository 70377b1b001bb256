#include "app/tensorboard_writer.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "kernels/base/crc32c.h"

namespace cutrain {
namespace {

// The masked CRC of Note [TensorBoard's event file]: a CRC of data that holds CRCs stays telling.
uint32_t masked_crc32c(const std::string& bytes) {
  const uint32_t crc = crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Little-endian bytes of an integer, and protobuf's wire encoding: a field's key is
// (number << 3) | wire type, with type 0 a varint, 1 eight bytes, 2 length-delimited, 5 four bytes.
template <typename T>
std::string little_endian(T value) {
  std::string out(sizeof(T), '\0');
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<char>((static_cast<uint64_t>(value) >> (8 * i)) & 0xff);
  return out;
}

std::string varint(uint64_t v) {
  std::string out;
  for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7f) | 0x80);
  return out + static_cast<char>(v);
}

std::string key(int field, int wire_type) { return varint(static_cast<uint64_t>(field) << 3 | wire_type); }

std::string double_field(int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return key(field, 1) + little_endian(bits);
}

std::string float_field(int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return key(field, 5) + little_endian(bits);
}

std::string bytes_field(int field, const std::string& bytes) { return key(field, 2) + varint(bytes.size()) + bytes; }

double wall_time_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw std::runtime_error("--tensorboard " + dir + ": cannot make the folder (" + error.message() + ")");
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(wall_time_s())) +
                                         "." + host + "." + std::to_string(getpid())))
              .string();
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr)
    throw std::runtime_error("--tensorboard " + dir + ": cannot write " + path_ + " (" + std::strerror(errno) + ")");
  write_record(double_field(1, wall_time_s()) + bytes_field(3, "brain.Event:2"));
}

TensorBoardWriter::~TensorBoardWriter() { std::fclose(file_); }

void TensorBoardWriter::scalar(const std::string& tag, int64_t step, double value) {
  const std::string summary_value = bytes_field(1, tag) + float_field(2, static_cast<float>(value));
  const std::string summary = bytes_field(1, summary_value);
  write_record(double_field(1, wall_time_s()) + key(2, 0) + varint(static_cast<uint64_t>(step)) +
               bytes_field(5, summary));
}

void TensorBoardWriter::write_record(const std::string& event) {
  if (failed_) return;
  const std::string length = little_endian<uint64_t>(event.size());
  const std::string record =
      length + little_endian(masked_crc32c(length)) + event + little_endian(masked_crc32c(event));
  errno = 0;
  if (std::fwrite(record.data(), 1, record.size(), file_) == record.size() && std::fflush(file_) == 0) return;
  failed_ = true;
  std::fprintf(stderr, "cutrain: warning: --tensorboard: cannot write %s (%s); training goes on without it\n",
               path_.c_str(), errno ? std::strerror(errno) : "write failed");
}

}  // namespace cutrain
