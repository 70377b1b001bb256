#include "data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <stdexcept>

#include <stb_image.h>
#include <stb_image_resize.h>
#include <stb_image_write.h>

#include "data/image_check.h"

namespace cutrain {

namespace fs = std::filesystem;

bool looks_like_image_folder(const std::string& root) {
  return fs::is_directory(fs::path(root) / "train") || fs::is_directory(fs::path(root) / "test");
}

static bool is_image_file(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".bmp";
}

// What an entry is when it is neither a folder nor a regular file ("a symbolic link to nothing",
// "a FIFO"), or empty when it is one of those two.
static std::string odd_entry(const fs::directory_entry& entry) {
  const fs::file_type type = entry.status().type();  // through a symbolic link
  if (type == fs::file_type::directory || type == fs::file_type::regular) return "";
  if (type == fs::file_type::not_found) return "a symbolic link to nothing";
  if (type == fs::file_type::fifo) return "a FIFO";
  if (type == fs::file_type::socket) return "a socket";
  return "a device, not a file";
}

// The class folders of `dir`, or the image files of a class folder. Other regular files (a README)
// are passed over, as torchvision's ImageFolder does; a dangling link, a FIFO or a device, which
// would otherwise be left out of the data without a word (or block a reader), is refused, naming
// the first and counting them all.
static std::vector<fs::path> sorted_entries(const fs::path& dir, bool directories) {
  std::vector<fs::path> entries;
  std::string first_odd;
  int odd = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (const std::string what = odd_entry(entry); !what.empty()) {
      if (odd++ == 0) first_odd = entry.path().string() + ": " + what;
    } else if (directories ? entry.is_directory() : (entry.is_regular_file() && is_image_file(entry.path()))) {
      entries.push_back(entry.path());
    }
  }
  if (odd > 0)
    throw std::runtime_error(first_odd + (odd > 1 ? " (and " + std::to_string(odd - 1) + " more such entries)" : "") +
                             " in an image folder; remove it, or make it a file or a folder");
  std::sort(entries.begin(), entries.end());
  return entries;
}

void decode_image(const uint8_t* bytes, size_t size, const std::string& source, int height, int width,
                  int64_t max_pixels, uint8_t* out) {
  if (size > size_t(std::numeric_limits<int>::max()))
    throw std::runtime_error(source + ": " + std::to_string(size) + " bytes is too large a file for an image");
  const int length = int(size);
  check_image_before_decoding(bytes, size, source);  // what Debian's stb_image must not see
  // The size first, from the header alone: stb_image_resize aborts on an image without pixels,
  // and a tiny file can declare a huge one.
  int w = 0, h = 0, channels_in_file = 0;
  if (!stbi_info_from_memory(bytes, length, &w, &h, &channels_in_file))
    throw std::runtime_error(source + ": cannot decode image: " + stbi_failure_reason());
  const std::string size_text = std::to_string(w) + "x" + std::to_string(h);
  if (w <= 0 || h <= 0) throw std::runtime_error(source + ": the image is " + size_text + ": it has no pixels");
  if (int64_t(w) * h > max_pixels)
    throw std::runtime_error(source + ": the image is " + size_text + ", more than " + std::to_string(max_pixels) +
                             " pixels (--max-image-pixels)");
  int decoded_w = 0, decoded_h = 0;
  std::unique_ptr<uint8_t, void (*)(void*)> pixels(
      stbi_load_from_memory(bytes, length, &decoded_w, &decoded_h, &channels_in_file, 3), stbi_image_free);
  if (!pixels) throw std::runtime_error(source + ": cannot decode image: " + stbi_failure_reason());
  if (decoded_w != w || decoded_h != h)
    throw std::runtime_error(source + ": the header says " + size_text + ", but " + std::to_string(decoded_w) + "x" +
                             std::to_string(decoded_h) + " was decoded");
  if (w == width && h == height) {
    std::copy(pixels.get(), pixels.get() + size_t(w) * h * 3, out);
  } else if (!stbir_resize_uint8(pixels.get(), w, h, 0, out, width, height, 0, 3)) {
    throw std::runtime_error(source + ": cannot resize " + std::to_string(w) + "x" + std::to_string(h) + " to " +
                             std::to_string(width) + "x" + std::to_string(height));
  }
}

// Reads `path` and decodes it (decode_image).
static void read_image(const fs::path& path, int height, int width, int64_t max_pixels, uint8_t* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open: " + std::strerror(errno));
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error(path.string() + ": read error");
  decode_image(bytes.data(), bytes.size(), path.string(), height, width, max_pixels, out);
}

std::vector<std::string> image_folder_classes(const std::string& split_dir) {
  std::vector<std::string> names;
  for (const auto& dir : sorted_entries(split_dir, /*directories=*/true)) names.push_back(dir.filename().string());
  return names;
}

Dataset load_image_folder(const std::string& split_dir, int64_t max_pixels, int height, int width) {
  if (!fs::is_directory(split_dir))
    throw std::runtime_error(split_dir + ": missing; an image folder holds <class>/*.png|jpg|jpeg|bmp");
  Dataset dataset;
  dataset.height = height;
  dataset.width = width;
  dataset.class_names = image_folder_classes(split_dir);
  if (dataset.class_names.empty())
    throw std::runtime_error(split_dir + ": no class folders (expected <class>/*.png|jpg|jpeg|bmp)");
  dataset.num_classes = int(dataset.class_names.size());
  for (size_t label = 0; label < dataset.class_names.size(); ++label) {
    for (const auto& file : sorted_entries(fs::path(split_dir) / dataset.class_names[label], /*directories=*/false)) {
      dataset.images.resize(dataset.images.size() + dataset.image_bytes());
      read_image(file, height, width, max_pixels,
                 dataset.images.data() + dataset.images.size() - dataset.image_bytes());
      dataset.labels.push_back(int32_t(label));
    }
  }
  if (dataset.size() == 0)
    throw std::runtime_error(split_dir + ": no .png, .jpg, .jpeg or .bmp images in its class folders");
  dataset.validate(split_dir);
  return dataset;
}

void write_image_folder(const std::string& split_dir, const Dataset& dataset) {
  std::vector<std::string> names = dataset.class_names;
  if (names.empty())
    for (int label = 0; label < dataset.num_classes; ++label) {
      char name[32];
      std::snprintf(name, sizeof name, "class_%04d", label);
      names.push_back(name);
    }
  // Reading sorts the folders by name; only names already sorted give back the same labels.
  if (names.size() != size_t(dataset.num_classes) || !std::is_sorted(names.begin(), names.end()) ||
      std::adjacent_find(names.begin(), names.end()) != names.end())
    throw std::invalid_argument(split_dir +
                                ": class names must be distinct and sorted, one per class, "
                                "for the folder order to keep the labels");
  std::vector<fs::path> class_dirs;
  for (const auto& name : names) {
    class_dirs.push_back(fs::path(split_dir) / name);
    create_dataset_folder(class_dirs.back().string());
  }
  for (size_t i = 0; i < dataset.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "%05zu.png", i);
    const fs::path path = class_dirs.at(dataset.labels[i]) / name;
    if (!stbi_write_png(path.c_str(), dataset.width, dataset.height, dataset.channels, dataset.image(i),
                        dataset.width * dataset.channels))
      throw std::runtime_error(path.string() + ": cannot write PNG");
  }
}

}  // namespace cutrain
