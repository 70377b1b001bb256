// conv_engine_cache.h: the disk cache of the engine configurations that --cudnn-benchmark measured
// fastest, so that later runs start at once (host code only; exposed for its tests). It lives in
// cutrain's cache folder (kernels/base/cache_dir.h); a file it cannot read is one warning and a new
// measurement, never a failure. nn/conv_engines.h fills and reads it.
//
// One text file: a header line, then one line per convolution shape and pass,
//   <key> TAB <pass> TAB <engine> [<knob type>=<value> ...]
// with the key "NVIDIA H200 sm_90|cuDNN 91900|N=256 H=32 W=32 C=64 K=64 R=3 S=3 stride=1 pad=1|bf16|det=0|tf32=0"
// and the pass one of conv_pass_name()'s (nn/conv_graph.h).
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "kernels/conv2d_cpu.h"
#include "nn/conv_graph.h"
#include "nn/tensor.h"

namespace cutrain {

class ConvEngineCache {
 public:
  // Reads `path` if it exists. A file that does not parse is ignored as a whole (the previous
  // version's too), and warning() then says why in one line.
  explicit ConvEngineCache(std::string path);

  std::optional<EngineConfig> find(const std::string& key, ConvPass pass) const;
  // Adds or replaces an entry and rewrites the file (through a temporary file and a rename, so a
  // reader never sees half of it). Returns "" or, when the file cannot be written, why.
  std::string put(const std::string& key, ConvPass pass, const EngineConfig& config);

  const std::string& path() const { return path_; }
  const std::string& warning() const { return warning_; }

 private:
  std::string path_;
  std::map<std::pair<std::string, ConvPass>, EngineConfig> entries_;
  std::string warning_;
};

// An entry's key: everything the choice depends on but the pass.
std::string conv_engine_key(const std::string& gpu, size_t cudnn_version, const ConvShape& shape, DType dtype,
                            bool deterministic, bool tf32);

// "N=256 H=32 W=32 C=64 K=64 R=3 S=3 stride=1 pad=1", for keys and log lines.
std::string describe(const ConvShape& shape);

// cudnn-conv-algorithms.txt in cutrain's cache folder (kernels/base/cache_dir.h).
std::string conv_engine_cache_path();

}  // namespace cutrain
