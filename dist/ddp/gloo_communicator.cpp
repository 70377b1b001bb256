#include "dist/ddp/gloo_communicator.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <csignal>
#include <stdexcept>

#include "dist/launch/network_interface.h"
#include "dist/launch/progress_report.h"
#include "dist/launch/socket.h"

namespace cutrain {
namespace {

// Gloo's view of our store: the same keys under "gloo/<name>/", and our timeout where Gloo
// would use its own.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(cutrain::Store& store, const std::string& name) : store_(store), prefix_("gloo/" + name + "/") {}

  void set(const std::string& key, const std::vector<char>& data) override { store_.set(prefix_ + key, data); }
  std::vector<char> get(const std::string& key) override { return store_.get(prefix_ + key); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, store_.timeout()); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const std::string& key : keys) prefixed.push_back(prefix_ + key);
    std::vector<std::string> missing = store_.wait_for(prefixed, timeout);
    if (!missing.empty())
      throw std::runtime_error("gloo rendezvous: '" + missing[0] + "' was not set within " + describe(timeout));
  }

 private:
  cutrain::Store& store_;
  std::string prefix_;
};

// Where this rank's Gloo listens (dist/launch/network_interface.h): GLOO_SOCKET_IFNAME's interface, or the one
// that routes to MASTER_ADDR.
gloo::transport::tcp::attr device_attr(const DistEnv& env) {
  gloo::transport::tcp::attr attr;
  attr.hostname = gloo_interface(env).address;
  return attr;
}

template <typename T>
void divide(T* data, size_t count, int world_size) {
  const T scale = T(1) / T(world_size);
  for (size_t i = 0; i < count; ++i) data[i] *= scale;
}

template <typename T>
void gloo_all_reduce(const std::shared_ptr<gloo::Context>& context, T* data, size_t count, ReduceOp op, uint32_t tag) {
  gloo::AllreduceOptions options(context);
  options.setOutput(data, count);
  options.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
  options.setTag(tag);
  gloo::allreduce(options);
  if (op == ReduceOp::average) divide(data, count, context->size);
}

const char* task_name(int kind) {
  static const char* names[] = {"all_reduce", "all_reduce_host", "broadcast", "barrier"};
  return names[kind];
}

}  // namespace

GlooCommunicator::GlooCommunicator(const DistEnv& env, Store& store, const CommunicatorOptions& options)
    : rank_(env.rank), world_size_(env.world_size) {
  // Gloo's TCP pairs write with writev, not send with MSG_NOSIGNAL, so a write to a peer that has
  // exited raises SIGPIPE, whose default action ends this rank without a word (cutrun then reports
  // "killed by signal SIGPIPE" instead of the lost peer). With the signal ignored, the write fails
  // with EPIPE and the collective throws, naming the rank. Python does the same for PyTorch at
  // start-up. The setting is process-wide because Gloo writes from threads of its own.
  std::signal(SIGPIPE, SIG_IGN);
  auto device = gloo::transport::tcp::CreateDevice(device_attr(env));
  auto context = std::make_shared<gloo::rendezvous::Context>(rank_, world_size_);
  context->setTimeout(options.timeout);
  GlooStore gloo_store(store, options.name);
  context->connectFullMesh(gloo_store, device);
  context_ = context;
  thread_ = std::thread([this] { work(); });
}

GlooCommunicator::~GlooCommunicator() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void GlooCommunicator::enqueue(Task task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    task.tag = next_tag_++;
    queue_.push_back(std::move(task));
  }
  changed_.notify_all();
}

void GlooCommunicator::wait_async() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return (queue_.empty() && !running_task_) || error_; });
  if (error_) std::rethrow_exception(error_);
}

void GlooCommunicator::all_reduce_async(float* data, size_t count, ReduceOp op) {
  enqueue({Task::all_reduce_float, data, count, op});
}

void GlooCommunicator::all_reduce(float* data, size_t count, ReduceOp op) {
  all_reduce_async(data, count, op);
  wait_async();
}

void GlooCommunicator::all_reduce_host(double* data, size_t count, ReduceOp op) {
  enqueue({Task::all_reduce_double, data, count, op});
  wait_async();
}

void GlooCommunicator::broadcast(float* data, size_t count, int root) {
  check_root(root);
  enqueue({Task::broadcast_float, data, count, ReduceOp::sum, root});
  wait_async();
}

void GlooCommunicator::barrier() {
  enqueue({Task::barrier});
  wait_async();
}

void GlooCommunicator::run(const Task& task) {
  switch (task.kind) {
    case Task::all_reduce_float:
      gloo_all_reduce(context_, static_cast<float*>(task.data), task.count, task.op, task.tag);
      break;
    case Task::all_reduce_double:
      gloo_all_reduce(context_, static_cast<double*>(task.data), task.count, task.op, task.tag);
      break;
    case Task::broadcast_float: {
      gloo::BroadcastOptions options(context_);
      options.setOutput(static_cast<float*>(task.data), task.count);
      options.setRoot(task.root);
      options.setTag(task.tag);
      gloo::broadcast(options);
      break;
    }
    case Task::barrier: {
      gloo::BarrierOptions options(context_);
      options.setTag(task.tag);
      gloo::barrier(options);
      break;
    }
  }
}

void GlooCommunicator::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to do
    Task task = std::move(queue_.front());
    queue_.pop_front();
    running_task_ = true;
    lock.unlock();
    std::exception_ptr failure;
    try {
      WaitingOnPeers waiting;  // Note [A heartbeat means progress] in dist/launch/progress_report.h
      run(task);
    } catch (const std::exception& e) {
      failure = std::make_exception_ptr(std::runtime_error(std::string("gloo ") + task_name(task.kind) + " of " +
                                                           std::to_string(task.count) + " elements failed on rank " +
                                                           std::to_string(rank_) + ": " + e.what()));
    }
    lock.lock();
    running_task_ = false;
    if (failure && !error_) {
      error_ = failure;
      queue_.clear();  // later collectives would only wait on a peer that is gone
    }
    changed_.notify_all();
  }
}

}  // namespace cutrain
