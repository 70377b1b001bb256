#include "data/cifar10.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace cutrain {

namespace fs = std::filesystem;

static constexpr int kSide = 32;
static constexpr int kPlane = kSide * kSide;

std::vector<std::string> cifar10_files(bool train) {
  if (!train) return {"test_batch.bin"};
  return {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"};
}

bool looks_like_cifar10(const std::string& dir) {
  for (bool train : {true, false})
    for (const auto& name : cifar10_files(train))
      if (fs::is_regular_file(fs::path(dir) / name)) return true;
  return false;
}

// A batch file's size, checked against whole records before anything is read: a file cut short, or
// a sparse one of 30 GB, is refused at once rather than read whole (std::bad_alloc).
static size_t checked_record_bytes(uintmax_t size, const std::string& source) {
  if (size == 0)  // "a multiple of 3073 bytes", but no batch of CIFAR-10's is empty
    throw std::runtime_error(source +
                             ": empty (0 bytes); a CIFAR-10 batch file holds records of 3073 bytes "
                             "(was a download or a copy cut short?)");
  if (size % kCifarRecordBytes != 0)
    throw std::runtime_error(source + ": size " + std::to_string(size) + " is not a multiple of the 3073-byte record");
  return size_t(size);
}

// What stands at `path` where a batch file should be, for the line that refuses it.
static std::string what_is_there(const fs::path& path) {
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(path, ec), target = fs::status(path, ec);
  if (!fs::exists(link)) return "missing";
  if (!fs::exists(target)) return "a link to nothing (" + fs::read_symlink(path, ec).string() + ")";
  if (fs::is_directory(target)) return "a folder, not a file";
  if (fs::is_fifo(target)) return "a FIFO (a named pipe), not a file";
  if (fs::is_character_file(target) || fs::is_block_file(target)) return "a device, not a file";
  if (fs::is_socket(target)) return "a socket, not a file";
  return "not a regular file";
}

static std::vector<uint8_t> read_file(const fs::path& path) {
  const size_t size = checked_record_bytes(fs::file_size(path), path.string());
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open");
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(size);
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(path.string() + ": " + std::to_string(size / kCifarRecordBytes) +
                             " records, more than this process can hold in memory");
  }
  in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!in) throw std::runtime_error(path.string() + ": read failed");
  return bytes;
}

void append_cifar10_records(const uint8_t* bytes, size_t size, const std::string& source, Dataset& dataset) {
  checked_record_bytes(size, source);
  const size_t records = size / kCifarRecordBytes;
  const size_t first = dataset.size();
  dataset.labels.resize(first + records);
  dataset.images.resize((first + records) * dataset.image_bytes());
  for (size_t r = 0; r < records; ++r) {
    const uint8_t* record = bytes + r * kCifarRecordBytes;
    if (record[0] >= kCifarClasses)
      throw std::runtime_error(source + ": record " + std::to_string(r) + " has label " + std::to_string(record[0]) +
                               ", CIFAR-10 labels are 0..9");
    dataset.labels[first + r] = record[0];
    const uint8_t* planes = record + 1;
    uint8_t* hwc = dataset.images.data() + (first + r) * dataset.image_bytes();
    for (int p = 0; p < kPlane; ++p)
      for (int c = 0; c < 3; ++c) hwc[p * 3 + c] = planes[c * kPlane + p];
  }
}

// batches.meta.txt: one class name per line (blank lines ignored). A file that is there but
// cannot be read is an error, not a dataset without names.
static std::vector<std::string> read_class_names(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw std::runtime_error(path.string() + ": cannot read the class names: not a file (a folder, a dangling link?)");
  errno = 0;
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path.string() + ": cannot read the class names: " + std::strerror(errno));
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) names.push_back(line);
  }
  if (in.bad()) throw std::runtime_error(path.string() + ": read error");
  if (!names.empty() && names.size() != size_t(kCifarClasses))
    throw std::runtime_error(path.string() + ": " + std::to_string(names.size()) + " class names, expected " +
                             std::to_string(kCifarClasses));
  return names;
}

Dataset load_cifar10(const std::string& dir, bool train) {
  Dataset dataset;
  dataset.num_classes = kCifarClasses;
  const fs::path root(dir);
  for (const auto& name : cifar10_files(train)) {
    const fs::path path = root / name;
    if (!fs::is_regular_file(path))
      throw std::runtime_error(path.string() + ": " + what_is_there(path) +
                               "; a CIFAR-10 folder holds data_batch_1.bin .. "
                               "data_batch_5.bin and test_batch.bin (the binary version, cifar-10-binary.tar.gz)");
    const std::vector<uint8_t> bytes = read_file(path);
    append_cifar10_records(bytes.data(), bytes.size(), path.string(), dataset);
  }
  const fs::path meta = root / "batches.meta.txt";
  if (fs::exists(fs::symlink_status(meta))) dataset.class_names = read_class_names(meta);
  dataset.validate(dir);
  return dataset;
}

static void check_writable(const Dataset& dataset, const std::string& what) {
  if (dataset.height != kSide || dataset.width != kSide || dataset.channels != 3)
    throw std::invalid_argument(what + ": CIFAR-10 files hold 32 x 32 x 3 images");
  for (int32_t label : dataset.labels)
    if (label < 0 || label > 255) throw std::invalid_argument(what + ": a label does not fit in a byte");
}

// Records [begin, end) of `dataset` as one .bin file, HWC transposed back to planar.
static void write_records(const fs::path& path, const Dataset& dataset, size_t begin, size_t end) {
  std::vector<uint8_t> bytes((end - begin) * kCifarRecordBytes);
  for (size_t i = begin; i < end; ++i) {
    uint8_t* record = bytes.data() + (i - begin) * kCifarRecordBytes;
    record[0] = uint8_t(dataset.labels[i]);
    const uint8_t* hwc = dataset.image(i);
    for (int c = 0; c < 3; ++c)
      for (int p = 0; p < kPlane; ++p) record[1 + c * kPlane + p] = hwc[p * 3 + c];
  }
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error(path.string() + ": write failed");
}

void write_cifar10(const std::string& dir, const Dataset& train, const Dataset& test) {
  check_writable(train, "train set");
  check_writable(test, "test set");
  create_dataset_folder(dir);
  const auto train_files = cifar10_files(true);
  const size_t files = train_files.size();
  if (train.size() < files)  // an empty batch file would be refused when read
    throw std::invalid_argument(dir + ": a CIFAR-10 training split needs at least " + std::to_string(files) +
                                " images, one for each data_batch file, not " + std::to_string(train.size()));
  for (size_t f = 0; f < files; ++f)
    write_records(fs::path(dir) / train_files[f], train, train.size() * f / files, train.size() * (f + 1) / files);
  write_records(fs::path(dir) / cifar10_files(false)[0], test, 0, test.size());
  if (!train.class_names.empty()) {
    std::ofstream meta(fs::path(dir) / "batches.meta.txt");
    for (const auto& name : train.class_names) meta << name << "\n";
    if (!meta) throw std::runtime_error(dir + "/batches.meta.txt: write failed");
  }
}

}  // namespace cutrain
