// CIFAR-10 binary files: parsing (planar records to HWC), the writer round trip, every bad input.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include "data/cifar10.h"
#include "data/load.h"
#include "tests/test_data_util.h"

using namespace cutrain;
using cutrain::test::TempDir;
using cutrain::test::write_bytes;

// One record: label, then pixel (y, x) of channel c holds value(c, y, x).
static std::vector<uint8_t> record(uint8_t label, int seed) {
  std::vector<uint8_t> r(kCifarRecordBytes);
  r[0] = label;
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < 1024; ++p) r[1 + c * 1024 + p] = uint8_t(seed + 7 * c + p);
  return r;
}

static void write_split(const TempDir& dir, bool train, int records_per_file) {
  int seed = 0;
  for (const auto& name : cifar10_files(train)) {
    std::vector<uint8_t> bytes;
    for (int i = 0; i < records_per_file; ++i) {
      auto r = record(uint8_t(seed % 10), seed);
      bytes.insert(bytes.end(), r.begin(), r.end());
      ++seed;
    }
    write_bytes(dir / name, bytes);
  }
}

TEST_CASE("CIFAR-10 records are read in file order and transposed from planar to HWC", "[data]") {
  TempDir dir;
  write_split(dir, true, 3);
  write_split(dir, false, 2);
  Dataset train = load_cifar10(dir.path().string(), true);
  REQUIRE(train.size() == 15);
  REQUIRE(train.num_classes == 10);
  REQUIRE(train.class_names.empty());
  for (int i = 0; i < 15; ++i) {
    CHECK(train.labels[i] == i % 10);
    // pixel (y=1, x=2) is p = 34; its HWC bytes are R, G, B
    const uint8_t* px = train.image(i) + (1 * 32 + 2) * 3;
    CHECK(px[0] == uint8_t(i + 34));
    CHECK(px[1] == uint8_t(i + 7 + 34));
    CHECK(px[2] == uint8_t(i + 14 + 34));
  }
  Dataset test = load_cifar10(dir.path().string(), false);
  REQUIRE(test.size() == 2);
  CHECK(test.labels[1] == 1);
}

TEST_CASE("CIFAR-10 writer and reader round-trip, with class names", "[data]") {
  TempDir dir;
  Dataset train = test::patterned_dataset(23);
  train.class_names = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"};
  Dataset test = test::patterned_dataset(7);
  write_cifar10(dir.path().string(), train, test);
  REQUIRE(detect_data_format(dir.path().string()) == DataFormat::cifar10);
  Dataset back = load_dataset(dir.path().string(), true);
  CHECK(back.images == train.images);
  CHECK(back.labels == train.labels);
  CHECK(back.class_names == train.class_names);
  Dataset back_test = load_dataset(dir.path().string(), false);
  CHECK(back_test.images == test.images);
  CHECK(back_test.labels == test.labels);

  // The folder the tarball was unpacked in works too.
  TempDir parent;
  write_cifar10(parent / "cifar-10-batches-bin", train, test);
  CHECK(detect_data_format(parent.path().string()) == DataFormat::cifar10);
  CHECK(load_dataset(parent.path().string(), true).images == train.images);
}

