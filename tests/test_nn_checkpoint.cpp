// Checkpoints: the model and momentum round trip exactly through safetensors files with
// torchvision's names and layouts, and every kind of bad file is refused in one line that names
// what is wrong, without crashing.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "nn/checkpoint.h"
#include "nn/safetensors.h"
#include "nn/sgd.h"
#include "tests/nn_fixtures.h"
#include "tests/temp_dir.h"

using namespace cutrain;

namespace {

// A tiny imagenet-stem model after two training steps (momentum and running statistics set).
struct Trained {
  Context ctx{ContextOptions{}};
  ResNet18 model{ctx, test::tiny_resnet(Stem::imagenet, 21)};
  SGD sgd{ctx, model.params(), SgdConfig{}, test::constant_lr(0.1f)};
  Trained() {
    for (int step = 0; step < 2; ++step) {
      test::fill_random_batch(model, 100 + step);
      model.forward(true);
      model.backward();
      test::sgd_step(sgd, model);
      ++model.num_batches_tracked;  // as the trainer counts each step
    }
  }
};

// A scratch directory (removed at the end, pass or fail) holding a trained model's checkpoint.
struct SavedModel {
  test::TempDir dir;
  Trained trained;
  std::string path = dir / "model.safetensors";
  SavedModel() { save_model(path, trained.model, {{"epoch", "3"}, {"step", "120"}}); }
};

// The message of the error that loading `path` into a fresh tiny model throws.
std::string load_error(const std::string& path, Stem stem = Stem::imagenet, int num_classes = 10) {
  Context ctx({});
  ResNetConfig c = test::tiny_resnet(stem);
  c.num_classes = num_classes;
  ResNet18 model(ctx, c);
  try {
    load_model(path, model);
  } catch (const std::runtime_error& e) {
    std::string message = e.what();
    CHECK(message.find('\n') == std::string::npos);  // one line
    CHECK(message.rfind(path, 0) == 0);              // starting with the file
    return message;
  }
  FAIL("loading " << path << " did not fail");
  return "";
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The file's first 8 bytes: the little-endian u64 length of the JSON header.
uint64_t header_length(const std::vector<char>& bytes) {
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= uint64_t(uint8_t(bytes[i])) << (8 * i);
  return length;
}

void write_bytes(const std::string& path, const std::vector<char>& bytes, size_t length) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(length));
}

}  // namespace

TEST_CASE("Model and momentum checkpoints round trip exactly", "[nn]") {
  SavedModel saved;
  Trained& a = saved.trained;
  save_momentum(saved.dir / "momentum.safetensors", a.model, a.sgd, {{"lr", "0.1"}});

  Context ctx({});
  ResNet18 b(ctx, test::tiny_resnet(Stem::imagenet, /*different seed*/ 99));
  SGD sgd_b(ctx, b.params(), SgdConfig{});
  REQUIRE(read_floats(b.params().values()) != read_floats(a.model.params().values()));
  CheckpointMetadata meta = load_model(saved.path, b);
  CHECK(meta == CheckpointMetadata{{"epoch", "3"}, {"step", "120"}});
  CHECK(load_momentum(saved.dir / "momentum.safetensors", b, sgd_b) == CheckpointMetadata{{"lr", "0.1"}});

  CHECK(read_floats(b.params().values()) == read_floats(a.model.params().values()));
  CHECK(read_floats(b.params().buffer_values()) == read_floats(a.model.params().buffer_values()));
  CHECK(read_floats(sgd_b.momentum()) == read_floats(a.sgd.momentum()));
  CHECK(b.num_batches_tracked == 2);
  // The same weights and statistics give the same evaluation.
  test::fill_random_batch(a.model, 7);
  test::fill_random_batch(b, 7);
  a.model.forward(false);
  b.forward(false);
  CHECK(read_floats(a.model.logits()) == read_floats(b.logits()));
}

