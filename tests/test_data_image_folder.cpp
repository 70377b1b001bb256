// Image folders: class order, grey and alpha to RGB, resizing, the writer round trip, bad files.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <algorithm>

#include <stb_image_write.h>

#include "data/image_folder.h"
#include "data/load.h"
#include "tests/test_data_util.h"

using namespace cutrain;
using cutrain::test::TempDir;

static void write_png(const std::string& path, int w, int h, int channels, const std::vector<uint8_t>& pixels) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  REQUIRE(stbi_write_png(path.c_str(), w, h, channels, pixels.data(), w * channels));
}

TEST_CASE("image folder: classes sorted by name, grey and RGBA become RGB, other sizes are resized", "[data]") {
  TempDir dir;
  // class "zebra" sorts after "apple" although written first
  write_png(dir / "train/zebra/0.png", 32, 32, 1, std::vector<uint8_t>(32 * 32, 77));  // grey
  std::vector<uint8_t> rgba(32 * 32 * 4);
  for (size_t i = 0; i < rgba.size(); i += 4) rgba[i] = 10, rgba[i + 1] = 20, rgba[i + 2] = 30, rgba[i + 3] = 128;
  write_png(dir / "train/apple/1.png", 32, 32, 4, rgba);
  std::vector<uint8_t> small(16 * 8 * 3);
  for (size_t i = 0; i < small.size(); i += 3) small[i] = 200, small[i + 1] = 100, small[i + 2] = 50;
  write_png(dir / "train/apple/0.png", 16, 8, 3, small);  // 16 wide, 8 high: resized to 32 x 32
  std::filesystem::create_directories(dir / "train/zebra/notes");  // not an image: ignored
  write_png(dir / "test/apple/0.png", 32, 32, 1, std::vector<uint8_t>(32 * 32, 5));
  std::filesystem::create_directories(dir / "test/zebra");

  REQUIRE(detect_data_format(dir.path().string()) == DataFormat::image_folder);
  Dataset train = load_dataset(dir.path().string(), true);
  REQUIRE(train.size() == 3);
  CHECK(train.num_classes == 2);
  CHECK(train.class_names == std::vector<std::string>{"apple", "zebra"});
  CHECK(train.labels == std::vector<int32_t>{0, 0, 1});
  // apple/0.png (resized, constant colour stays constant)
  for (int p : {0, 500, 1023}) {
    CHECK(int(train.image(0)[p * 3 + 0]) == Approx(200).margin(1));
    CHECK(int(train.image(0)[p * 3 + 1]) == Approx(100).margin(1));
    CHECK(int(train.image(0)[p * 3 + 2]) == Approx(50).margin(1));
  }
  // apple/1.png: alpha dropped
  CHECK(train.image(1)[0] == 10);
  CHECK(train.image(1)[1] == 20);
  CHECK(train.image(1)[2] == 30);
  // zebra/0.png: grey to R = G = B
  CHECK(train.image(2)[3 * 40 + 0] == 77);
  CHECK(train.image(2)[3 * 40 + 1] == 77);
  CHECK(train.image(2)[3 * 40 + 2] == 77);

  Dataset test = load_dataset(dir.path().string(), false);
  CHECK(test.size() == 1);
  CHECK(test.class_names == train.class_names);
}

TEST_CASE("image folder writer and reader round-trip", "[data]") {
  TempDir dir;
  Dataset train = test::patterned_dataset(12, 3);
  train.class_names = {"x", "y", "z"};
  Dataset test = test::patterned_dataset(4, 3);
  test.class_names = train.class_names;
  write_dataset(dir.path().string(), DataFormat::image_folder, train, test);
  Dataset back = load_dataset(dir.path().string(), true);
  REQUIRE(back.size() == 12);
  CHECK(back.class_names == train.class_names);
  // the folder groups by class: back holds labels 0,0,0,0,1,... in the order written within each
  for (size_t i = 0; i < back.size(); ++i) {
    size_t original = (i % 4) * 3 + back.labels[i];  // class c holds originals c, c+3, c+6, c+9
    CHECK(std::equal(back.image(i), back.image(i) + back.image_bytes(), train.image(original)));
  }
  // Names that do not sort in label order would come back as other labels: refused.
  Dataset unsorted = train;
  unsorted.class_names = {"z", "y", "x"};
  CHECK_THROWS_WITH(write_image_folder(dir / "other", unsorted), Catch::Contains("must be distinct and sorted"));
}

