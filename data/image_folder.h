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
//
// An image's size is read from its header before it is decoded: one with no pixels (a BMP header
// can say 0 x 0) or with more than `max_pixels` (a 645-byte JPEG can declare 20000 x 20000, which
// takes seconds and gigabytes to decode) is refused, naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace cutrain {

// True when `root` holds a train/ or test/ sub-folder.
bool looks_like_image_folder(const std::string& root);

// The class folder names of a split folder, sorted: label i is the i-th.
std::vector<std::string> image_folder_classes(const std::string& split_dir);

// The default largest image, in pixels: 4096 x 4096 (48 MiB decoded). --max-image-pixels sets another.
inline constexpr int64_t kDefaultMaxImagePixels = int64_t(1) << 24;

// Reads one split folder (e.g. "root/train"). Throws std::runtime_error naming the folder (no
// class folders, no images) or the file (unreadable image, no pixels, more than max_pixels).
Dataset load_image_folder(const std::string& split_dir, int64_t max_pixels = kDefaultMaxImagePixels, int height = 32,
                          int width = 32);

// Decodes the `size` bytes of one image file (PNG, JPEG or BMP, told by its first bytes; see
// data/image_check.h for what else is refused before stb_image sees it) into height x width x 3
// RGB bytes at `out`, resizing it when its own size differs. Throws std::runtime_error("<source>:
// <what is wrong>") in one line. Needs no file: the image folder reader and a fuzzer call it alike.
void decode_image(const uint8_t* bytes, size_t size, const std::string& source, int height, int width,
                  int64_t max_pixels, uint8_t* out);

// Writes dataset image i as split_dir/<class name>/<i, 5 digits>.png (class names default to
// "class_0000", "class_0001", ...). Creates the folders. The class names must
// be sorted, since reading sorts the folders: otherwise the labels would come back permuted.
void write_image_folder(const std::string& split_dir, const Dataset& dataset);

}  // namespace cutrain