TEST_CASE("Checkpoints hold torchvision's state_dict: names, OIHW layout, dtypes", "[nn]") {
  SavedModel saved;
  SafeTensorsFile file = read_safetensors(saved.path);
  // 62 parameters + 20 batch norms x (running_mean, running_var, num_batches_tracked)
  CHECK(file.tensors.size() == 62 + 60);
  const SafeTensor& nbt = file.tensors.at("layer3.1.bn2.num_batches_tracked");
  CHECK(nbt.dtype == "I64");
  CHECK(nbt.shape.empty());
  CHECK(file.tensors.at("layer2.0.downsample.0.weight").shape == std::vector<int64_t>{8, 4, 1, 1});
  CHECK(file.tensors.at("fc.weight").shape == std::vector<int64_t>{10, 32});
  // conv1.weight[o, i, h, w] in the file is the OHWI memory's [o, h, w, i].
  const SafeTensor& conv1 = file.tensors.at("conv1.weight");
  REQUIRE(conv1.shape == std::vector<int64_t>{4, 3, 7, 7});
  REQUIRE(conv1.dtype == "F32");
  const auto* oihw = reinterpret_cast<const float*>(conv1.data.data());
  const float* ohwi = saved.trained.model.params().in_layout_order().back()->value.as<float>();
  for (int o : {0, 3})
    for (int i : {0, 2})
      for (int h : {0, 4})
        for (int w : {1, 6}) CHECK(oihw[((o * 3 + i) * 7 + h) * 7 + w] == ohwi[((o * 7 + h) * 7 + w) * 3 + i]);
}

// Note [Tensor checksums]: before, 13 of 13 random bit flips in tensor data loaded without a word.
TEST_CASE("A flipped bit in a tensor is refused at load, naming the tensor, and a file without checksums loads, "
          "unverified", "[nn]") {
  SavedModel saved;
  const std::vector<char> bytes = read_bytes(saved.path);
  const uint64_t length = header_length(bytes);
  CHECK(read_safetensors(saved.path).verified);
  CHECK(read_safetensors(saved.path).metadata == CheckpointMetadata{{"epoch", "3"}, {"step", "120"}});

  // The top exponent bit of bn1.bias's first value, the first bytes of the data.
  std::vector<char> flipped = bytes;
  flipped[8 + length + 3] ^= 0x40;
  const std::string bad = saved.dir / "flipped.safetensors";
  write_bytes(bad, flipped, flipped.size());
  CHECK_THROWS_WITH(read_safetensors(bad), Catch::StartsWith(bad + ": tensor bn1.bias: its bytes do not match their "
                                                             "checksum (CRC-32C "));
  CHECK_THAT(load_error(bad), Catch::Contains("tensor bn1.bias: its bytes do not match"));

  // The same file as torchvision's side writes it, with no checksums: it reads alike, unverified.
  nlohmann::json header = nlohmann::json::parse(std::string(bytes.begin() + 8, bytes.begin() + 8 + int64_t(length)));
  header["__metadata__"].erase(kTensorChecksumsKey);
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<char> unchecked(8);
  for (int i = 0; i < 8; ++i) unchecked[size_t(i)] = char(uint64_t(text.size()) >> (8 * i));
  unchecked.insert(unchecked.end(), text.begin(), text.end());
  unchecked.insert(unchecked.end(), bytes.begin() + 8 + int64_t(length), bytes.end());
  const std::string old = saved.dir / "unchecked.safetensors";
  write_bytes(old, unchecked, unchecked.size());
  const SafeTensorsFile read = read_safetensors(old);
  CHECK_FALSE(read.verified);
  CHECK(read.tensors.size() == read_safetensors(saved.path).tensors.size());
  CHECK(read.tensors.at("bn1.bias").data == read_safetensors(saved.path).tensors.at("bn1.bias").data);
}

TEST_CASE("Checkpoint files follow the safetensors layout byte for byte", "[nn]") {
  // What Python's safetensors expects: a little-endian u64 header length, a JSON object padded
  // with spaces to a multiple of 8 bytes, and tensors packed back to back from offset 0 to the
  // end of the file, with no gaps and no overlaps.
  SavedModel saved;
  std::vector<char> bytes = read_bytes(saved.path);
  REQUIRE(bytes.size() > 8);
  const uint64_t length = header_length(bytes);
  CHECK(length % 8 == 0);
  REQUIRE(8 + length <= bytes.size());
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + int64_t(length));
  CHECK(header.front() == '{');
  CHECK(header.find_last_not_of(' ') == header.rfind('}'));
  SafeTensorsFile file = read_safetensors(saved.path);
  uint64_t data_bytes = 0;
  for (const auto& [name, t] : file.tensors) data_bytes += t.data.size();
  CHECK(8 + length + data_bytes == bytes.size());
  // The metadata given, and the tensors' checksums (Note [Tensor checksums]).
  CHECK(header.find("\"__metadata__\":{\"epoch\":\"3\",\"step\":\"120\",\"tensor_crc32c\":\"{\\\"bn1.bias\\\":\\\"") !=
        std::string::npos);
  // Tensors are stored in name order: bn1.bias (4 channels) first.
  CHECK(header.find("\"bn1.bias\":{\"data_offsets\":[0,16],\"dtype\":\"F32\",\"shape\":[4]}") !=
        std::string::npos);
}

