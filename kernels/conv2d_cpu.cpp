// conv2d_cpu.cpp: the CPU convolution of conv2d_cpu.h, on oneDNN's convolution primitives, in
// pieces of whole images on the threads of kernels/base/cpu_threads.h.
//
// Note [Convolution pieces]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// The batch is cut into at most kPieces pieces of whole images (ceil(N / kPieces) images each,
// the last maybe fewer), and each piece is one oneDNN call on one thread: its forward writes the
// piece's images of y, its data gradient the piece's images of dx. The filter gradient is a sum
// over the batch, so it is cut into at most kFilterPieces pieces, each of which writes a partial
// gradient; the partials are added in piece order. The pieces depend on the shape alone (Note
// [Fixed work split]), and a call inside a piece runs on that piece's thread alone (Note
// [Libraries inside a piece]), so one thread and N threads give the same bits.
//
// oneDNN's fast kernels want the filter in a blocked layout of their own choosing, not in OHWI.
// Before the pieces run, the filter is reordered once into the layout of each piece size's
// primitive (two sizes at most: the full piece and the last), and the filter gradient's partials
// are reordered back into OHWI at the end, which also applies beta. The activations stay NHWC,
// which oneDNN reads and writes directly.
//
// Note [Strided 1x1 filter gradients]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A 1x1 convolution of stride s without padding reads only every s-th pixel of every s-th row, so
// its filter gradient is that of a stride-1 convolution of those pixels alone: the filter gradient
// gathers them into a dense NHWC copy and computes that. oneDNN would gather them itself (its 1x1
// kernels' "reduce to unit stride"), but in oneDNN 2.6 that path of the filter gradient writes past
// its scratch memory when C is below the kernel's channel block (8 with AVX2, 16 with AVX-512;
// oneDNN issue 6035): it corrupted the heap in the downsample shortcuts of narrow models, on
// machines where oneDNN chose those kernels.
#include "kernels/conv2d_cpu.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kernels/base/cpu_threads.h"
#include "kernels/eigen_cpu.h"

namespace cutrain {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;

constexpr int kPieces = 16;
constexpr int kFilterPieces = 4;

enum class Pass { forward, backward_data, backward_filter };

// Images [first, first + count) of the batch.
struct Piece {
  int first, count;
};

// The pieces of a batch of N images, when it is cut into at most `most` (Note [Convolution pieces]).
std::vector<Piece> pieces_of(int N, int most) {
  const int per_piece = (N + most - 1) / most;
  std::vector<Piece> pieces;
  for (int first = 0; first < N; first += per_piece) pieces.push_back({first, std::min(per_piece, N - first)});
  return pieces;
}

// oneDNN's engine, made once. Before it, oneDNN's VTune hook is turned off unless DNNL_JIT_PROFILE
// asks for a profiler: the hook looks for VTune's libJitPI.so at the first JIT kernel, and the
// failed dlopen leaves glibc's dlerror message on that thread, which LeakSanitizer reports as a leak.
const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine = [] {
    if (!std::getenv("DNNL_JIT_PROFILE")) dnnl::set_jit_profiling_flags(0);
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return engine;
}

// The memory descriptors of a convolution of `images` images: NHWC activations, and the filter in
// whatever layout the primitive prefers (Tag::any) or in ours (OHWI).
memory::desc activations(int images, int channels, int height, int width) {
  return memory::desc({images, channels, height, width}, memory::data_type::f32, Tag::nhwc);
}
memory::desc filter(const ConvShape& s, Tag tag) {
  return memory::desc({s.K, s.C, s.R, s.S}, memory::data_type::f32, tag);
}

// One pass's primitive for `images` images of a shape, and the layout of the filter (or of its
// gradient) that it reads (or writes). The primitive's scratch memory is the caller's (Note
// [Libraries inside a piece]: one primitive may run on several threads at once).
struct Primitive {
  dnnl::primitive run;
  memory::desc filter_layout, scratch_layout;
};

Primitive make_primitive(const ConvShape& s, int images, Pass pass) {
  const memory::desc x = activations(images, s.C, s.H, s.W), y = activations(images, s.K, s.P(), s.Q()),
                     w = filter(s, Tag::any);
  const memory::dims strides{s.stride, s.stride}, padding{s.pad, s.pad};
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const auto algorithm = dnnl::algorithm::convolution_direct;
  const dnnl::convolution_forward::primitive_desc forward(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algorithm, x, w, y, strides, padding, padding),
      attr, cpu_engine());
  switch (pass) {
    case Pass::forward: return {dnnl::convolution_forward(forward), forward.weights_desc(), forward.scratchpad_desc()};
    case Pass::backward_data: {
      const dnnl::convolution_backward_data::primitive_desc data(
          dnnl::convolution_backward_data::desc(algorithm, x, w, y, strides, padding, padding), attr, cpu_engine(),
          forward);
      return {dnnl::convolution_backward_data(data), data.weights_desc(), data.scratchpad_desc()};
    }
    case Pass::backward_filter: {
      const dnnl::convolution_backward_weights::primitive_desc weights(
          dnnl::convolution_backward_weights::desc(algorithm, x, w, y, strides, padding, padding), attr, cpu_engine(),
          forward);
      return {dnnl::convolution_backward_weights(weights), weights.diff_weights_desc(), weights.scratchpad_desc()};
    }
  }
  throw std::logic_error("conv2d_cpu: unknown pass");
}

