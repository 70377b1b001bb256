// A small ResNet-18 trained on one fixed batch on the CPU must memorise it: the whole chain
// (forward, backward, flat gradients, SGD) pointing downhill, with nothing else to learn.
#include <catch2/catch.hpp>

#include "nn/sgd.h"
#include "tests/nn_fixtures.h"

using namespace cutrain;

TEST_CASE("A small ResNet-18 overfits a fixed batch", "[nn]") {
  Context ctx({});
  ResNetConfig c = test::tiny_resnet();
  c.width = 8;
  c.batch_size = 16;
  ResNet18 model(ctx, c);
  SGD sgd(ctx, model.params(), SgdConfig{0.9f, 0.0f, true}, test::constant_lr(0.05f));
  test::fill_random_batch(model, 42);

  model.forward(true);
  const float first = *model.loss();
  float last = first;
  for (int step = 0; step < 30; ++step) {
    model.forward(true);
    last = *model.loss();
    model.backward();
    test::sgd_step(sgd, model);
  }
  model.forward(true);
  INFO("loss " << first << " -> " << last << " -> " << *model.loss());
  CHECK(first > 1.5f);  // ~ln 10 for random labels
  CHECK(*model.loss() < 0.2f * first);
  CHECK(*model.correct() == c.batch_size);
}
