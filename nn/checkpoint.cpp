#include "nn/checkpoint.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "nn/model_ema.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "nn/sgd.h"

namespace cutrain {

namespace {

const std::string kMomentumPrefix = "momentum_buffer.";
const std::string kRunningMean = ".running_mean";

std::string shape_text(const std::vector<int64_t>& shape) {
  return Tensor(nullptr, DType::f32, Device::cpu, shape).shape_string();
}

// Conv weights: OHWI in memory, OIHW (torchvision) in files. out[o,i,h,w] = in[o,h,w,i] and back.
void ohwi_to_oihw(const float* in, const std::vector<int64_t>& oihw, float* out) {
  const int64_t O = oihw[0], I = oihw[1], HW = oihw[2] * oihw[3];
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i)
      for (int64_t hw = 0; hw < HW; ++hw) out[(o * I + i) * HW + hw] = in[(o * HW + hw) * I + i];
}

void oihw_to_ohwi(const float* in, const std::vector<int64_t>& oihw, float* out) {
  const int64_t O = oihw[0], I = oihw[1], HW = oihw[2] * oihw[3];
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i)
      for (int64_t hw = 0; hw < HW; ++hw) out[(o * HW + hw) * I + i] = in[(o * I + i) * HW + hw];
}

SafeTensor f32_tensor(std::vector<int64_t> shape, const float* data, int64_t numel) {
  SafeTensor t{"F32", std::move(shape), std::vector<uint8_t>(size_t(numel) * sizeof(float))};
  std::memcpy(t.data.data(), data, t.data.size());
  return t;
}

// A flat fp32 array in the parameter layout (values, or momentum) as named torchvision tensors.
void add_parameter_tensors(const ParameterSet& params, const std::vector<float>& flat, const std::string& prefix,
                           SafeTensorsFile& file) {
  std::vector<float> oihw;
  for (const Parameter* p : params.in_layout_order()) {
    const float* data = flat.data() + p->offset;
    if (p->ohwi) {
      oihw.resize(size_t(p->numel));
      ohwi_to_oihw(data, p->shape, oihw.data());
      data = oihw.data();
    }
    file.tensors[prefix + p->name] = f32_tensor(p->shape, data, p->numel);
  }
}

// ... and back (the file has been checked against the expected names and shapes).
void read_parameter_tensors(const ParameterSet& params, const SafeTensorsFile& file, const std::string& prefix,
                            std::vector<float>& flat) {
  for (const Parameter* p : params.in_layout_order()) {
    const auto* data = reinterpret_cast<const float*>(file.tensors.at(prefix + p->name).data.data());
    if (p->ohwi) {
      oihw_to_ohwi(data, p->shape, flat.data() + p->offset);
    } else {
      std::memcpy(flat.data() + p->offset, data, size_t(p->numel) * sizeof(float));
    }
  }
}

struct Expected {
  std::string dtype;
  std::vector<int64_t> shape;
};

// How many non-finite values (NaN, infinities) an F32 tensor holds.
int64_t count_nonfinite(const SafeTensor& t) {
  int64_t count = 0;
  for (size_t i = 0; i + sizeof(float) <= t.data.size(); i += sizeof(float)) {
    float v;
    std::memcpy(&v, t.data.data() + i, sizeof v);
    count += !std::isfinite(v);
  }
  return count;
}

// How many finite values of an F32 tensor are zero or negative (count_nonfinite has the others).
int64_t count_nonpositive(const SafeTensor& t) {
  int64_t count = 0;
  for (size_t i = 0; i + sizeof(float) <= t.data.size(); i += sizeof(float)) {
    float v;
    std::memcpy(&v, t.data.data() + i, sizeof v);
    count += std::isfinite(v) && v <= 0;
  }
  return count;
}

// Every mismatch between the file and what the model expects, every tensor holding NaN or
// infinities, and every batch norm running variance that is not positive (evaluation divides by
// its square root, and would print an accuracy computed from NaN logits), in one line (each list
// cut after a few names).
// The optimizer's file beside a model (save_momentum) is a checkpoint too, of other tensors.
void refuse_momentum_file(const std::string& path, const SafeTensorsFile& file) {
  if (!file.tensors.contains("conv1.weight") && file.tensors.contains(kMomentumPrefix + "conv1.weight"))
    throw std::runtime_error(path +
                             ": the optimizer's state (momentum buffers), not the model; the model is the "
                             "file of the same name without .optim");
}