// The primitive of a pass for `images` images of a shape, made on first use and kept: the shapes of
// a training run are few and fixed. It is made inside a piece (Note [Libraries inside a piece]),
// where oneDNN plans for the one thread it will run on.
const Primitive& primitive(const ConvShape& s, int images, Pass pass) {
  using Key = std::tuple<int, int, int, int, int, int, int, int, int, Pass>;
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<Primitive>> made;
  const Key key{images, s.H, s.W, s.C, s.K, s.R, s.S, s.stride, s.pad, pass};
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Primitive>& p = made[key];
  if (!p) parallel_for(1, [&](int64_t) { p = std::make_unique<Primitive>(make_primitive(s, images, pass)); });
  return *p;
}

// A buffer of the calling thread's that only grows, so that steady-state calls allocate nothing.
// `which` tells a thread's buffers apart.
// They are aligned to Eigen's widest vector (64 bytes with AVX-512), as oneDNN's kernels prefer.
float* scratch(int which, size_t bytes) {
  thread_local std::vector<float, Eigen::aligned_allocator<float>> buffers[5];
  auto& b = buffers[which];
  if (b.size() * sizeof(float) < bytes) b.resize((bytes + sizeof(float) - 1) / sizeof(float));
  return b.data();
}
enum Scratch { kPrimitiveScratch, kPieceOutput, kFilterLayouts, kFilterPartials, kStridedPixels };

memory wrap(const memory::desc& desc, const float* data) {
  return memory(desc, cpu_engine(), const_cast<float*>(data));  // oneDNN only reads its inputs
}

// Runs one piece's primitive with its arguments on this thread.
void execute(const Primitive& p, std::unordered_map<int, memory> args) {
  args.emplace(DNNL_ARG_SCRATCHPAD, wrap(p.scratch_layout, scratch(kPrimitiveScratch, p.scratch_layout.get_size())));
  dnnl::stream stream(cpu_engine());
  p.run.execute(stream, args);
  stream.wait();
}

// dst = src in another layout (beta 0), or dst = beta*dst + src (a sum post-op), on the calling
// thread and on as many of OpenMP's threads as cpu_threads() allows; a copy, so the same bits
// whatever their number.
void reorder(const memory::desc& from, const float* src, const memory::desc& to, float* dst, float beta) {
  dnnl::primitive_attr attr;
  if (beta != 0.0f) {
    dnnl::post_ops sum;
    sum.append_sum(beta);
    attr.set_post_ops(sum);
  }
  memory in = wrap(from, src), out = wrap(to, dst);
  use_cpu_threads_in_libraries();
  dnnl::stream stream(cpu_engine());
  dnnl::reorder(dnnl::reorder::primitive_desc(in, out, attr)).execute(stream, in, out);
  stream.wait();
}