TEST_CASE("Truncated checkpoints are refused in one line", "[nn]") {
  SavedModel saved;
  std::vector<char> bytes = read_bytes(saved.path);
  const uint64_t header = header_length(bytes);
  const std::string bad = saved.dir / "truncated.safetensors";
  for (size_t length : {size_t(0), size_t(5), size_t(8), size_t(100), size_t(8 + header - 1), size_t(8 + header),
                        size_t(8 + header + 10), bytes.size() / 2, bytes.size() - 1}) {
    INFO("truncated to " << length << " of " << bytes.size() << " bytes");
    write_bytes(bad, bytes, length);
    std::string message = load_error(bad);
    CHECK((message.find("too short") != std::string::npos || message.find("exceeds the file") != std::string::npos ||
           message.find("outside the data section") != std::string::npos));
  }
}

TEST_CASE("Corrupt checkpoint headers are refused in one line", "[nn]") {
  test::TempDir dir;
  const std::string path = dir / "corrupt.safetensors";
  auto write_header = [&](const std::string& json, size_t data_bytes) {
    std::vector<char> bytes(8);
    for (int i = 0; i < 8; ++i) bytes[i] = char(uint64_t(json.size()) >> (8 * i));
    bytes.insert(bytes.end(), json.begin(), json.end());
    bytes.resize(bytes.size() + data_bytes);
    write_bytes(path, bytes, bytes.size());
  };
  write_header("{\"conv1.weight\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offs", 4);
  CHECK_THAT(load_error(path), Catch::Contains("not valid JSON"));
  write_header("[1, 2, 3]", 0);
  CHECK_THAT(load_error(path), Catch::Contains("not a JSON object"));
  write_header(R"({"fc.bias": {"dtype": "F32", "shape": [10], "data_offsets": [0, 4000]}})", 40);
  CHECK_THAT(load_error(path), Catch::Contains("fc.bias: data_offsets [0, 4000] outside the data section of 40 bytes"));
  write_header(R"({"fc.bias": {"dtype": "F32", "shape": [10], "data_offsets": [0, 36]}})", 40);
  CHECK_THAT(load_error(path), Catch::Contains("fc.bias: holds 36 bytes"));
  write_header(R"({"fc.bias": {"dtype": "Q7", "shape": [10], "data_offsets": [0, 40]}})", 40);
  CHECK_THAT(load_error(path), Catch::Contains("fc.bias: unknown dtype Q7"));
  write_header(R"({"fc.bias": {"dtype": "F32", "shape": [-10], "data_offsets": [0, 40]}})", 40);
  CHECK_THAT(load_error(path), Catch::Contains("fc.bias: shape has an entry"));
  write_header(R"({"fc.bias": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 40]}})", 40);
  CHECK_THAT(load_error(path), Catch::Contains("absurdly large"));
  write_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                   "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12);
  CHECK_THAT(load_error(path), Catch::Contains("tensor b: data_offsets start at 4 where byte 8 was expected"));
  write_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 12);
  CHECK_THAT(load_error(path), Catch::Contains("4 bytes after the last tensor"));
  write_header(R"({"__metadata__": {"epoch": 3}})", 0);
  CHECK_THAT(load_error(path), Catch::Contains("__metadata__ epoch is not a string"));
  // nlohmann::json would keep the last of two equal keys, silently.
  write_header(R"({"fc.bias": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                   "fc.bias": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4);
  CHECK_THAT(load_error(path), Catch::Contains("header has the key \"fc.bias\" twice"));
  write_header(R"({"__metadata__": {"epoch": "3", "epoch": "4"}})", 0);
  CHECK_THAT(load_error(path), Catch::Contains("header has the key \"epoch\" twice"));
  write_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "dtype": "I32"}})", 4);
  CHECK_THAT(load_error(path), Catch::Contains("header has the key \"dtype\" twice"));
  write_header(R"({"": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4);
  CHECK_THAT(load_error(path), Catch::Contains("a tensor has an empty name"));
}