std::string problems_with(const SafeTensorsFile& file, const std::map<std::string, Expected>& expected) {
  constexpr int kListed = 8;
  struct List {
    std::string text;
    int count = 0;
    void add(const std::string& item) {
      if (count++ < kListed) text += (text.empty() ? "" : ", ") + item;
    }
    std::string str() const {
      return count > kListed ? text + " and " + std::to_string(count - kListed) + " more" : text;
    }
  };
  List missing, unexpected, wrong, nonfinite, nonpositive;
  for (const auto& [name, e] : expected) {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) {
      missing.add(name);
    } else if (it->second.shape != e.shape) {
      wrong.add(name + " has shape " + shape_text(it->second.shape) + ", expected " + shape_text(e.shape));
    } else if (it->second.dtype != e.dtype) {
      wrong.add(name + " has dtype " + it->second.dtype + ", expected " + e.dtype);
    } else if (e.dtype == "F32") {
      if (const int64_t n = count_nonfinite(it->second)) nonfinite.add(name + " (" + std::to_string(n) + ")");
      if (name.ends_with(".running_var"))
        if (const int64_t n = count_nonpositive(it->second)) nonpositive.add(name + " (" + std::to_string(n) + ")");
    }
  }
  for (const auto& [name, t] : file.tensors) {
    if (!expected.count(name)) unexpected.add(name);
  }
  std::string problems;
  auto append = [&](const std::string& item) { problems += (problems.empty() ? "" : "; ") + item; };
  if (missing.count) append("missing " + missing.str());
  if (unexpected.count) append("unexpected " + unexpected.str());
  if (wrong.count) append(wrong.str());
  if (nonfinite.count) append("NaN or infinite values in " + nonfinite.str());
  if (nonpositive.count) append("running variances that are zero or negative in " + nonpositive.str());
  return problems;
}

// What a load refuses.
void check_against(const std::string& path, const SafeTensorsFile& file,
                   const std::map<std::string, Expected>& expected) {
  if (const std::string problems = problems_with(file, expected); !problems.empty())
    throw std::runtime_error(path + ": " + problems);
}

// A save writes nothing that check_against would refuse (Note [Checkpoints that load]).
void check_before_writing(const std::string& path, const SafeTensorsFile& file,
                          const std::map<std::string, Expected>& expected) {
  if (const std::string problems = problems_with(file, expected); !problems.empty())
    throw UnfitCheckpoint(path + ": not written: " + problems);
}

std::map<std::string, Expected> expected_parameters(const ParameterSet& params, const std::string& prefix) {
  std::map<std::string, Expected> expected;
  for (const Parameter* p : params.in_layout_order()) expected[prefix + p->name] = {"F32", p->shape};
  return expected;
}

// "bn1.running_mean" -> "bn1.num_batches_tracked"
std::vector<std::string> num_batches_tracked_names(const ParameterSet& params) {
  std::vector<std::string> names;
  for (const BufferEntry& b : params.buffers()) {
    if (b.name.ends_with(kRunningMean))
      names.push_back(b.name.substr(0, b.name.size() - kRunningMean.size()) + ".num_batches_tracked");
  }
  return names;
}

// The model's state_dict as a file of it must hold: parameters, buffers and counters.
std::map<std::string, Expected> expected_state_dict(const ParameterSet& params) {
  std::map<std::string, Expected> expected = expected_parameters(params, "");
  for (const BufferEntry& b : params.buffers()) expected[b.name] = {"F32", {b.numel}};
  for (const std::string& name : num_batches_tracked_names(params)) expected[name] = {"I64", {}};
  return expected;
}

