// test_data_util.h: helpers for the [data] tests: a unique temporary folder that removes itself,
// and small datasets built by hand.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace cutrain::test {

// mkdtemp under the system temp folder, so parallel tests never collide.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "cutrain-test-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// `count` 32 x 32 x 3 images whose every byte is a hash of (image, position), labels i % classes.
inline Dataset patterned_dataset(size_t count, int classes = 10) {
  Dataset d;
  d.num_classes = classes;
  d.images.resize(count * d.image_bytes());
  for (size_t i = 0; i < d.images.size(); ++i) d.images[i] = uint8_t((i * 2654435761u) >> 13);
  for (size_t i = 0; i < count; ++i) d.labels.push_back(int32_t(i % size_t(classes)));
  return d;
}

}  // namespace cutrain::test
