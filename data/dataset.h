// dataset.h: an image classification dataset held in memory as uint8 HWC images and int labels.
//
// Every source (CIFAR-10 binary files, image folders, the synthetic generator) produces this one
// form; the loader and the GPU augmentation read nothing else. 50,000 CIFAR images are 150 MiB.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cutrain {

struct Dataset {
  int height = 32;
  int width = 32;
  int channels = 3;
  int num_classes = 0;
  std::vector<std::string> class_names;  // may be empty (names unknown)
  std::vector<uint8_t> images;           // size() * image_bytes(), each image H x W x C interleaved
  std::vector<int32_t> labels;           // in [0, num_classes)

  size_t size() const { return labels.size(); }
  size_t image_bytes() const { return size_t(height) * width * channels; }
  const uint8_t* image(size_t i) const { return images.data() + i * image_bytes(); }

  // Throws std::runtime_error naming `source` when the dataset is empty, the image bytes do not
  // match the labels, or a label is out of range (with the record's index).
  void validate(const std::string& source) const;
};

// Creates `dir` and its parents for a dataset writer; throws "<dir>: cannot create the folder
// (<why>)" in one line.
void create_dataset_folder(const std::string& dir);

}  // namespace cutrain
