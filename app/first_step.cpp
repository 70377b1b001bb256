#include "app/first_step.h"

#include <numeric>

#include "app/batch_feed.h"
#include "nn/checkpoint.h"
#include "nn/resnet.h"

namespace cutrain {

void dump_first_step(const std::string& path, ResNet18& model, const Dataset& train) {
  LoaderConfig config;
  config.batch_size = model.config().batch_size;
  config.augment.train = false;
  config.workers = 1;
  BatchFeed feed(train, config, model);
  std::vector<int64_t> first(size_t(config.batch_size));
  std::iota(first.begin(), first.end(), 0);
  feed.start_epoch(first, 0);
  feed.load(0);
  model.forward(true);
  model.backward();
  model.gather_grads();
  float loss = 0;
  model.context().synchronize();
  copy_to_host(Tensor(const_cast<float*>(model.loss()), DType::f32, model.context().device(), {1}), &loss);
  save_gradients(path, model, loss);
}

}  // namespace cutrain
