// safetensors.h: the safetensors file format (Hugging Face), read and written without Python.
//
//   [8 bytes: N, little-endian u64] [N bytes: JSON header] [data]
//   header = { "name": {"dtype": "F32", "shape": [64, 3, 3, 3], "data_offsets": [begin, end]}, ...,
//              "__metadata__": {"key": "value", ...} }      offsets relative to the data start
//
// Writing is atomic: a temporary file beside the target (created afresh, never through a
// symbolic link planted at its name), fsync, rename. Reading validates
// everything before trusting it (header length against the file size, the JSON, each entry's
// dtype, shape and offsets inside the data and equal to numel x element size, the tensors tiling
// the data without gaps or overlaps, no key twice in an object, no tensor without a name) and
// throws std::runtime_error("<path>: <what is wrong>") in one line; a corrupt file never crashes.
//
// Note [Tensor checksums]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The writer records the CRC-32C (kernels/base/crc32c.h) of each tensor's bytes in the
// metadata key "tensor_crc32c", a JSON object of eight hex digits by tensor name, and the reader checks every
// tensor against it, refusing a file whose bytes changed after it was written (a flipped bit, a torn copy)
// in one line naming the tensor. The header itself is checked by its parse. A file without the key
// (torchvision's side writes none, nor did cutrain before) still reads, and says that it was not verified
// (SafeTensorsFile::verified). CRC-32C rather than a cryptographic hash: it guards against accidents, not
// against someone who rewrites the checksums too, and the CPU computes it at several GB/s.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cutrain {

struct SafeTensor {
  std::string dtype;  // "F32", "I64", "BF16", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // little-endian, row-major
};

// The metadata key of Note [Tensor checksums].
inline constexpr const char* kTensorChecksumsKey = "tensor_crc32c";

struct SafeTensorsFile {
  std::map<std::string, SafeTensor> tensors;
  std::map<std::string, std::string> metadata;  // the writer adds kTensorChecksumsKey; the reader takes it out
  bool verified = false;  // read: every tensor matched its recorded checksum; false where the file records none
};

// Bytes per element of a safetensors dtype name; 0 for a name it does not know.
size_t safetensors_dtype_size(const std::string& dtype);

void write_safetensors(const std::string& path, const SafeTensorsFile& file);
SafeTensorsFile read_safetensors(const std::string& path);
// The metadata of the file at `path`, from its header alone (the tensors are not read), with the
// header checked as read_safetensors checks it.
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);
// The same from a file's bytes, with `path` naming them in errors: no file needed (a fuzzer's way in).
SafeTensorsFile parse_safetensors(const std::vector<uint8_t>& bytes, const std::string& path);

}  // namespace cutrain