TEST_CASE("Files that are not a model checkpoint are each named for what they are", "[nn]") {
  SavedModel saved;
  std::vector<char> zip{'P', 'K', 3, 4};
  zip.resize(600);
  write_bytes(saved.dir / "model.pth", zip, zip.size());
  CHECK_THAT(load_error(saved.dir / "model.pth"),
             Catch::StartsWith(saved.dir / "model.pth" + ": a PyTorch file (torch.save's zip or pickle, such as a "
                                                         ".pth), not safetensors; bench/torchvision_interop.py convert"));
  std::vector<char> pickle{char(0x80), 2, ']', 'q'};
  pickle.resize(600);
  write_bytes(saved.dir / "legacy.pth", pickle, pickle.size());
  CHECK_THAT(load_error(saved.dir / "legacy.pth"), Catch::Contains(": a PyTorch file"));
  CHECK(load_error(saved.dir.path().string()) == saved.dir.path().string() + ": a folder, not a safetensors file");
  CHECK_THROWS_WITH(read_safetensors_metadata(saved.dir.path().string()),
                    Catch::EndsWith(": a folder, not a safetensors file"));
  save_momentum(saved.dir / "model.optim.safetensors", saved.trained.model, saved.trained.sgd);
  CHECK(load_error(saved.dir / "model.optim.safetensors") ==
        saved.dir / "model.optim.safetensors" +
            ": the optimizer's state (momentum buffers), not the model; the model is the file of the same name without "
            ".optim");
}

TEST_CASE("Checkpoints holding NaN or infinite weights are refused, naming the tensors", "[nn]") {
  SavedModel saved;
  SafeTensorsFile file = read_safetensors(saved.path);
  auto poison = [&](const std::string& name, size_t element, float value) {
    std::memcpy(file.tensors.at(name).data.data() + element * sizeof(float), &value, sizeof value);
  };
  poison("layer2.0.conv1.weight", 7, std::nanf(""));
  poison("layer2.0.conv1.weight", 9, INFINITY);
  poison("bn1.running_var", 0, -INFINITY);
  write_safetensors(saved.path, file);
  CHECK_THAT(load_error(saved.path),
             Catch::EndsWith(": NaN or infinite values in bn1.running_var (1), layer2.0.conv1.weight (2)"));

  const std::string momentum = saved.dir / "momentum.safetensors";
  save_momentum(momentum, saved.trained.model, saved.trained.sgd);
  file = read_safetensors(momentum);
  poison("momentum_buffer.fc.bias", 3, std::nanf(""));
  write_safetensors(momentum, file);
  Context ctx({});
  ResNet18 model(ctx, test::tiny_resnet(Stem::imagenet));
  SGD sgd(ctx, model.params(), SgdConfig{});
  CHECK_THROWS_WITH(load_momentum(momentum, model, sgd), Catch::Contains("NaN or infinite values in momentum_buffer.fc.bias (1)"));
}

TEST_CASE("Checkpoints holding a running variance of zero or below are refused, naming the tensors", "[nn]") {
  SavedModel saved;
  SafeTensorsFile file = read_safetensors(saved.path);
  auto set = [&](const std::string& name, size_t element, float value) {
    std::memcpy(file.tensors.at(name).data.data() + element * sizeof(float), &value, sizeof value);
  };
  set("bn1.running_var", 0, -1);
  set("layer1.0.bn2.running_var", 1, 0);
  set("layer1.0.bn2.running_var", 2, -0.0f);
  set("bn1.running_mean", 0, -1);  // a mean may be anything
  write_safetensors(saved.path, file);
  // Before, the file loaded, and evaluation printed an accuracy computed from NaN logits.
  CHECK_THAT(load_error(saved.path), Catch::EndsWith(": running variances that are zero or negative in "
                                                     "bn1.running_var (1), layer1.0.bn2.running_var (2)"));
  CHECK_THROWS_WITH(resnet_config_of(file, saved.path), Catch::Contains("zero or negative in bn1.running_var (1)"));
}