TEST_CASE("an image without pixels or with more than the limit is refused before it is decoded", "[data]") {
  std::vector<uint8_t> out(32 * 32 * 3);
  // A 54-byte BMP header that says 0 x 0: stb_image_resize's assertion used to abort the process.
  const std::vector<uint8_t> empty_bmp = {'B', 'M', 54, 0, 0, 0, 0, 0, 0, 0, 54, 0, 0, 0,      // file header
                                          40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 24, 0,  // 0 x 0, 24 bits
                                          0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  REQUIRE(empty_bmp.size() == 54);
  CHECK_THROWS_WITH(decode_image(empty_bmp.data(), empty_bmp.size(), "empty.bmp", 32, 32, kDefaultMaxImagePixels,
                                 out.data()),
                    "empty.bmp: the image is 0x0: it has no pixels");
  // A 25-byte JPEG whose frame header declares 20000 x 20000 (decoding one took 11 s and 1.9 GB).
  const std::vector<uint8_t> huge_jpeg = {0xFF, 0xD8, 0xFF, 0xC0, 0, 17, 8, 0x4E, 0x20, 0x4E, 0x20, 3, 1,
                                          0x11, 0,    2,    0x11, 0, 3,  0x11, 0,  0xFF, 0xD9};
  CHECK_THROWS_WITH(decode_image(huge_jpeg.data(), huge_jpeg.size(), "huge.jpg", 32, 32, kDefaultMaxImagePixels,
                                 out.data()),
                    "huge.jpg: the image is 20000x20000, more than 16777216 pixels (--max-image-pixels)");

  // Through the folder reader, with the limit load_dataset is given: a 16 x 8 image is 128 pixels.
  TempDir dir;
  write_png(dir / "train/a/0.png", 16, 8, 3, std::vector<uint8_t>(16 * 8 * 3, 9));
  CHECK(load_dataset(dir.path().string(), true, 128).size() == 1);
  CHECK_THROWS_WITH(load_dataset(dir.path().string(), true, 127),
                    Catch::EndsWith("a/0.png: the image is 16x8, more than 127 pixels (--max-image-pixels)"));
  test::write_bytes(dir / "train/a/1.bmp", empty_bmp);
  CHECK_THROWS_WITH(load_dataset(dir.path().string(), true), Catch::EndsWith("a/1.bmp: the image is 0x0: it has no pixels"));
}

TEST_CASE("stb_image sees only PNG, JPEG and BMP files, and no JPEG Huffman table of over 256 codes or left undefined",
          "[data]") {
  std::vector<uint8_t> out(32 * 32 * 3);
  auto decode = [&](const std::vector<uint8_t>& bytes, const std::string& name) {
    decode_image(bytes.data(), bytes.size(), name, 32, 32, kDefaultMaxImagePixels, out.data());
  };
  // A 1 x 1 GIF, which stb_image would decode, whatever its name.
  const std::vector<uint8_t> gif = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0x80, 0, 0, 0xFF, 0, 0, 0, 0, 0, 0x2C,
                                    0,   0,   0,   0,   1,   0,   1, 0, 0, 0,    2, 2, 0x44, 1, 0, 0x3B};
  CHECK_THROWS_WITH(decode(gif, "cat.png"), "cat.png: cannot decode image: not a PNG, JPEG or BMP file");
  // A Huffman table whose 16 code counts add up to 272: stb_image 2.27 writes past its 257-entry
  // table (the fuzzer's first find, tests/fuzz/crashes/image_file/).
  std::vector<uint8_t> jpeg = {0xFF, 0xD8, 0xFF, 0xC4, 0, 19, 0x00};
  jpeg.insert(jpeg.end(), 16, 17);
  jpeg.insert(jpeg.end(), {0xFF, 0xD9});
  CHECK_THROWS_WITH(decode(jpeg, "cat.jpg"),
                    "cat.jpg: cannot decode image: corrupt JPEG: a Huffman table declares 272 codes, more than 256");
  // What a JPEG writer makes passes: stb_image_write's standard tables, behind a comment segment.
  std::vector<uint8_t> written;
  auto append = [](void* to, void* data, int size) {
    auto* bytes = static_cast<uint8_t*>(data);
    static_cast<std::vector<uint8_t>*>(to)->insert(static_cast<std::vector<uint8_t>*>(to)->end(), bytes, bytes + size);
  };
  REQUIRE(stbi_write_jpg_to_func(append, &written, 8, 8, 3, std::vector<uint8_t>(8 * 8 * 3, 200).data(), 90));
  const std::vector<uint8_t> dht = {0xFF, 0xC4};
  const std::vector<uint8_t> comment = {0xFF, 0xFE, 0, 6, 0xFF, 0xC4, 0xFF, 0xFF};  // holds a DHT marker's bytes
  written.insert(written.begin() + 2, comment.begin(), comment.end());
  CHECK_NOTHROW(decode(written, "cat.jpg"));
  CHECK(int(out[0]) == Approx(200).margin(2));
  // The writer's one table segment holds DC 0, AC 0, DC 1 and AC 1. With AC 0's class byte made DC,
  // as the fuzzer did (tests/fuzz/crashes/image_file/), the scan decodes with an AC 0 that no segment
  // defines, which stb_image 2.27 would read from uninitialised memory.
  const auto after_comment = written.begin() + 2 + int64_t(comment.size());
  const size_t segment = size_t(std::search(after_comment, written.end(), dht.begin(), dht.end()) - written.begin());
  REQUIRE(segment < written.size());
  size_t dc0_codes = 0;
  for (size_t i = 1; i <= 16; ++i) dc0_codes += written[segment + 4 + i];
  uint8_t& ac0_class = written[segment + 4 + 17 + dc0_codes];
  REQUIRE(int(ac0_class) == 0x10);
  ac0_class = 0x00;
  CHECK_THROWS_WITH(decode(written, "cat.jpg"), "cat.jpg: cannot decode image: corrupt JPEG: a scan decodes with "
                                                "Huffman table AC 0, which no table segment before it defines");
}

