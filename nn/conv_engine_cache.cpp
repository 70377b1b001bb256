#include "nn/conv_engine_cache.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernels/base/cache_dir.h"

namespace cutrain {
namespace {

constexpr const char* kCacheHeader = "cutrain cuDNN convolution engines v2";
constexpr ConvPass kPasses[] = {ConvPass::forward, ConvPass::forward_scale_shift_relu, ConvPass::backward_data,
                                ConvPass::backward_data_accumulate, ConvPass::backward_filter};

std::optional<ConvPass> parse_pass(const std::string& name) {
  for (ConvPass pass : kPasses)
    if (name == conv_pass_name(pass)) return pass;
  return std::nullopt;
}

// "<engine> [<type>=<value> ...]", with a knob type that cuDNN's header names.
std::optional<EngineConfig> parse_config(const std::string& text) {
  std::istringstream fields(text);
  EngineConfig config;
  if (!(fields >> config.engine) || config.engine < 0) return std::nullopt;
  std::string knob;
  while (fields >> knob) {
    long long type = -1, value = 0;
    char equals = 0;
    std::istringstream parts(knob);
    if (!(parts >> type >> equals >> value) || equals != '=' || !parts.eof() || type < 0 ||
        type >= CUDNN_KNOB_TYPE_COUNTS)
      return std::nullopt;
    config.knobs.emplace_back(type, value);
  }
  return config;
}

}  // namespace

std::string describe(const ConvShape& s) {
  char text[128];
  std::snprintf(text, sizeof text, "N=%d H=%d W=%d C=%d K=%d R=%d S=%d stride=%d pad=%d", s.N, s.H, s.W, s.C, s.K, s.R,
                s.S, s.stride, s.pad);
  return text;
}

std::string conv_engine_key(const std::string& gpu, size_t cudnn_version, const ConvShape& shape, DType dtype,
                            bool deterministic, bool tf32) {
  return gpu + "|cuDNN " + std::to_string(cudnn_version) + "|" + describe(shape) + "|" + dtype_name(dtype) +
         "|det=" + (deterministic ? "1" : "0") + "|tf32=" + (tf32 ? "1" : "0");
}

ConvEngineCache::ConvEngineCache(std::string path) : path_(std::move(path)) {
  std::ifstream in(path_);
  if (!in) return;  // none yet
  std::string line;
  int number = 1;
  auto corrupt = [&](const std::string& why) {
    entries_.clear();
    warning_ = path_ + ": line " + std::to_string(number) + ": " + why + "; measuring again";
  };
  if (!std::getline(in, line) || line != kCacheHeader) {
    corrupt(std::string("not a cutrain engine cache (\"") + kCacheHeader + "\")");
    return;
  }
  while (std::getline(in, line)) {
    ++number;
    const size_t tab = line.find('\t');
    const size_t second = tab == std::string::npos ? tab : line.find('\t', tab + 1);
    if (tab == 0 || second == std::string::npos) {
      corrupt("expected a key, a tab, a pass and a tab");
      return;
    }
    const std::optional<ConvPass> pass = parse_pass(line.substr(tab + 1, second - tab - 1));
    if (!pass) {
      corrupt("no such pass");
      return;
    }
    const std::optional<EngineConfig> config = parse_config(line.substr(second + 1));
    if (!config) {
      corrupt("expected an engine index and knobs type=value");
      return;
    }
    entries_[{line.substr(0, tab), *pass}] = *config;
  }
}

std::optional<EngineConfig> ConvEngineCache::find(const std::string& key, ConvPass pass) const {
  auto it = entries_.find({key, pass});
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

std::string ConvEngineCache::put(const std::string& key, ConvPass pass, const EngineConfig& config) {
  entries_[{key, pass}] = config;
  namespace fs = std::filesystem;
  std::error_code error;
  fs::create_directories(fs::path(path_).parent_path(), error);
  const std::string temporary = path_ + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << kCacheHeader << '\n';
    for (const auto& [k, c] : entries_) {
      out << k.first << '\t' << conv_pass_name(k.second) << '\t' << c.engine;
      for (const auto& [type, value] : c.knobs) out << ' ' << type << '=' << value;
      out << '\n';
    }
    if (!out.flush()) return temporary + ": cannot write";
  }
  fs::rename(temporary, path_, error);
  if (error) {
    fs::remove(temporary, error);
    return path_ + ": cannot write";
  }
  return "";
}

std::string conv_engine_cache_path() { return cutrain_cache_dir() + "/cudnn-conv-algorithms.txt"; }

}  // namespace cutrain
