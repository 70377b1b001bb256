// load.h: one entry point for every dataset on disk, whatever its format.
//
//   Dataset train = load_dataset("data/cifar-10-batches-bin", /*train=*/true);
//
// A folder with CIFAR-10 .bin files is read as CIFAR-10 (data/cifar10.h), and so is the folder
// that cifar-10-binary.tar.gz was unpacked in (holding cifar-10-batches-bin/); a folder with train/
// and test/ class folders as an image folder (data/image_folder.h). Anything else is an error
// that names the folder and says what it must hold.
#pragma once

#include <string>

#include "data/dataset.h"
#include "data/image_folder.h"

namespace cutrain {

enum class DataFormat { cifar10, image_folder };

// "cifar" or "folder" (the --format spellings) to a format; throws for anything else.
DataFormat parse_data_format(const std::string& name);

DataFormat detect_data_format(const std::string& dir);

// `max_pixels`: the largest image an image folder may hold (data/image_folder.h).
Dataset load_dataset(const std::string& dir, bool train, int64_t max_pixels = kDefaultMaxImagePixels);

// Writes both splits to `dir` in `format` (creating it); load_dataset reads them back unchanged.
void write_dataset(const std::string& dir, DataFormat format, const Dataset& train, const Dataset& test);

}  // namespace cutrain
