#include "nn/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <tuple>

#include <nlohmann/json.hpp>

#include "kernels/base/crc32c.h"

namespace cutrain {

size_t safetensors_dtype_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL") return 1;
  return 0;
}

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail(path, std::string("cannot write: ") + std::strerror(errno));
    p += w;
    n -= size_t(w);
  }
}

std::string directory_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

// Creates a new file at `path` for writing, never through a symbolic link there: what has the name
// already (a link someone planted, a stale file of a process with this pid) is unlinked first.
// Returns the descriptor, or -1 with errno set.
int create_exclusive(const std::string& path) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(path.c_str(), kFlags, 0644);
  if (fd < 0 && errno == EEXIST && ::unlink(path.c_str()) == 0) fd = ::open(path.c_str(), kFlags, 0644);
  return fd;
}

}  // namespace

// A tensor's checksum as recorded: eight lowercase hex digits.
std::string checksum_text(const SafeTensor& t) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", crc32c(t.data.data(), t.data.size()));
  return text;
}

void write_safetensors(const std::string& path, const SafeTensorsFile& file) {
  nlohmann::json header = nlohmann::json::object();
  nlohmann::json checksums = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : file.tensors) {
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
    checksums[name] = checksum_text(t);
  }
  std::map<std::string, std::string> metadata = file.metadata;
  metadata[kTensorChecksumsKey] = checksums.dump();  // Note [Tensor checksums]
  header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as Python writes it
  uint64_t length = text.size();
  uint8_t length_le[8];
  for (int i = 0; i < 8; ++i) length_le[i] = uint8_t(length >> (8 * i));

  // Atomic: write a temporary beside the target, flush it to disk, then rename over the target.
  // The temporary is created afresh, never opened through a link planted at its name.
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = create_exclusive(tmp);
  if (fd < 0) fail(path, std::string("cannot create ") + tmp + ": " + std::strerror(errno));
  try {
    write_all(fd, length_le, 8, path);
    write_all(fd, text.data(), text.size(), path);
    for (const auto& [name, t] : file.tensors) write_all(fd, t.data.data(), t.data.size(), path);
    if (::fsync(fd) != 0) fail(path, std::string("fsync: ") + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail(path, std::string("cannot rename the temporary file: ") + std::strerror(err));
  }
  int dir = ::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {  // make the rename itself durable
    ::fsync(dir);
    ::close(dir);
  }
}

namespace {

// Where a tensor's bytes lie in the data section.
struct Span {
  uint64_t begin, end;
  std::string name;
  bool operator<(const Span& other) const { return std::tie(begin, end) < std::tie(other.begin, other.end); }
};

// One header entry, checked against the data section (bytes from data_start to the end).
SafeTensor parse_entry(const std::string& path, const std::string& name, const nlohmann::json& entry,
                       const std::vector<uint8_t>& bytes, uint64_t data_start, std::vector<Span>& spans) {
  const std::string where = "tensor " + name;
  if (!entry.is_object()) fail(path, where + ": header entry is not an object");
  const auto dtype = entry.find("dtype");
  const auto shape = entry.find("shape");
  const auto offsets = entry.find("data_offsets");
  if (dtype == entry.end() || !dtype->is_string()) fail(path, where + ": no string \"dtype\"");
  if (shape == entry.end() || !shape->is_array()) fail(path, where + ": no array \"shape\"");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned()) {
    fail(path, where + ": \"data_offsets\" is not two unsigned integers");
  }
  SafeTensor t;
  t.dtype = dtype->get<std::string>();
  size_t element = safetensors_dtype_size(t.dtype);
  if (element == 0) fail(path, where + ": unknown dtype " + t.dtype);
  uint64_t numel = 1;
  for (const auto& d : *shape) {
    if (!d.is_number_unsigned()) fail(path, where + ": shape has an entry that is not a non-negative integer");
    uint64_t n = d.get<uint64_t>();
    if (n != 0 && numel > (uint64_t(1) << 62) / n) fail(path, where + ": shape is absurdly large");
    numel *= n;
    t.shape.push_back(int64_t(n));
  }
  uint64_t begin = (*offsets)[0].get<uint64_t>(), end = (*offsets)[1].get<uint64_t>();
  uint64_t data_size = bytes.size() - data_start;
  if (begin > end || end > data_size) {
    fail(path, where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                   "] outside the data section of " + std::to_string(data_size) + " bytes");
  }
  if (end - begin != numel * element) {
    fail(path, where + ": holds " + std::to_string(end - begin) + " bytes, but " + t.dtype + " of " +
                   std::to_string(numel) + " elements needs " + std::to_string(numel * element));
  }
  t.data.assign(bytes.begin() + int64_t(data_start + begin), bytes.begin() + int64_t(data_start + end));
  spans.push_back({begin, end, name});
  return t;
}

// The tensors must tile the data section exactly, no gaps, no overlaps (as Python requires).
void check_tiling(const std::string& path, std::vector<Span> spans, uint64_t data_size) {
  std::sort(spans.begin(), spans.end());
  uint64_t covered = 0;
  for (const Span& s : spans) {
    if (s.begin != covered) {
      fail(path, "tensor " + s.name + ": data_offsets start at " + std::to_string(s.begin) + " where byte " +
                     std::to_string(covered) + " was expected (a gap or an overlap)");
    }
    covered = s.end;
  }
  if (covered != data_size) {
    fail(path, "the data section has " + std::to_string(data_size - covered) + " bytes after the last tensor");
  }
}

