// The optimizer's kernels on the GPU (or, as [emu], under the CUDA emulation) against their CPU
// twins: the learning rate from the step counter, SGD over segments of every kind a model has, clipped
// or not, the row copies between the flat buffers and the layers' copies, and the fp32 -> bf16 cast.
#include <catch2/catch.hpp>

#include <cuda_bf16.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cast.h"
#include "kernels/copy_rows.h"
#include "kernels/lr_schedule.h"
#include "kernels/sgd.h"
#include "tests/device_buffer.h"
#include "tests/gpu.h"
#include "tests/gradcheck.h"

using namespace cutrain;
using test::PoisonedBuffer;

namespace {

// One array of a test in both places: host memory that the CPU twin reads and writes, and the
// same values on the device, fp32 or bf16.
class TwinArray {
 public:
  TwinArray(const std::vector<float>& values, bool bf16) : bf16_(bf16) {
    if (bf16) {
      host_bf16_ = test::convert_to<__nv_bfloat16>(values);
      device_bf16_ = std::make_unique<PoisonedBuffer<__nv_bfloat16>>(host_bf16_);
    } else {
      host_f32_ = values;
      device_f32_ = std::make_unique<PoisonedBuffer<float>>(values);
    }
  }
  bool bf16() const { return bf16_; }
  void* host() { return bf16_ ? static_cast<void*>(host_bf16_.data()) : host_f32_.data(); }
  void* device() { return bf16_ ? static_cast<void*>(device_bf16_->get()) : device_f32_->get(); }
  std::vector<float> host_values() const { return bf16_ ? test::to_floats(host_bf16_) : host_f32_; }
  std::vector<float> device_values() const {
    return bf16_ ? test::download(*device_bf16_) : device_f32_->copy_to_host();
  }

 private:
  bool bf16_;
  std::vector<float> host_f32_;
  std::vector<__nv_bfloat16> host_bf16_;
  std::unique_ptr<PoisonedBuffer<float>> device_f32_;
  std::unique_ptr<PoisonedBuffer<__nv_bfloat16>> device_bf16_;
};

// A parameter of the test: where it sits in the flat buffers, its gradient and its copy.
struct TestParameter {
  int64_t offset, numel, cols, pitch;  // cols 0: contiguous
  bool grad_bf16, has_copy, copy_bf16;
  bool norm = false;  // a batch norm parameter's, decayed by norm_weight_decay
};

int64_t stored_size(const TestParameter& p) { return p.cols ? p.numel / p.cols * p.pitch : p.numel; }

}  // namespace