// torchvision's resnet18 state_dict for this stem, width and classes, name by name: computed,
// nothing allocated. (A test holds it to the names and shapes a built model saves.)
std::map<std::string, Expected> resnet18_state_dict(const ResNetConfig& c) {
  std::map<std::string, Expected> state;
  auto conv = [&](const std::string& name, int64_t out, int64_t in, int64_t kernel) {
    state[name + ".weight"] = {"F32", {out, in, kernel, kernel}};
  };
  auto batchnorm = [&](const std::string& name, int64_t channels) {
    for (const char* part : {".weight", ".bias", ".running_mean", ".running_var"})
      state[name + part] = {"F32", {channels}};
    state[name + ".num_batches_tracked"] = {"I64", {}};
  };
  const int64_t w = c.width;
  conv("conv1", w, 3, c.stem == Stem::imagenet ? 7 : 3);
  batchnorm("bn1", w);
  int64_t in = w;
  for (int layer = 1; layer <= 4; ++layer) {
    const int64_t out = w << (layer - 1);
    for (int block = 0; block < 2; ++block) {
      const std::string name = "layer" + std::to_string(layer) + "." + std::to_string(block) + ".";
      conv(name + "conv1", out, in, 3);
      batchnorm(name + "bn1", out);
      conv(name + "conv2", out, out, 3);
      batchnorm(name + "bn2", out);
      if (in != out) {
        conv(name + "downsample.0", out, in, 1);
        batchnorm(name + "downsample.1", out);
      }
      in = out;
    }
  }
  state["fc.weight"] = {"F32", {c.num_classes, in}};
  state["fc.bias"] = {"F32", {c.num_classes}};
  return state;
}

}  // namespace

ResNetConfig resnet_config_of(const SafeTensorsFile& file, const std::string& path) {
  refuse_momentum_file(path, file);
  auto shape_of = [&](const std::string& name) {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) throw std::runtime_error(path + ": no " + name + "; not a ResNet-18 checkpoint");
    return it->second.shape;
  };
  const std::vector<int64_t> conv1 = shape_of("conv1.weight"), fc = shape_of("fc.weight");
  if (conv1.size() != 4 || fc.size() != 2 || (conv1[2] != 3 && conv1[2] != 7))
    throw std::runtime_error(path + ": conv1.weight " + shape_text(conv1) + " or fc.weight " + shape_text(fc) +
                             " does not have a ResNet-18 shape");
  if (conv1[0] < 1 || conv1[0] > kMaxResNetWidth)
    throw std::runtime_error(path + ": conv1.weight " + shape_text(conv1) + " makes a ResNet-18 " +
                             std::to_string(conv1[0]) + " wide; cutrain builds widths 1 to " +
                             std::to_string(kMaxResNetWidth));
  if (fc[0] < 1 || fc[0] > kMaxResNetClasses)
    throw std::runtime_error(path + ": fc.weight " + shape_text(fc) + " has " + std::to_string(fc[0]) +
                             " classes; cutrain builds 1 to " + std::to_string(kMaxResNetClasses));
  ResNetConfig c;
  c.stem = conv1[2] == 7 ? Stem::imagenet : Stem::cifar;
  c.width = int(conv1[0]);
  c.num_classes = int(fc[0]);
  check_against(path, file, resnet18_state_dict(c));
  return c;
}

namespace {

// A state_dict file of the model's layout: the parameters `values`, the buffers `buffers` and every batch norm's
// num_batches_tracked, checked as a load checks it (Note [Checkpoints that load]), then written.
void save_state_dict(const std::string& path, const ParameterSet& params, const Tensor& values, const Tensor& buffers,
                     int64_t num_batches_tracked, const CheckpointMetadata& metadata) {
  SafeTensorsFile file;
  file.metadata = metadata;
  add_parameter_tensors(params, read_floats(values), "", file);
  const std::vector<float> buffer_floats = read_floats(buffers);
  for (const BufferEntry& b : params.buffers())
    file.tensors[b.name] = f32_tensor({b.numel}, buffer_floats.data() + b.offset, b.numel);
  for (const std::string& name : num_batches_tracked_names(params)) {
    SafeTensor t{"I64", {}, std::vector<uint8_t>(sizeof(int64_t))};
    std::memcpy(t.data.data(), &num_batches_tracked, sizeof(int64_t));
    file.tensors[name] = std::move(t);
  }
  check_before_writing(path, file, expected_state_dict(params));
  write_safetensors(path, file);
}

// ... and back into `values` and `buffers`; returns num_batches_tracked (0 for a model without batch norm).
int64_t read_state_dict(const SafeTensorsFile& file, const ParameterSet& params, const Tensor& values,
                        const Tensor& buffers) {
  std::vector<float> flat(size_t(params.numel()));
  read_parameter_tensors(params, file, "", flat);
  copy_from_host(flat.data(), values);
  std::vector<float> buffer_floats(size_t(buffers.numel()));
  for (const BufferEntry& b : params.buffers())
    std::memcpy(buffer_floats.data() + b.offset, file.tensors.at(b.name).data.data(), size_t(b.numel) * sizeof(float));
  copy_from_host(buffer_floats.data(), buffers);
  int64_t num_batches_tracked = 0;
  const std::vector<std::string> counters = num_batches_tracked_names(params);
  if (!counters.empty()) std::memcpy(&num_batches_tracked, file.tensors.at(counters[0]).data.data(), sizeof(int64_t));
  return num_batches_tracked;
}

}  // namespace