// nlohmann::json keeps the last of two equal keys in an object; a header must not have any. The
// parser's callback sees every key: one set of the keys seen so far per object being parsed.
nlohmann::json parse_header(const std::string& path, const uint8_t* begin, const uint8_t* end) {
  std::vector<std::set<std::string>> keys_of_open_objects;
  std::string duplicate;
  auto watch = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) keys_of_open_objects.emplace_back();
    if (event == Event::object_end) keys_of_open_objects.pop_back();
    if (event == Event::key && !keys_of_open_objects.back().insert(parsed.get<std::string>()).second &&
        duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(begin, end, watch);
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) fail(path, "header has the key \"" + duplicate + "\" twice");
  return header;
}

// The header's "__metadata__": an object of strings, or absent.
std::map<std::string, std::string> metadata_of(const nlohmann::json& header, const std::string& path) {
  std::map<std::string, std::string> metadata;
  const auto entry = header.find("__metadata__");
  if (entry == header.end()) return metadata;
  if (!entry->is_object()) fail(path, "__metadata__ is not an object");
  for (const auto& [key, value] : entry->items()) {
    if (!value.is_string()) fail(path, "__metadata__ " + key + " is not a string");
    metadata[key] = value.get<std::string>();
  }
  return metadata;
}

// Note [Tensor checksums]: every tensor against the checksums that `metadata` records, if it records any.
bool verify_checksums(const std::map<std::string, SafeTensor>& tensors,
                      const std::map<std::string, std::string>& metadata, const std::string& path) {
  const auto recorded = metadata.find(kTensorChecksumsKey);
  if (recorded == metadata.end()) return false;
  const nlohmann::json checksums = nlohmann::json::parse(recorded->second, nullptr, /*allow_exceptions=*/false);
  if (!checksums.is_object() || checksums.size() != tensors.size())
    fail(path, std::string("__metadata__ ") + kTensorChecksumsKey + " is not one checksum for each tensor");
  for (const auto& [name, t] : tensors) {
    const auto it = checksums.find(name);
    if (it == checksums.end() || !it->is_string())
      fail(path, std::string("__metadata__ ") + kTensorChecksumsKey + " has no checksum for tensor " + name);
    const std::string read = checksum_text(t);
    if (it->get<std::string>() != read)
      fail(path, "tensor " + name + ": its bytes do not match their checksum (CRC-32C " + it->get<std::string>() +
                     " written, " + read + " read): the file changed after it was written");
  }
  return true;
}

// A folder opens as a stream, and its first read fails with a message about basic_filebuf.
void refuse_folder(const std::string& path) {
  if (std::filesystem::is_directory(path)) fail(path, "a folder, not a safetensors file");
}

// The header's length from the first 8 bytes of a file of `file_size` bytes.
uint64_t header_length(const uint8_t* first8, uint64_t file_size, const std::string& path) {
  if (file_size < 8) fail(path, "file of " + std::to_string(file_size) + " bytes is too short for a header");
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= uint64_t(first8[i]) << (8 * i);
  if (length > file_size - 8) {
    // What a file that is not safetensors usually is: torch.save writes a zip archive, and wrote a
    // pickle before PyTorch 1.6.
    if (std::memcmp(first8, "PK\x03\x04", 4) == 0 || (first8[0] == 0x80 && first8[1] >= 2 && first8[1] <= 5))
      fail(path,
           "a PyTorch file (torch.save's zip or pickle, such as a .pth), not safetensors; "
           "bench/torchvision_interop.py convert makes a cutrain checkpoint of a torchvision state_dict");
    fail(path, "header length " + std::to_string(length) + " exceeds the file (" + std::to_string(file_size) +
                   " bytes): truncated or not a safetensors file");
  }
  return length;
}

}  // namespace

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
  refuse_folder(path);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail(path, std::string("cannot open: ") + std::strerror(errno));
  const uint64_t file_size = uint64_t(in.tellg());
  uint8_t first8[8] = {};
  in.seekg(0);
  in.read(reinterpret_cast<char*>(first8), std::min<uint64_t>(8, file_size));
  const uint64_t length = header_length(first8, file_size, path);
  std::vector<uint8_t> text(length);
  in.read(reinterpret_cast<char*>(text.data()), std::streamsize(length));
  if (!in) fail(path, "read error");
  const nlohmann::json header = parse_header(path, text.data(), text.data() + text.size());
  if (!header.is_object()) fail(path, "header is not a JSON object");
  std::map<std::string, std::string> metadata = metadata_of(header, path);
  metadata.erase(kTensorChecksumsKey);  // Note [Tensor checksums]: the tensors' business, checked when they are read
  return metadata;
}

SafeTensorsFile parse_safetensors(const std::vector<uint8_t>& bytes, const std::string& path) {
  const uint64_t length = header_length(bytes.data(), bytes.size(), path);
  const nlohmann::json header = parse_header(path, bytes.data() + 8, bytes.data() + 8 + length);
  if (!header.is_object()) fail(path, "header is not a JSON object");

  SafeTensorsFile file;
  file.metadata = metadata_of(header, path);
  std::vector<Span> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    if (name.empty()) fail(path, "a tensor has an empty name");
    file.tensors[name] = parse_entry(path, name, entry, bytes, 8 + length, spans);
  }
  check_tiling(path, std::move(spans), bytes.size() - 8 - length);
  file.verified = verify_checksums(file.tensors, file.metadata, path);
  file.metadata.erase(kTensorChecksumsKey);
  return file;
}

SafeTensorsFile read_safetensors(const std::string& path) {
  refuse_folder(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(path, "read error");
  return parse_safetensors(bytes, path);
}

}  // namespace cutrain
