// checkpoint_compare.h: how close two checkpoints are, for tests that train the same steps two ways.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "nn/safetensors.h"

namespace cutrain::test {

// The first byte at which two tensors' bytes differ, or -1 where they are equal. A check on this
// index fails with one number; a check on the two byte vectors would make Catch print each of
// their bytes, which for a full-width model's tensors takes minutes.
inline int64_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  const auto [in_a, in_b] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return in_a == a.end() && in_b == b.end() ? -1 : in_a - a.begin();
}

// Every tensor of two safetensors files, byte for byte.
inline void require_identical(const std::string& a, const std::string& b) {
  const SafeTensorsFile fa = read_safetensors(a), fb = read_safetensors(b);
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  for (const auto& [name, t] : fa.tensors) {
    INFO(name);
    REQUIRE(fb.tensors.count(name) == 1);
    CHECK(first_difference(t.data, fb.tensors.at(name).data) == -1);
  }
}

// The num_batches_tracked that a model checkpoint holds for batch norm `bn` ("layer2.0.bn1").
inline int64_t batches_tracked(const std::string& path, const std::string& bn) {
  const SafeTensorsFile file = read_safetensors(path);
  const SafeTensor& tracked = file.tensors.at(bn + ".num_batches_tracked");
  int64_t count = 0;
  REQUIRE(tracked.data.size() == sizeof count);
  std::memcpy(&count, tracked.data.data(), sizeof count);
  return count;
}

// How far model `a` is from model `b`: the largest |a - b| of any float, and the norm of a - b over
// the norm of b, both over every fp32 tensor, and that norm for the tensor where it is largest; the
// integer tensors (num_batches_tracked) must agree.
struct ModelDifference {
  double max_abs = 0, relative = 0;
  double worst_tensor_relative = 0;
  std::string worst_tensor;
};

inline ModelDifference model_difference(const std::string& a, const std::string& b) {
  const SafeTensorsFile fa = read_safetensors(a), fb = read_safetensors(b);
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  ModelDifference d;
  double diff_sq = 0, norm_sq = 0;
  for (const auto& [name, t] : fb.tensors) {
    INFO(name);
    REQUIRE(fa.tensors.count(name) == 1);
    const SafeTensor& other = fa.tensors.at(name);
    REQUIRE(other.shape == t.shape);
    if (t.dtype != "F32") {
      CHECK(first_difference(other.data, t.data) == -1);
      continue;
    }
    double tensor_diff_sq = 0, tensor_norm_sq = 0;
    for (size_t i = 0; i < t.data.size() / 4; ++i) {
      float x = 0, y = 0;
      std::memcpy(&x, other.data.data() + 4 * i, 4);
      std::memcpy(&y, t.data.data() + 4 * i, 4);
      const double e = double(x) - y;
      d.max_abs = std::max(d.max_abs, std::abs(e));
      tensor_diff_sq += e * e;
      tensor_norm_sq += double(y) * y;
    }
    diff_sq += tensor_diff_sq;
    norm_sq += tensor_norm_sq;
    if (tensor_norm_sq > 0 && std::sqrt(tensor_diff_sq / tensor_norm_sq) > d.worst_tensor_relative) {
      d.worst_tensor_relative = std::sqrt(tensor_diff_sq / tensor_norm_sq);
      d.worst_tensor = name;
    }
  }
  d.relative = std::sqrt(diff_sq / norm_sq);
  return d;
}

}  // namespace cutrain::test