void save_model(const std::string& path, const ResNet18& model, const CheckpointMetadata& metadata) {
  model.context().synchronize();
  const ParameterSet& params = model.params();
  save_state_dict(path, params, params.values(), params.buffer_values(), model.num_batches_tracked, metadata);
}

// Note [Tensor checksums]: a file that records none loads, and says so.
void say_if_unverified(const SafeTensorsFile& file, const std::string& path) {
  if (!file.verified)
    std::fprintf(stderr,
                 "cutrain: note: %s records no checksums (torchvision's side and cutrain before them write "
                 "none): its tensors load unverified\n",
                 path.c_str());
}

CheckpointMetadata load_model(const std::string& path, ResNet18& model) {
  ParameterSet& params = model.params();
  SafeTensorsFile file = read_safetensors(path);
  say_if_unverified(file, path);
  refuse_momentum_file(path, file);
  check_against(path, file, expected_state_dict(params));

  model.context().synchronize();
  model.num_batches_tracked = read_state_dict(file, params, params.values(), params.buffer_values());
  model.sync_weight_copies();
  model.context().synchronize();
  return file.metadata;
}

void save_ema(const std::string& path, const ResNet18& model, const ModelEma& ema, CheckpointMetadata metadata) {
  model.context().synchronize();
  metadata[kEmaCountKey] = std::to_string(ema.n_averaged());
  save_state_dict(path, model.params(), ema.values(), ema.buffer_values(), ema.num_batches_tracked(), metadata);
}

CheckpointMetadata load_ema(const std::string& path, const ResNet18& model, ModelEma& ema) {
  SafeTensorsFile file = read_safetensors(path);
  say_if_unverified(file, path);
  check_against(path, file, expected_state_dict(model.params()));
  const auto count = file.metadata.find(kEmaCountKey);
  int64_t n_averaged = -1;
  if (count != file.metadata.end()) {
    const std::string& text = count->second;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n_averaged);
    if (error != std::errc() || end != text.data() + text.size()) n_averaged = -1;
  }
  if (n_averaged < 0)
    throw std::runtime_error(path + ": no count of the average's updates ('" + kEmaCountKey +
                             "' in its metadata): not the average of a cutrain run");
  model.context().synchronize();
  ema.set_counters(n_averaged, read_state_dict(file, model.params(), ema.values(), ema.buffer_values()));
  model.context().synchronize();
  return file.metadata;
}

void save_momentum(const std::string& path, const ResNet18& model, const SGD& sgd, const CheckpointMetadata& metadata) {
  model.context().synchronize();
  SafeTensorsFile file;
  file.metadata = metadata;
  add_parameter_tensors(model.params(), read_floats(sgd.momentum()), kMomentumPrefix, file);
  check_before_writing(path, file, expected_parameters(model.params(), kMomentumPrefix));
  write_safetensors(path, file);
}

void save_gradients(const std::string& path, const ResNet18& model, float loss) {
  model.context().synchronize();
  SafeTensorsFile file;
  file.tensors["loss"] = f32_tensor({1}, &loss, 1);
  add_parameter_tensors(model.params(), read_floats(model.params().grads()), "grad.", file);
  write_safetensors(path, file);
}

CheckpointMetadata load_momentum(const std::string& path, const ResNet18& model, SGD& sgd) {
  SafeTensorsFile file = read_safetensors(path);
  say_if_unverified(file, path);
  check_against(path, file, expected_parameters(model.params(), kMomentumPrefix));
  model.context().synchronize();
  std::vector<float> momentum(size_t(model.params().numel()));
  read_parameter_tensors(model.params(), file, kMomentumPrefix, momentum);
  copy_from_host(momentum.data(), sgd.momentum());
  return file.metadata;
}

}  // namespace cutrain
