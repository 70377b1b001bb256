// `cutrain bench-data`: how fast the CPU input pipeline turns a dataset into augmented batches.
// Prints the loader's throughput with T worker threads, and the augmentation alone on one core.
//
// Note [Loader threads and free cores]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// T threads are only T times one thread's speed when T cores are free for them. Beside the
// workers, this thread takes the batches, and on a shared machine other processes take cores too
// (bench/README.md, "The input pipeline", has a measurement). So the loader's line also says how
// many cores the process got while it ran (its CPU time over the wall time) and the images/s per
// core it got; the machine's load average before the run says how busy the machine already was.
// Equal images/s per core at 1 and 2 threads mean that the threads scale, and the cores did not.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "app/commands.h"
#include "app/flags.h"
#include "app/run_log.h"
#include "data/load.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/synthetic.h"

namespace cutrain {

static double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The CPU time of this process's threads so far, user and system, in seconds.
static double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

void add_bench_data_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("bench-data", "Measure augmented images per second of the CPU loader");
  struct Options {
    std::string data;
    int threads = int(std::max(1u, std::thread::hardware_concurrency()));
    int batch_size = 256;
    int epochs = 3;
    int out_channels = 3;
    std::string dtype = "f32";
  };
  auto o = std::make_shared<Options>();
  add_data_option(cmd, o->data, "Dataset folder; default: 50,000 synthetic images made in memory");
  add_number(cmd, "--threads", o->threads, "Loader worker threads", 1, 256)->capture_default_str();
  add_number(cmd, "--batch-size", o->batch_size, "Images per batch", 1, 1 << 20)->capture_default_str();
  add_number(cmd, "--epochs", o->epochs, "Epochs to time", 1, 1000)->capture_default_str();
  add_number(cmd, "--out-channels", o->out_channels, "Output channels (extra ones zero)", 3, 64)->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "Output type")->capture_default_str()->check(CLI::IsMember({"f32", "bf16"}));
  cmd->callback([o, &exit_code] {
    Dataset train = o->data.empty() ? make_synthetic(50000, 0, true) : load_dataset(o->data, true);
    LoaderConfig config;
    config.batch_size = o->batch_size;
    config.workers = o->threads;
    config.out_channels = o->out_channels;
    config.pixel_type = o->dtype == "f32" ? PixelType::f32 : PixelType::bf16;
    Loader loader(train, config);
    DistributedSampler sampler(int64_t(train.size()), 1, 0);

    // The loader: T workers filling the ring, this thread taking batches as a trainer would.
    double load = 0;
    if (getloadavg(&load, 1) != 1) load = -1;
    int64_t images = 0;
    const double cpu_start = cpu_seconds();
    auto start = std::chrono::steady_clock::now();
    for (int epoch = 0; epoch < o->epochs; ++epoch) {
      sampler.set_epoch(epoch);
      loader.start_epoch(sampler.indices(), epoch);
      Batch batch;
      while (loader.next(batch)) images += batch.size;
    }
    const double loader_seconds = seconds_since(start);
    const double loader_rate = double(images) / loader_seconds;
    const double cores_used = (cpu_seconds() - cpu_start) / loader_seconds;

    // The augmentation alone, one batch after another on this one core.
    AugmentParams p = make_augment_params(config.augment, train.height, train.width, config.out_channels);
    std::vector<uint8_t> out(loader.image_elements() * pixel_type_size(config.pixel_type) * config.batch_size);
    std::vector<int32_t> labels(config.batch_size);
    std::vector<int64_t> order = sampler.indices();
    const size_t batches = count_batches(order.size(), config.batch_size, true);
    start = std::chrono::steady_clock::now();
    for (size_t b = 0; b < batches; ++b)
      gather_augment_cpu(train.images.data(), train.labels.data(), order.data() + b * config.batch_size,
                         config.batch_size, 0, p, config.pixel_type, out.data(), labels.data());
    double core_rate = double(batches * config.batch_size) / seconds_since(start);

    std::printf("bench-data: %zu images, batch %d, %s x %d channels out\n", train.size(), config.batch_size,
                o->dtype.c_str(), config.out_channels);
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    char load_text[64] = "";
    if (load >= 0) std::snprintf(load_text, sizeof load_text, ", load average %.2f before it", load);
    std::printf(
        "loader, %s: %.0f images/s (%.0f per thread); the process got %.2f of %s (%.0f images/s per core "
        "it got%s)\n",
        counted(o->threads, "thread").c_str(), loader_rate, loader_rate / o->threads, cores_used,
        counted(cores, "core").c_str(), loader_rate / cores_used, load_text);
    if (o->threads + 1 > cores)
      std::printf(
          "  %s and the thread taking batches share %s with whatever else runs: past the free cores, more "
          "threads add no speed (Note [Loader threads and free cores] in app/bench/bench_data.cpp)\n",
          counted(o->threads, "loader thread").c_str(), counted(cores, "core").c_str());
    std::printf("augment on one core: %.0f images/s\n", core_rate);
    exit_code = 0;
  });
}

}  // namespace cutrain
