// nn_fixtures.h: small models, random batches and whole optimizer steps for the model tests.
#pragma once

#include <cstdint>
#include <random>

#include "nn/resnet.h"
#include "nn/sgd.h"

namespace cutrain::test {

// A ResNet-18 small enough to run in milliseconds: width 4, 8x8 images, batch 4.
inline ResNetConfig tiny_resnet(Stem stem = Stem::cifar, uint64_t seed = 1) {
  ResNetConfig c;
  c.stem = stem;
  c.width = 4;
  c.batch_size = 4;
  c.image_size = 8;
  c.num_classes = 10;
  c.seed = seed;
  return c;
}

// Fills a CPU model's input with N(0,1) pixels and its labels with classes in [0, K).
inline void fill_random_batch(ResNet18& model, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  float* x = model.input().as<float>();
  for (int64_t i = 0; i < model.input().numel(); ++i) x[i] = pixel(rng);
  int32_t* labels = model.labels().as<int32_t>();
  for (int64_t i = 0; i < model.labels().numel(); ++i) labels[i] = int32_t(rng() % model.config().num_classes);
}

// A schedule that keeps the rate at `lr` for every step.
inline LrSchedule constant_lr(float lr) { return LrSchedule{LrScheduleKind::constant, lr, 1, 0}; }

// One optimizer step over every parameter at once, on the main stream. (The training step updates
// each bucket as soon as its gradients are final instead; Note [The step].)
inline void sgd_step(SGD& sgd, ResNet18& model) {
  const cudaStream_t stream = model.context().main_stream();
  sgd.begin_step(stream);
  sgd.update(0, model.params().numel(), stream);
}

}  // namespace cutrain::test
