// conv_algorithms.h: which cuDNN algorithm runs each of a convolution's three passes (forward,
// backward-data, backward-filter), and with which math type; chosen once per shape and kept for
// the process (a ResNet-18 has several convolutions of each shape, and the trainer's eval model
// shares them too).
//
// By default the choice is cuDNN's heuristics (cudnnGet*Algorithm_v7): nothing runs, start-up
// takes milliseconds, as with PyTorch's default. With ContextOptions::cudnn_benchmark
// (`--cudnn-benchmark`, PyTorch's torch.backends.cudnn.benchmark) every algorithm is measured
// (cudnnFind*) and the fastest usable one kept; the winners go to a file on disk, keyed by the
// GPU, the cuDNN version, the shape, the dtype, determinism and TF32, so that later runs start at
// once. The file lives in cutrain's cache folder (kernels/base/cache_dir.h); one it cannot read is
// one warning and a new measurement, never a failure.
//
// Usable means: cuDNN ran it (or expects it to run), its workspace fits kMaxWorkspaceBytes, it
// is deterministic when the context asks, and strict fp32 (TF32 off) uses no tensor cores. When
// none is, the choice falls back with one warning line: a measurement to the heuristics, the
// heuristics to the algorithm every cuDNN supports for the pass (implicit GEMM, algo 1, algo 1).
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "kernels/conv2d_cpu.h"
#include "nn/context.h"

namespace cutrain {

template <typename Algo>
struct ConvAlgorithm {
  Algo algo{};
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;  // what to set on the descriptor before running it
  size_t workspace = 0;                       // bytes
  bool operator==(const ConvAlgorithm&) const = default;
};

struct ConvAlgorithms {
  ConvAlgorithm<cudnnConvolutionFwdAlgo_t> forward;
  ConvAlgorithm<cudnnConvolutionBwdDataAlgo_t> backward_data;
  ConvAlgorithm<cudnnConvolutionBwdFilterAlgo_t> backward_filter;
  size_t workspace() const;  // the most any of the three needs
  bool operator==(const ConvAlgorithms&) const = default;
};

// A workspace beyond this buys little speed for ResNet-18's shapes and would crowd out the batch.
inline constexpr size_t kMaxWorkspaceBytes = size_t(512) << 20;

// cuDNN's description of one convolution (NHWC activations, KRSC filter).
struct ConvDescriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
};

// The algorithms for a convolution of this shape in this context (see the note above).
ConvAlgorithms choose_conv_algorithms(const Context& ctx, const ConvDescriptors& d, const ConvShape& shape);

// Note [Algorithm fallback]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// cuDNN's heuristics, and even its measurements, can name an algorithm that then fails when it
// runs for a shape, with CUDNN_STATUS_NOT_SUPPORTED or CUDNN_STATUS_EXECUTION_FAILED (beta = 1 on
// backward-data and strict-FMA fp32 in NHWC are known cases), or with CUDNN_STATUS_BAD_PARAM. The
// three are treated alike: a descriptor that is really wrong fails every algorithm, and so still
// ends in an error. The first step is eager and runs every convolution before anything is
// captured, so such a failure shows there. The layer then
// asks for a replacement: the next usable algorithm in cuDNN's ranking that fits the workspace
// already planned, or in the end the one every cuDNN supports for the pass. The replacement is
// said in one line and kept for every convolution of that shape in the process. A failure during
// a capture, or with no algorithm left, is an error as any other.

// The algorithm that replaces `failed` for this pass and shape from now on, needing at most
// `workspace_bytes`; nullopt when every candidate has failed. The first call for an algorithm
// prints the one line of the note; later calls for the same shape return the same replacement.
template <typename Algo>
std::optional<ConvAlgorithm<Algo>> replace_failed_algorithm(const Context& ctx, const ConvDescriptors& d,
                                                            const ConvShape& shape, const ConvAlgorithm<Algo>& failed,
                                                            cudnnStatus_t status, size_t workspace_bytes);

// ---- The disk cache (host code only; exposed for its tests) -----------------------------------

// One text file: a header line, then one line per convolution,
//   <key> TAB <forward algo math workspace> <backward-data ...> <backward-filter ...>
// with the key "NVIDIA H200 sm_90|cuDNN 91900|N=256 H=32 W=32 C=64 K=64 R=3 S=3 stride=1 pad=1|bf16|det=0|tf32=0".
class ConvAlgorithmCache {
 public:
  // Reads `path` if it exists. A file that does not parse is ignored as a whole, and warning()
  // then says why in one line.
  explicit ConvAlgorithmCache(std::string path);

  std::optional<ConvAlgorithms> find(const std::string& key) const;
  // Adds or replaces an entry and rewrites the file (through a temporary file and a rename, so a
  // reader never sees half of it). Returns "" or, when the file cannot be written, why.
  std::string put(const std::string& key, const ConvAlgorithms& algorithms);

  const std::string& path() const { return path_; }
  const std::string& warning() const { return warning_; }

 private:
  std::string path_;
  std::map<std::string, ConvAlgorithms> entries_;
  std::string warning_;
};

// An entry's key: everything the choice depends on.
std::string conv_algorithm_key(const std::string& gpu, size_t cudnn_version, const ConvShape& shape, DType dtype,
                               bool deterministic, bool tf32);

// cudnn-conv-algorithms.txt in cutrain's cache folder (kernels/base/cache_dir.h).
std::string conv_algorithm_cache_path();

}  // namespace cutrain