// The filter in the layout of every piece's primitive: the primitives of the pieces, and for each
// the filter as it reads it (pieces of one size share one primitive and one copy).
struct FilterForPieces {
  std::vector<const Primitive*> primitive;  // per piece
  std::vector<const float*> filter;         // per piece
};

FilterForPieces filter_for_pieces(const float* w, const ConvShape& s, const std::vector<Piece>& pieces, Pass pass) {
  FilterForPieces out;
  const Primitive& full = primitive(s, pieces.front().count, pass);
  const Primitive& last = primitive(s, pieces.back().count, pass);
  const size_t full_bytes = full.filter_layout.get_size();
  float* copies = scratch(kFilterLayouts, full_bytes + last.filter_layout.get_size());
  reorder(filter(s, Tag::ohwi), w, full.filter_layout, copies, 0.0f);
  const float* last_copy = copies;
  if (last.filter_layout != full.filter_layout) {
    last_copy = copies + full_bytes / sizeof(float);
    reorder(filter(s, Tag::ohwi), w, last.filter_layout, const_cast<float*>(last_copy), 0.0f);
  }
  for (const Piece& piece : pieces) {
    const bool is_full = piece.count == pieces.front().count;
    out.primitive.push_back(is_full ? &full : &last);
    out.filter.push_back(is_full ? copies : last_copy);
  }
  return out;
}

int64_t image_floats(int channels, int height, int width) { return int64_t(channels) * height * width; }

}  // namespace

void conv2d_forward_cpu(const float* x, const float* w, const ConvShape& sh, float* y) {
  const std::vector<Piece> pieces = pieces_of(sh.N, kPieces);
  const FilterForPieces f = filter_for_pieces(w, sh, pieces, Pass::forward);
  parallel_for(int64_t(pieces.size()), [&](int64_t i) {
    const Piece piece = pieces[i];
    const memory::desc in = activations(piece.count, sh.C, sh.H, sh.W),
                       out = activations(piece.count, sh.K, sh.P(), sh.Q());
    execute(*f.primitive[i], {{DNNL_ARG_SRC, wrap(in, x + piece.first * image_floats(sh.C, sh.H, sh.W))},
                              {DNNL_ARG_WEIGHTS, wrap(f.primitive[i]->filter_layout, f.filter[i])},
                              {DNNL_ARG_DST, wrap(out, y + piece.first * image_floats(sh.K, sh.P(), sh.Q()))}});
  });
}

// dx = beta*dx + the data gradient, piece by piece: a piece's images are its own part of dx. With
// beta 0 oneDNN writes dx itself; otherwise it writes the piece's scratch, which is then added.
void conv2d_backward_data_cpu(const float* dy, const float* w, const ConvShape& sh, float beta, float* dx) {
  const std::vector<Piece> pieces = pieces_of(sh.N, kPieces);
  const FilterForPieces f = filter_for_pieces(w, sh, pieces, Pass::backward_data);
  const int64_t image = image_floats(sh.C, sh.H, sh.W);
  parallel_for(int64_t(pieces.size()), [&](int64_t i) {
    const Piece piece = pieces[i];
    const memory::desc in = activations(piece.count, sh.C, sh.H, sh.W),
                       out = activations(piece.count, sh.K, sh.P(), sh.Q());
    float* dx_piece = dx + piece.first * image;
    float* result = beta == 0.0f ? dx_piece : scratch(kPieceOutput, in.get_size());
    execute(*f.primitive[i], {{DNNL_ARG_DIFF_DST, wrap(out, dy + piece.first * image_floats(sh.K, sh.P(), sh.Q()))},
                              {DNNL_ARG_WEIGHTS, wrap(f.primitive[i]->filter_layout, f.filter[i])},
                              {DNNL_ARG_DIFF_SRC, wrap(in, result)}});
    if (result != dx_piece) {
      scale_by_beta(dx_piece, piece.count * image, beta);
      for (int64_t j = 0; j < piece.count * image; ++j) dx_piece[j] += result[j];
    }
  });
}

