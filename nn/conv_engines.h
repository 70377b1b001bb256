// conv_engines.h: which execution plan of cuDNN's graph API (nn/conv_graph.h) runs each pass of a
// convolution. It is chosen once per shape and pass and kept for the process: the plan is shared
// by every layer of that shape (a ResNet-18 has several convolutions of each shape, and the
// trainer's eval model has them too). No two layers of one shape and pass run at the same time in
// cutrain's step, so no plan runs on two streams at once, which cuDNN does not promise to be safe
// for every engine.
//
// By default the choice is cuDNN's heuristics: the first configuration of Note [Engine filter]
// whose plan builds and fits kMaxWorkspaceBytes. Nothing runs, and start-up takes milliseconds, as
// with PyTorch's default. With ContextOptions::cudnn_benchmark (`--cudnn-benchmark`, PyTorch's
// torch.backends.cudnn.benchmark) the plan of every usable configuration is built and timed with
// events on the main stream (once to warm up, once timed, as PyTorch's CUDNN_FIND_SAMPLE_ONCE) on
// buffers of the convolution's size, and the fastest is kept. The winners go to the disk cache of
// nn/conv_engine_cache.h, keyed by the GPU, the cuDNN version, the shape, the dtype, determinism and
// TF32, so that later runs start at once. A cached configuration that no longer builds is one
// warning and a new measurement; a measurement in which no plan ran is one warning and the
// heuristics' choice. A pass for which no configuration is usable at all cannot be built: an error
// naming the pass and the shape. The fused forward (ConvPass::forward_scale_shift_relu) asks with
// try_conv_plan instead, and a graph that cuDNN declines or cannot run is an answer: its unit runs
// unfused (Note [The fused unit bn-relu-conv] in nn/bn_relu_conv.h).
//
// Note [Engine fallback]
// ~~~~~~~~~~~~~~~~~~~~~~
// cuDNN's heuristics, and even a measurement, can name an engine whose plan then fails when it runs
// for a shape, with a status of the NOT_SUPPORTED, EXECUTION_FAILED or BAD_PARAM kinds (beta = 1 on
// backward-data and strict-FMA fp32 in NHWC were known cases of the legacy API). The three are
// treated alike: a graph that is really wrong fails every engine, and so still ends in an error.
// The first step is eager and runs every convolution before anything is captured, so such a
// failure shows there. The layer then asks for a replacement: the next configuration of the ranking
// of Note [Engine filter] that has not failed, builds, and fits the workspace already planned. The
// replacement is said in one line and kept for every convolution of that shape and pass in the
// process. A failure during a capture, or with no configuration left, is an error as any other.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <string>

#include "kernels/conv2d_cpu.h"
#include "nn/context.h"
#include "nn/conv_graph.h"

namespace cutrain {

// The plan for `pass` of a convolution of this shape in this context (see the note above). It
// lives as long as the process.
const ConvPlan& conv_plan(const Context& ctx, ConvPass pass, const ConvShape& shape);
// The same, or null when cuDNN declines the graph or offers no usable engine for it, with `why`
// saying so in a few words (cuDNN's status and its last error's detail). Asked again, it answers
// the same without asking cuDNN.
const ConvPlan* try_conv_plan(const Context& ctx, ConvPass pass, const ConvShape& shape, std::string& why);

// The plan that replaces `failed` for this pass and shape from now on, needing at most
// `workspace_bytes`; null when every candidate has failed. The first call for a failed plan
// prints the one line of Note [Engine fallback]; later calls for the same plan return the same
// replacement.
const ConvPlan* replace_failed_plan(const Context& ctx, ConvPass pass, const ConvShape& shape, const ConvPlan& failed,
                                    cudnnStatus_t status, size_t workspace_bytes);

// Whether a status that a plan's execution returned is of the kinds Note [Engine fallback]
// replaces.
bool replaceable_failure(cudnnStatus_t status);

}  // namespace cutrain