TEST_CASE("image folder bad inputs give one-line errors naming the file or folder", "[data]") {
  TempDir dir;
  SECTION("an unreadable image") {
    std::filesystem::create_directories(dir / "train/cat");
    test::write_bytes(dir / "train/cat/broken.png", {1, 2, 3, 4, 5});
    CHECK_THROWS_WITH(load_dataset(dir.path().string(), true),
                      Catch::EndsWith("broken.png: cannot decode image: not a PNG, JPEG or BMP file"));
  }
  SECTION("class folders without images") {
    std::filesystem::create_directories(dir / "train/cat");
    CHECK_THROWS_WITH(load_dataset(dir.path().string(), true), Catch::Contains("train: no .png"));
  }
  SECTION("no class folders") {
    std::filesystem::create_directories(dir / "train");
    CHECK_THROWS_WITH(load_dataset(dir.path().string(), true), Catch::Contains("train: no class folders"));
  }
  SECTION("a dangling link or a FIFO among the images, which were once left out without a word") {
    write_png(dir / "train/cat/0.png", 32, 32, 1, std::vector<uint8_t>(32 * 32, 1));
    std::filesystem::create_symlink(dir / "nowhere.png", dir / "train/cat/1.png");
    CHECK_THROWS_WITH(load_dataset(dir.path().string(), true),
                      Catch::Equals(dir / "train/cat/1.png" + ": a symbolic link to nothing in an image folder; "
                                                                "remove it, or make it a file or a folder"));
    REQUIRE(::mkfifo((dir / "train/cat/2.png").c_str(), 0644) == 0);
    CHECK_THROWS_WITH(load_dataset(dir.path().string(), true),
                      Catch::EndsWith(" (and 1 more such entries) in an image folder; remove it, or make it a file "
                                      "or a folder"));
    std::filesystem::remove(dir / "train/cat/1.png");
    CHECK_THROWS_WITH(load_dataset(dir.path().string(), true), Catch::StartsWith(dir / "train/cat/2.png" + ": a FIFO"));
    std::filesystem::remove(dir / "train/cat/2.png");
    std::filesystem::create_symlink(dir / "gone", dir / "train/dog");  // a class folder, too
    CHECK_THROWS_WITH(load_dataset(dir.path().string(), true),
                      Catch::StartsWith(dir / "train/dog" + ": a symbolic link to nothing"));
  }
  SECTION("test classes that differ from train classes") {
    write_png(dir / "train/cat/0.png", 32, 32, 1, std::vector<uint8_t>(32 * 32, 1));
    write_png(dir / "train/dog/0.png", 32, 32, 1, std::vector<uint8_t>(32 * 32, 1));
    write_png(dir / "test/dog/0.png", 32, 32, 1, std::vector<uint8_t>(32 * 32, 1));
    CHECK_THROWS_WITH(load_dataset(dir.path().string(), false), Catch::Contains("different class folders"));
  }
}
