// image_folder.h: a folder of image files per class, as torchvision's ImageFolder reads them.
//
//   root/train/<class>/*.png|jpg|jpeg|bmp     the training split
//   root/test/<class>/*.png|jpg|jpeg|bmp      the test split
//
// load_image_folder reads one split folder (root/train or root/test): the classes are its
// sub-folders sorted by name (label 0 is the first), files within a class sorted by name too.
// Images are decoded with stb_image; grey or grey+alpha or RGBA images become RGB (alpha is
// dropped), and any image whose size differs is resized with stb_image_resize. Both splits must
// hold the same class folders, or the labels would not mean the same thing.
#pragma once

#include <string>
#include <vector>

#include "data/dataset.h"

namespace cutrain {

// True when `root` holds a train/ or test/ sub-folder.
bool looks_like_image_folder(const std::string& root);

// The class folder names of a split folder, sorted: label i is the i-th.
std::vector<std::string> image_folder_classes(const std::string& split_dir);

// Reads one split folder (e.g. "root/train"). Throws std::runtime_error naming the folder (no
// class folders, no images) or the file (unreadable image).
Dataset load_image_folder(const std::string& split_dir, int height = 32, int width = 32);

// Writes dataset image i as split_dir/<class name>/<i, 5 digits>.png (class names default to
// "class_0000", "class_0001", ...). Creates the folders. The class names must
// be sorted, since reading sorts the folders: otherwise the labels would come back permuted.
void write_image_folder(const std::string& split_dir, const Dataset& dataset);

}  // namespace cutrain