TEST_CASE("SGD over segments, clipped or not, and the gradients' sum of squares match the CPU reference with fp32 "
          "and bf16 gradients and copies, tails and pitches, and batch norm's own weight decay",
          CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  const bool nesterov = GENERATE(false, true);
  const SgdConfig cfg{0.9f, 5e-4f, nesterov, 0.05f};
  // Offsets on 64-element boundaries, as ParameterSet lays them out. Sizes not multiples of the
  // 4-element pack (a tail), and a stem-like filter of 64 x 9 rows of 3 channels in a pitch of 8.
  const std::vector<TestParameter> params = {
      {0, 10, 0, 0, false, true, true},               // fc.bias: a tail only, fp32 gradient, bf16 copy
      {64, 5130, 0, 0, false, true, true, true},      // fp32 gradient, bf16 copy, a tail of 2, batch norm's decay
      {5248, 4096, 0, 0, true, true, true},           // a bf16 filter gradient, as cuDNN writes it
      {9344, 1728, 3, 8, true, true, true},           // the padded bf16 stem
      {11136, 1728, 3, 8, false, true, false, true},  // the padded fp32 stem, batch norm's decay
      {12864, 1001, 0, 0, false, false, false},       // fp32, nothing to copy (fp32 mode)
  };
  const int64_t total = 13888;
  std::mt19937 rng(51);
  std::vector<float> param = test::random_vector(total, rng), momentum = test::random_vector(total, rng);
  PoisonedBuffer<float> device_param(param), device_momentum(momentum);
  std::vector<std::unique_ptr<TwinArray>> grads, copies;
  std::vector<SgdSegment> host_segments, device_segments;
  for (const TestParameter& p : params) {
    grads.push_back(std::make_unique<TwinArray>(test::random_vector(stored_size(p), rng), p.grad_bf16));
    // The copy starts at 7 everywhere: what is not the parameter's (the padding) must stay 7.
    copies.push_back(std::make_unique<TwinArray>(std::vector<float>(stored_size(p), 7.0f), p.copy_bf16));
    SgdSegment s;
    s.offset = p.offset;
    s.numel = p.numel;
    s.grad = {nullptr, p.grad_bf16, p.cols, p.pitch};
    if (p.has_copy) s.copy = {nullptr, p.copy_bf16, p.cols, p.pitch};
    s.packed = p.cols == 0;
    s.norm = p.norm;
    SgdSegment on_host = s, on_device = s;
    on_host.grad.data = grads.back()->host();
    on_device.grad.data = grads.back()->device();
    if (p.has_copy) {
      on_host.copy.data = copies.back()->host();
      on_device.copy.data = copies.back()->device();
    }
    host_segments.push_back(on_host);
    device_segments.push_back(on_device);
  }
  PoisonedBuffer<SgdSegment> segment_table(device_segments);
  // Three steps of a warm-up schedule, each rate from the step counter.
  const LrSchedule schedule{LrScheduleKind::constant, 0.2, 10, 3};
  int64_t step = 0;
  float lr = 0;
  PoisonedBuffer<int64_t> device_step(std::vector<int64_t>{0});
  PoisonedBuffer<float> device_lr(1);
  for (int i = 0; i < 3; ++i) {
    lr_schedule_step_cpu(schedule, &step, &lr);
    sgd_update_cpu(param.data(), momentum.data(), host_segments.data(), int(host_segments.size()), &lr, cfg);
    lr_schedule_step_cuda(schedule, device_step.get(), device_lr.get(), nullptr);
    sgd_update_cuda(device_param.get(), device_momentum.get(), host_segments.data(), segment_table.get(),
                    int(host_segments.size()), device_lr.get(), cfg, nullptr);
  }
  CHECK(device_step.copy_to_host()[0] == 3);
  const std::vector<float> result = device_param.copy_to_host();
  // The same formula in the same order, each operation rounded on its own on both sides (Note
  // [Rounding that contraction cannot change]): the twin's bits.
  CHECK(result == param);
  CHECK(device_momentum.copy_to_host() == momentum);
  for (size_t k = 0; k < params.size(); ++k) {
    const TestParameter& p = params[k];
    INFO("parameter " << k);
    // Every element of the copy: the new weight, rounded as stored, where the parameter is; 7 elsewhere.
    std::vector<float> want(size_t(stored_size(p)), 7.0f);
    for (int64_t i = 0; i < p.numel; ++i) {
      const int64_t j = p.cols ? i / p.cols * p.pitch + i % p.cols : i;
      const float w = result[size_t(p.offset + i)];
      want[size_t(j)] = p.copy_bf16 ? __bfloat162float(__float2bfloat16(w)) : w;
    }
    if (p.has_copy) {
      CHECK(copies[k]->device_values() == want);
      CHECK(copies[k]->host_values() == want);  // the twin's, from its own weights
    }
  }
  // Between the parameters (the flat buffers' padding) nothing moved.
  for (int64_t i = 5130 + 64; i < 5248; ++i) CHECK(result[size_t(i)] == param[size_t(i)]);
  // The gradient's sum of squares over the parameters' elements alone (the stems' padding holds
  // random values too): the CPU twin's and the device's, each added in its own fixed order.
  double squares = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    const std::vector<float> g = grads[k]->host_values();
    for (int64_t i = 0; i < params[k].numel; ++i) {
      const int64_t j = params[k].cols ? i / params[k].cols * params[k].pitch + i % params[k].cols : i;
      squares += double(g[size_t(j)]) * g[size_t(j)];
    }
  }
  CHECK(sgd_grad_squares_cpu(host_segments.data(), int(host_segments.size())) == Approx(squares).epsilon(1e-12));
  PoisonedBuffer<double> device_squares(1);
  sgd_grad_squares_cuda(host_segments.data(), segment_table.get(), int(host_segments.size()), device_squares.get(),
                        nullptr);
  CHECK(device_squares.copy_to_host()[0] == Approx(squares).epsilon(1e-12));

  // Clipped to half the norm: each side's launch of the squares writes the factor, and one more
  // update reads it from memory.
  const double max_norm = 0.5 * std::sqrt(squares);
  float factor = 0;
  const SgdClip host_clip{max_norm, &factor};
  sgd_grad_squares_cpu(host_segments.data(), int(host_segments.size()), &host_clip);
  CHECK(factor == Approx(0.5).epsilon(1e-6));
  PoisonedBuffer<float> device_factor(1);
  const SgdClip device_clip{max_norm, device_factor.get()};
  sgd_grad_squares_cuda(host_segments.data(), segment_table.get(), int(host_segments.size()), device_squares.get(),
                        nullptr, &device_clip);
  CHECK(device_factor.copy_to_host()[0] == Approx(factor).epsilon(1e-6));  // from sums in another order
  sgd_update_cpu(param.data(), momentum.data(), host_segments.data(), int(host_segments.size()), &lr, cfg, &factor);
  sgd_update_cuda(device_param.get(), device_momentum.get(), host_segments.data(), segment_table.get(),
                  int(host_segments.size()), device_lr.get(), cfg, nullptr, device_factor.get());
  CHECK(test::relative_error(device_param.copy_to_host(), param) <= 1e-6);
  CHECK(test::relative_error(device_momentum.copy_to_host(), momentum) <= 1e-6);
}