TEST_CASE("A checkpoint's model shape is read and checked before any model is built", "[nn]") {
  // The listing resnet_config_of checks against matches what real models save, for both stems.
  for (Stem stem : {Stem::cifar, Stem::imagenet}) {
    test::TempDir dir;
    Context ctx({});
    ResNetConfig c = test::tiny_resnet(stem);
    c.width = 6;
    c.num_classes = 7;
    ResNet18 model(ctx, c);
    save_model(dir / "m.safetensors", model);
    const ResNetConfig back = resnet_config_of(read_safetensors(dir / "m.safetensors"), "m.safetensors");
    CHECK(back.stem == stem);
    CHECK(back.width == 6);
    CHECK(back.num_classes == 7);
  }

  SavedModel saved;  // imagenet stem, width 4, 10 classes
  auto config_error = [&](SafeTensorsFile file) {
    try {
      resnet_config_of(file, "x.safetensors");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // conv1.weight [1000, 3, 3, 3] made eval allocate a 10.9 GB model: the other tensors say width 4.
  SafeTensorsFile wide = read_safetensors(saved.path);
  wide.tensors.at("conv1.weight") = {"F32", {1000, 3, 3, 3}, std::vector<uint8_t>(1000 * 27 * 4)};
  const std::string error = config_error(wide);
  CHECK_THAT(error, Catch::StartsWith("x.safetensors: bn1.bias has shape [4], expected [1000]"));
  CHECK_THAT(error, Catch::EndsWith(" more"));  // the list is cut short: still one readable line
  // fc.weight [2^31, 0] gave "-2147483648 classes"; widths and classes beyond what cutrain builds.
  SafeTensorsFile many = read_safetensors(saved.path);
  many.tensors.at("fc.weight") = {"F32", {int64_t(1) << 31, 0}, {}};
  CHECK(config_error(many) ==
        "x.safetensors: fc.weight [2147483648, 0] has 2147483648 classes; cutrain builds 1 to 100000");
  SafeTensorsFile wider = read_safetensors(saved.path);
  wider.tensors.at("conv1.weight") = {"F32", {2048, 3, 7, 7}, {}};
  CHECK_THAT(config_error(wider), Catch::Contains("makes a ResNet-18 2048 wide; cutrain builds widths 1 to 1024"));
  SafeTensorsFile none = read_safetensors(saved.path);
  none.tensors.erase("fc.weight");
  CHECK(config_error(none) == "x.safetensors: no fc.weight; not a ResNet-18 checkpoint");
}

TEST_CASE("Checkpoints that do not fit the model name every mismatch in one line", "[nn]") {
  SavedModel saved;
  const std::string& path = saved.path;

  SECTION("another number of classes") {
    CHECK_THAT(load_error(path, Stem::imagenet, 5),
               Catch::Contains("fc.bias has shape [10], expected [5]") &&
                   Catch::Contains("fc.weight has shape [10, 32], expected [5, 32]"));
  }
  SECTION("another stem") {
    CHECK_THAT(load_error(path, Stem::cifar),
               Catch::Contains("conv1.weight has shape [4, 3, 7, 7], expected [4, 3, 3, 3]"));
  }
  SECTION("missing and unexpected names, wrong dtype") {
    SafeTensorsFile file = read_safetensors(path);
    file.tensors.erase("layer1.0.bn1.bias");
    file.tensors.erase("fc.bias");
    file.tensors["fc.extra"] = file.tensors.at("bn1.running_var");
    file.tensors.at("bn1.running_mean").dtype = "I32";
    write_safetensors(path, file);
    CHECK_THAT(load_error(path), Catch::Contains("missing fc.bias, layer1.0.bn1.bias; unexpected fc.extra; "
                                                 "bn1.running_mean has dtype I32, expected F32"));
  }
}

TEST_CASE("A model whose load fails is left unchanged", "[nn]") {
  SavedModel saved;
  const std::string& path = saved.path;
  Context ctx({});
  ResNetConfig c = test::tiny_resnet(Stem::imagenet);
  c.num_classes = 5;
  ResNet18 b(ctx, c);
  std::vector<float> before = read_floats(b.params().values());
  CHECK_THROWS_AS(load_model(path, b), std::runtime_error);
  CHECK(read_floats(b.params().values()) == before);
}