namespace {

// dw = beta*dw + the sum over the filter pieces of their partial gradients, in piece order
// (Note [Convolution pieces]). The partials of pieces of the full size share a layout and are added
// there, element by element in slices; the last piece's, when it differs, joins in OHWI.
void filter_gradient(const float* x, const float* dy, const ConvShape& sh, float beta, float* dw) {
  const std::vector<Piece> pieces = pieces_of(sh.N, kFilterPieces);
  const Primitive& full = primitive(sh, pieces.front().count, Pass::backward_filter);
  const Primitive& last = primitive(sh, pieces.back().count, Pass::backward_filter);
  const size_t partial_floats = std::max(full.filter_layout.get_size(), last.filter_layout.get_size()) / sizeof(float);
  float* partials = scratch(kFilterPartials, pieces.size() * partial_floats * sizeof(float));
  parallel_for(int64_t(pieces.size()), [&](int64_t i) {
    const Piece piece = pieces[i];
    const Primitive& p = piece.count == pieces.front().count ? full : last;
    execute(p, {{DNNL_ARG_SRC,
                 wrap(activations(piece.count, sh.C, sh.H, sh.W), x + piece.first * image_floats(sh.C, sh.H, sh.W))},
                {DNNL_ARG_DIFF_DST, wrap(activations(piece.count, sh.K, sh.P(), sh.Q()),
                                         dy + piece.first * image_floats(sh.K, sh.P(), sh.Q()))},
                {DNNL_ARG_DIFF_WEIGHTS, wrap(p.filter_layout, partials + i * partial_floats)}});
  });
  // Pieces [0, same) have the full piece's layout: partial 0 += partial 1, partial 2, ... in order.
  const bool last_differs = pieces.back().count != pieces.front().count && last.filter_layout != full.filter_layout;
  const int64_t same = int64_t(pieces.size()) - (last_differs ? 1 : 0);
  const int64_t floats = int64_t(full.filter_layout.get_size() / sizeof(float));
  constexpr int64_t kSlice = 4096;
  parallel_for((floats + kSlice - 1) / kSlice, [&](int64_t slice) {
    const int64_t begin = slice * kSlice, end = std::min(floats, begin + kSlice);
    for (int64_t g = 1; g < same; ++g)
      for (int64_t j = begin; j < end; ++j) partials[j] += partials[g * partial_floats + j];
  });
  reorder(full.filter_layout, partials, filter(sh, Tag::ohwi), dw, beta);
  if (last_differs) reorder(last.filter_layout, partials + (same * partial_floats), filter(sh, Tag::ohwi), dw, 1.0f);
}

}  // namespace

void conv2d_backward_filter_cpu(const float* x, const float* dy, const ConvShape& sh, float beta, float* dw) {
  if (sh.R != 1 || sh.S != 1 || sh.stride == 1 || sh.pad != 0) return filter_gradient(x, dy, sh, beta, dw);
  // Note [Strided 1x1 filter gradients]: the pixels that the filter reads, row by row.
  const ConvShape unit{sh.N, sh.P(), sh.Q(), sh.C, sh.K, 1, 1, 1, 0};
  float* pixels = scratch(kStridedPixels, size_t(sh.N) * unit.H * unit.W * sh.C * sizeof(float));
  parallel_for(int64_t(sh.N) * unit.H, [&](int64_t row) {
    const int64_t n = row / unit.H, p = row % unit.H;
    for (int64_t q = 0; q < unit.W; ++q)
      std::copy_n(x + ((n * sh.H + p * sh.stride) * sh.W + q * sh.stride) * sh.C, sh.C,
                  pixels + (row * unit.W + q) * sh.C);
  });
  filter_gradient(pixels, dy, unit, beta, dw);
}

}  // namespace cutrain