TEST_CASE("the learning rate of every schedule, computed on the device from the step counter, is the host's",
          CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  const LrScheduleKind kind = GENERATE(LrScheduleKind::constant, LrScheduleKind::cosine, LrScheduleKind::onecycle,
                                       LrScheduleKind::step);
  const LrSchedule schedule{kind, 0.4, 50, kind == LrScheduleKind::onecycle ? 0 : 5};
  INFO("schedule " << int(kind));
  PoisonedBuffer<int64_t> step(std::vector<int64_t>{0});
  PoisonedBuffer<float> lr(1);
  for (int64_t t = 0; t < 55; ++t) {  // past the end too
    lr_schedule_step_cuda(schedule, step.get(), lr.get(), nullptr);
    const float device = lr.copy_to_host()[0], host = float(schedule.at(t));
    INFO("step " << t << ": device " << device << ", host " << host);
    // Both evaluate the formula in double and round once to float. The device's cos() is within
    // 2 ulp of the host's in double, which moves the float only when the double lies within
    // 2^-52 of a rounding boundary of float: one float ulp at the very most.
    CHECK(std::abs(device - host) <= std::abs(host) * 0x1p-23f);
  }
  CHECK(step.copy_to_host()[0] == 55);
}

TEST_CASE("row copies of several blocks in one launch convert and keep what lies outside the blocks",
          CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  std::mt19937 rng(53);
  // Three blocks: a padded stem-like filter out (3 of 8), one in (8 to 3), and one contiguous row.
  const std::vector<RowsCopy> shapes = {{nullptr, nullptr, 576, 3, 3, 8},
                                        {nullptr, nullptr, 576, 3, 8, 3},
                                        {nullptr, nullptr, 1, 4099, 4099, 4099}};
  auto run = [&](auto in_zero, auto out_zero) {
    using In = decltype(in_zero);
    using Out = decltype(out_zero);
    std::vector<std::vector<In>> host_in;
    std::vector<std::vector<Out>> host_out;
    std::vector<std::unique_ptr<PoisonedBuffer<In>>> device_in;
    std::vector<std::unique_ptr<PoisonedBuffer<Out>>> device_out;
    std::vector<RowsCopy> host_copies, device_copies;
    for (RowsCopy c : shapes) {
      host_in.push_back(test::convert_to<In>(test::random_vector(c.rows * c.in_pitch, rng)));
      host_out.push_back(test::convert_to<Out>(std::vector<float>(c.rows * c.out_pitch, 7.0f)));
      device_in.push_back(std::make_unique<PoisonedBuffer<In>>(host_in.back()));
      device_out.push_back(std::make_unique<PoisonedBuffer<Out>>(host_out.back()));
      RowsCopy h = c, d = c;
      h.in = host_in.back().data();
      h.out = host_out.back().data();
      d.in = device_in.back()->get();
      d.out = device_out.back()->get();
      host_copies.push_back(h);
      device_copies.push_back(d);
    }
    PoisonedBuffer<RowsCopy> table(device_copies);
    copy_rows_cpu<In, Out>(host_copies.data(), int(host_copies.size()));
    copy_rows_cuda<In, Out>(host_copies.data(), table.get(), int(host_copies.size()), nullptr);
    for (size_t k = 0; k < shapes.size(); ++k) {
      INFO("block " << k);
      const std::vector<float> got = test::download(*device_out[k]), want = test::to_floats(host_out[k]);
      CHECK(got == want);
      // The twin itself: element (r, c) is the input's, rounded to Out; the rest is still 7.
      const RowsCopy& c = shapes[k];
      const std::vector<float> in = test::to_floats(host_in[k]);
      for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t j = 0; j < c.out_pitch; ++j) {
          const float expected = j < c.cols ? test::rounded_to<Out>({in[size_t(r * c.in_pitch + j)]})[0] : 7.0f;
          if (want[size_t(r * c.out_pitch + j)] != expected) FAIL("the twin's element " << r << ", " << j);
        }
    }
  };
  SECTION("float to float") { run(float{}, float{}); }
  SECTION("float to bf16") { run(float{}, __nv_bfloat16{}); }
  SECTION("bf16 to float") { run(__nv_bfloat16{}, float{}); }
}

TEST_CASE("the fp32 to bf16 cast on the GPU rounds to nearest even like the host", CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  const int64_t n = 4099;
  std::mt19937 rng(52);
  const std::vector<float> values = test::random_vector(n, rng, -100.0f, 100.0f);
  PoisonedBuffer<float> gvalues(values);
  PoisonedBuffer<__nv_bfloat16> gbf16(n);
  cast_f32_to_bf16_cuda(gvalues.get(), gbf16.get(), n, nullptr);
  CHECK(test::download(gbf16) == test::rounded_to<__nv_bfloat16>(values));
}
