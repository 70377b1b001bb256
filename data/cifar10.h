// cifar10.h: the CIFAR-10 binary version (cifar-10-binary.tar.gz, unpacked).
//
// A folder holds data_batch_1.bin .. data_batch_5.bin (train), test_batch.bin (test) and,
// optionally, batches.meta.txt (one class name per line). Each .bin file is a sequence of
// 3073-byte records: 1 label byte, then 3072 pixel bytes, the 1024 red, 1024 green and 1024 blue
// values of a 32 x 32 image, each plane row-major. Any number of records per file is accepted.
// Records are stored planar (CHW); cutrain keeps images interleaved (HWC), so loading transposes.
//
// Errors name the file and what is wrong: a missing file (and what the folder must hold), a size
// that is not a multiple of 3073, a label >= 10 (with the record's index), an empty dataset, a
// batches.meta.txt that is there but cannot be read (a folder, a dangling link, no permission).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace cutrain {

inline constexpr int kCifarClasses = 10;
inline constexpr size_t kCifarRecordBytes = 1 + 3 * 32 * 32;

// The file names of one split, in reading order.
std::vector<std::string> cifar10_files(bool train);

// True when `dir` holds at least one of the CIFAR-10 .bin files.
bool looks_like_cifar10(const std::string& dir);

Dataset load_cifar10(const std::string& dir, bool train);

// Appends the records in the `size` bytes of one .bin file to `dataset` (32 x 32 x 3, 10
// classes), transposed to HWC. Throws std::runtime_error("<source>: ...") in one line. Needs no
// file: the reader and a fuzzer call it alike.
void append_cifar10_records(const uint8_t* bytes, size_t size, const std::string& source, Dataset& dataset);

// Writes `train` as data_batch_1..5.bin (records split as evenly as possible), `test` as
// test_batch.bin, and batches.meta.txt from train.class_names. Both must be 32 x 32 x 3 with
// labels < 256. Creates `dir` if needed.
void write_cifar10(const std::string& dir, const Dataset& train, const Dataset& test);

}  // namespace cutrain