TEST_CASE("CIFAR-10 bad inputs give one-line errors naming the file", "[data]") {
  TempDir dir;
  write_split(dir, true, 2);
  write_split(dir, false, 2);

  SECTION("a missing file says what the folder must hold") {
    std::filesystem::remove(dir / "data_batch_3.bin");
    CHECK_THROWS_WITH(load_cifar10(dir.path().string(), true),
                      Catch::Contains("data_batch_3.bin: missing") && Catch::Contains("test_batch.bin"));
  }
  SECTION("a size that is not a multiple of 3073") {
    auto bytes = record(1, 0);
    bytes.pop_back();
    write_bytes(dir / "test_batch.bin", bytes);
    CHECK_THROWS_WITH(load_cifar10(dir.path().string(), false),
                      Catch::Contains("test_batch.bin: size 3072 is not a multiple of the 3073-byte record"));
  }
  SECTION("what stands where a batch file should be: a folder, a FIFO, a device, a link to nothing") {
    std::filesystem::remove(dir / "data_batch_2.bin");
    std::filesystem::create_directory(dir / "data_batch_2.bin");
    CHECK_THROWS_WITH(load_cifar10(dir.path().string(), true),
                      Catch::StartsWith((dir / "data_batch_2.bin") + ": a folder, not a file; a CIFAR-10 folder holds"));
    std::filesystem::remove(dir / "data_batch_2.bin");
    REQUIRE(::mkfifo((dir / "data_batch_2.bin").c_str(), 0600) == 0);  // read whole, it would block for ever
    CHECK_THROWS_WITH(load_cifar10(dir.path().string(), true),
                      Catch::StartsWith((dir / "data_batch_2.bin") + ": a FIFO (a named pipe), not a file;"));
    std::filesystem::remove(dir / "data_batch_2.bin");
    std::filesystem::create_symlink("/dev/zero", dir / "data_batch_2.bin");
    CHECK_THROWS_WITH(load_cifar10(dir.path().string(), true),
                      Catch::StartsWith((dir / "data_batch_2.bin") + ": a device, not a file;"));
    std::filesystem::remove(dir / "data_batch_2.bin");
    std::filesystem::create_symlink(dir / "gone.bin", dir / "data_batch_2.bin");
    CHECK_THROWS_WITH(load_cifar10(dir.path().string(), true),
                      Catch::StartsWith((dir / "data_batch_2.bin") + ": a link to nothing (" + (dir / "gone.bin") + ");"));
  }
  SECTION("a sparse file of 30 GB is refused by its size, not read whole") {
    std::filesystem::resize_file(dir / "test_batch.bin", 30ull << 30);  // not a multiple of 3073
    CHECK_THROWS_WITH(load_cifar10(dir.path().string(), false),
                      Catch::EndsWith("test_batch.bin: size 32212254720 is not a multiple of the 3073-byte record"));
  }
  SECTION("a label of 10 or more, with the record's index") {
    auto bytes = record(3, 0);
    auto bad = record(10, 1);
    bytes.insert(bytes.end(), bad.begin(), bad.end());
    write_bytes(dir / "data_batch_2.bin", bytes);
    CHECK_THROWS_WITH(load_cifar10(dir.path().string(), true),
                      Catch::Contains("data_batch_2.bin: record 1 has label 10"));
  }
  SECTION("an empty file among full ones, and a writer that would leave one") {
    write_bytes(dir / "data_batch_3.bin", {});  // before, the other four files were read as the whole split
    CHECK_THROWS_WITH(load_cifar10(dir.path().string(), true),
                      Catch::EndsWith("data_batch_3.bin: empty (0 bytes); a CIFAR-10 batch file holds records of 3073 "
                                      "bytes (was a download or a copy cut short?)"));
    Dataset four;
    four.num_classes = 10;
    four.labels = {0, 1, 2, 3};
    four.images.resize(4 * four.image_bytes());
    CHECK_THROWS_WITH(write_cifar10((dir / "out").c_str(), four, four),
                      Catch::EndsWith("out: a CIFAR-10 training split needs at least 5 images, one for each "
                                      "data_batch file, not 4"));
  }
  SECTION("a folder that is no dataset at all") {
    TempDir empty;
    CHECK_THROWS_WITH(load_dataset(empty.path().string(), true),
                      Catch::Contains(empty.path().string() + ": not a dataset") && Catch::Contains("data_batch_1.bin"));
    CHECK_THROWS_WITH(load_dataset(empty / "nope", true), Catch::Contains("nope: no such folder"));
  }
  SECTION("a file where the folder should be: the archive, or one of the folder's files") {
    TempDir download;
    const std::string archive = download / "cifar-10-binary.tar.gz", batch = download / "data_batch_1.bin";
    write_bytes(archive, {0x1f, 0x8b});
    write_bytes(batch, {0});
    CHECK_THROWS_WITH(load_dataset(archive, true),
                      Catch::Equals(archive + ": an archive, not a folder; unpack it first, e.g. "
                                              "scripts/prepare-cifar10.sh " + archive + " datasets/"));
    CHECK_THROWS_WITH(load_dataset(batch, true),
                      Catch::Equals(batch + ": a file, not a folder; --data names the folder that holds it (" +
                                    download.path().string() + ")"));
  }
  SECTION("CIFAR-10's Python version, or the folder above it") {
    TempDir download;
    const std::string python = download / "cifar-10-batches-py";
    std::filesystem::create_directory(python);
    for (const char* name : {"data_batch_1", "test_batch", "batches.meta"}) write_bytes(python + "/" + name, {0x80, 2});
    for (const std::string& given : {python, download.path().string()})
      CHECK_THROWS_WITH(load_dataset(given, true),
                        Catch::StartsWith(python + ": CIFAR-10's Python version (pickled batches); cutrain reads the "
                                                   "binary version, cifar-10-batches-bin: "
                                                   "scripts/prepare-cifar10.sh unpacks its archive"));
  }
  SECTION("a class-name file that is there but cannot be read") {
    std::filesystem::create_directory(dir / "batches.meta.txt");
    CHECK_THROWS_WITH(load_cifar10(dir.path().string(), true),
                      Catch::Contains("batches.meta.txt: cannot read the class names"));
    std::filesystem::remove(dir / "batches.meta.txt");
    std::filesystem::create_symlink(dir / "nowhere.txt", dir / "batches.meta.txt");
    CHECK_THROWS_WITH(load_cifar10(dir.path().string(), true),
                      Catch::Contains("batches.meta.txt: cannot read the class names"));
  }
  SECTION("a class-name file with the wrong count") {
    write_bytes(dir / "batches.meta.txt", {'a', '\n', 'b', '\n'});
    CHECK_THROWS_WITH(load_cifar10(dir.path().string(), true), Catch::Contains("batches.meta.txt: 2 class names"));
  }
}
