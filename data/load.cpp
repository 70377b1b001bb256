#include "data/load.h"

#include <filesystem>
#include <stdexcept>

#include "data/cifar10.h"
#include "data/image_folder.h"

namespace cutrain {

namespace fs = std::filesystem;

DataFormat parse_data_format(const std::string& name) {
  if (name == "cifar") return DataFormat::cifar10;
  if (name == "folder") return DataFormat::image_folder;
  throw std::invalid_argument("--format: '" + name + "' is neither cifar nor folder");
}

// cifar-10-binary.tar.gz unpacks into cifar-10-batches-bin/: the folder above it is accepted too.
static std::string cifar10_dir(const std::string& dir) {
  const std::string inner = (fs::path(dir) / "cifar-10-batches-bin").string();
  return !looks_like_cifar10(dir) && looks_like_cifar10(inner) ? inner : dir;
}

// Why `path`, which is not a folder, cannot be --data: what it is instead, and what to give.
static std::string not_a_folder(const std::string& path) {
  if (!fs::exists(path)) return path + ": no such folder";
  if (!fs::is_regular_file(path)) return path + ": not a folder (--data names the folder that holds the data)";
  if (path.ends_with(".tar.gz") || path.ends_with(".tgz"))
    return path + ": an archive, not a folder; unpack it first, e.g. scripts/prepare-cifar10.sh " + path + " datasets/";
  const std::string parent = fs::path(path).parent_path().string();
  return path + ": a file, not a folder; --data names the folder that holds it (" + (parent.empty() ? "." : parent) +
         ")";
}

DataFormat detect_data_format(const std::string& dir) {
  if (!fs::is_directory(dir)) throw std::runtime_error(not_a_folder(dir));
  if (looks_like_cifar10(cifar10_dir(dir))) return DataFormat::cifar10;
  if (looks_like_image_folder(dir)) return DataFormat::image_folder;
  for (const std::string& folder : {dir, (fs::path(dir) / "cifar-10-batches-py").string()}) {
    if (fs::exists(fs::path(folder) / "data_batch_1") && fs::exists(fs::path(folder) / "batches.meta"))
      throw std::runtime_error(
          folder +
          ": CIFAR-10's Python version (pickled batches); cutrain reads the binary version, "
          "cifar-10-batches-bin: scripts/prepare-cifar10.sh unpacks its archive, cifar-10-binary.tar.gz");
  }
  throw std::runtime_error(dir +
                           ": not a dataset; it must hold either CIFAR-10's data_batch_1.bin .. "
                           "data_batch_5.bin and test_batch.bin, or train/<class>/*.png and test/<class>/*.png");
}

Dataset load_dataset(const std::string& dir, bool train, int64_t max_pixels) {
  if (detect_data_format(dir) == DataFormat::cifar10) return load_cifar10(cifar10_dir(dir), train);
  const std::string train_dir = (fs::path(dir) / "train").string();
  Dataset dataset = load_image_folder(train ? train_dir : (fs::path(dir) / "test").string(), max_pixels);
  if (!train && fs::is_directory(train_dir) && dataset.class_names != image_folder_classes(train_dir))
    throw std::runtime_error(dir + ": test/ and train/ hold different class folders, so their labels would differ");
  return dataset;
}

void write_dataset(const std::string& dir, DataFormat format, const Dataset& train, const Dataset& test) {
  if (format == DataFormat::cifar10) {
    write_cifar10(dir, train, test);
  } else {
    write_image_folder((fs::path(dir) / "train").string(), train);
    write_image_folder((fs::path(dir) / "test").string(), test);
  }
}

}  // namespace cutrain
