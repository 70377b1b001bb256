#include "app/run_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "app/tensorboard_writer.h"
#include "app/version.h"

namespace cutrain {
namespace {

// The JSON value of an optional number: the number, or null.
nlohmann::json optional_number(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

// " | test acc (EMA): 91.20%" where the average of the weights was evaluated (--model-ema), else "".
std::string ema_accuracy_text(const std::optional<double>& accuracy) {
  char text[48] = "";
  if (accuracy) std::snprintf(text, sizeof text, " | test acc (EMA): %.2f%%", 100 * *accuracy);
  return text;
}

// Now, in seconds since the Unix epoch, to the millisecond.
double unix_time() {
  using std::chrono::milliseconds;
  const auto ms = std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch());
  return double(ms.count()) / 1e3;
}

// "2026-12-02T02:18:07Z": a Unix time in UTC, as ISO 8601 writes it.
std::string iso_time(double unix_seconds) {
  const std::time_t t = std::time_t(unix_seconds);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace

std::string clock_text(double seconds) {
  const long long s = std::llround(std::max(0.0, seconds));
  char text[32];
  std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return text;
}

RunLog::RunLog(bool active, const std::string& metrics_path, const std::string& tensorboard_dir)
    : active_(active), progress_bar_(active && isatty(STDOUT_FILENO)), metrics_path_(metrics_path) {
  if (!active_) return;
  if (!tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir);
  if (metrics_path.empty()) return;
  // Appended to, but never through a symbolic link: a link planted at the name would make the
  // trainer write wherever it points. Never blocking either: a FIFO that nobody reads is refused
  // here, and one whose reader stops fails a write (EAGAIN) like a full disk.
  const int fd =
      ::open(metrics_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ELOOP)
    throw std::runtime_error("--metrics " + metrics_path + ": is a symbolic link; give the file it points to");
  if (fd < 0 && errno == ENXIO)
    throw std::runtime_error("--metrics " + metrics_path + ": a FIFO that no process reads");
  if (fd >= 0) metrics_ = ::fdopen(fd, "a");
  if (metrics_ == nullptr) throw std::runtime_error("--metrics " + metrics_path + ": cannot open for writing");
  if (fd >= 0) drop_torn_record(fd);
}

// A write cut short (a full disk, a kill) leaves a last line without its newline; the next
// record would be appended onto it, and the whole file then fails to parse. It is dropped.
void RunLog::drop_torn_record(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return;
  // Where the whole records end: after the last newline, read backwards a chunk at a time (through
  // a descriptor of its own: the one that appends is opened for writing alone, as a FIFO must be).
  const int in = ::open(metrics_path_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (in < 0) return;
  off_t whole = -1;
  char chunk[4096];
  for (off_t end = st.st_size; end > 0 && whole < 0;) {
    const off_t begin = std::max<off_t>(0, end - off_t(sizeof chunk));
    if (::pread(in, chunk, size_t(end - begin), begin) != end - begin) {
      ::close(in);
      return;  // unreadable: left as it is
    }
    for (off_t i = end - begin; i > 0 && whole < 0; --i)
      if (chunk[i - 1] == '\n') whole = begin + i;
    end = begin;
  }
  ::close(in);
  if (whole < 0) whole = 0;
  if (whole == st.st_size || ::ftruncate(fd, whole) != 0) return;
  std::fprintf(stderr,
               "cutrain: warning: --metrics %s: dropped a torn last record (%lld bytes) that an interrupted "
               "write left\n",
               metrics_path_.c_str(), static_cast<long long>(st.st_size - whole));
}

void RunLog::started(const nlohmann::json& run) {
  if (!active_) return;
  nlohmann::json record = {{"kind", "run"}};
  record.update(run);
  record.update({{"start_time", iso_time(unix_time())}, {"version", kVersion}, {"commit", kGitCommit}});
  write_json(std::move(record));
}

void RunLog::resumed(int epoch, int64_t global_step, const std::string& checkpoint) {
  if (!active_) return;
  write_json({{"kind", "resume"}, {"epoch", epoch}, {"global_step", global_step}, {"checkpoint", checkpoint}});
}

RunLog::~RunLog() {
  end_progress_bar();
  if (metrics_) std::fclose(metrics_);
}

void RunLog::print(const char* format, ...) {
  if (!active_) return;
  end_progress_bar();
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void RunLog::end_progress_bar() {
  if (!bar_open_) return;
  std::fputc('\n', stdout);
  bar_open_ = false;
}

void RunLog::write_json(nlohmann::json record) {
  if (!metrics_) return;
  record["time"] = unix_time();
  const std::string line = record.dump();
  if (write_error_.empty()) {
    errno = 0;
    if (std::fputs((line + "\n").c_str(), metrics_) >= 0 && std::fflush(metrics_) == 0) return;
    write_error_ = errno ? std::strerror(errno) : "write failed";
    end_progress_bar();
    std::fprintf(stderr,
                 "cutrain: warning: --metrics %s: cannot write (%s); training goes on without metrics and "
                 "will exit with status 1\n",
                 metrics_path_.c_str(), write_error_.c_str());
  }
  ++lost_records_;
}

void RunLog::finish() {
  if (!metrics_) return;
  errno = 0;
  const bool closed = std::fclose(metrics_) == 0;
  metrics_ = nullptr;
  if (!closed && write_error_.empty()) write_error_ = errno ? std::strerror(errno) : "close failed";
  if (!write_error_.empty())
    throw std::runtime_error("--metrics " + metrics_path_ + ": " + std::to_string(lost_records_) +
                             " record(s) could not be written (" + write_error_ + "); the training itself finished");
}

void RunLog::step(const StepRecord& r) {
  if (!active_) return;
  if (progress_bar_) {
    constexpr int width = 30;
    const int filled = r.step * width / r.steps_per_epoch;
    std::printf("\r[%d] %s%s %*d/%d | loss %.3f | train acc %6.2f%% | %.0f img/s | eta %s", r.epoch,
                std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(), 4, r.step,
                r.steps_per_epoch, r.loss, 100 * r.acc, r.images_per_s, clock_text(r.eta_s).c_str());
    std::fflush(stdout);
    bar_open_ = true;
  } else {
    char mfu[32] = "";
    if (r.mfu) std::snprintf(mfu, sizeof mfu, " | mfu: %.1f%%", 100 * *r.mfu);
    std::printf(
        "== step: [%3d/%d] [%d/%d] | loss: %.3f | grad norm: %.3f | train acc: %.3f%% | %.0f img/s%s | %.1f "
        "ms/step | data: %.1f ms/step | max mem: %.0f MiB | lr: %.4g | elapsed: %s | eta: %s\n",
        r.step, r.steps_per_epoch, r.epoch, r.epochs, r.loss, r.grad_norm, 100 * r.acc, r.images_per_s, mfu,
        r.ms_per_step, r.data_ms_per_step, double(r.peak_memory_bytes) / (1 << 20), r.lr,
        clock_text(r.elapsed_s).c_str(), clock_text(r.eta_s).c_str());
    std::fflush(stdout);
  }
  write_json(nlohmann::json{{"kind", "step"},
                            {"epoch", r.epoch},
                            {"step", r.step},
                            {"steps_per_epoch", r.steps_per_epoch},
                            {"global_step", r.global_step},
                            {"loss", r.loss},
                            {"grad_norm", r.grad_norm},
                            {"acc", r.acc},
                            {"lr", r.lr},
                            {"images_per_s", r.images_per_s},
                            {"ms_per_step", r.ms_per_step},
                            {"data_ms_per_step", r.data_ms_per_step},
                            {"peak_memory_bytes", r.peak_memory_bytes},
                            {"mfu", optional_number(r.mfu)},
                            {"elapsed_s", r.elapsed_s},
                            {"eta_s", r.eta_s}});
  if (tensorboard_) {
    tensorboard_->scalar("train/loss", r.global_step, r.loss);
    tensorboard_->scalar("train/accuracy", r.global_step, r.acc);
    tensorboard_->scalar("train/grad_norm", r.global_step, r.grad_norm);
    tensorboard_->scalar("train/lr", r.global_step, r.lr);
    tensorboard_->scalar("train/images_per_s", r.global_step, r.images_per_s);
  }
}

void RunLog::epoch(const EpochRecord& r) {
  if (!active_) return;
  char test[64] = "";
  if (r.test_acc)
    std::snprintf(test, sizeof test, " | test acc: %.2f%% | test loss: %.3f", 100 * *r.test_acc,
                  r.test_loss.value_or(0));
  print("== epoch %d/%d | loss: %.3f | train acc: %.3f%%%s%s | %.1f s | %.0f img/s", r.epoch, r.epochs, r.loss,
        100 * r.acc, test, ema_accuracy_text(r.test_acc_ema).c_str(), r.epoch_time_s, r.images_per_s);
  nlohmann::json record{{"kind", "epoch"},
                        {"epoch", r.epoch},
                        {"global_step", r.global_step},
                        {"loss", r.loss},
                        {"acc", r.acc},
                        {"lr", r.lr},
                        {"images_per_s", r.images_per_s},
                        {"epoch_time_s", r.epoch_time_s},
                        {"test_acc", optional_number(r.test_acc)},
                        {"test_loss", optional_number(r.test_loss)},
                        {"peak_memory_bytes", r.peak_memory_bytes}};
  if (r.test_acc_ema) record["test_acc_ema"] = *r.test_acc_ema;
  write_json(std::move(record));
}

void RunLog::evaluation(const EvalRecord& r) {
  if (!active_) return;
  if (!r.epoch_end)
    print("== eval: step %lld [%d/%d] | test acc: %.2f%% | test loss: %.3f%s | %.1f s",
          static_cast<long long>(r.global_step), r.epoch, r.epochs, 100 * r.test_acc, r.test_loss,
          ema_accuracy_text(r.test_acc_ema).c_str(), r.eval_time_s);
  nlohmann::json record{{"kind", "eval"},
                        {"epoch", r.epoch},
                        {"global_step", r.global_step},
                        {"epoch_end", r.epoch_end},
                        {"test_acc", r.test_acc},
                        {"test_loss", r.test_loss},
                        {"eval_time_s", r.eval_time_s},
                        {"training_time_s", r.training_time_s}};
  if (r.test_acc_ema) {
    record["test_acc_ema"] = *r.test_acc_ema;
    record["test_loss_ema"] = *r.test_loss_ema;
  }
  write_json(std::move(record));
  if (tensorboard_) {
    tensorboard_->scalar("test/accuracy", r.global_step, r.test_acc);
    tensorboard_->scalar("test/loss", r.global_step, r.test_loss);
    if (r.test_acc_ema) tensorboard_->scalar("test/accuracy_ema", r.global_step, *r.test_acc_ema);
  }
}

void RunLog::evaluation_progress(int64_t done, int64_t total, double elapsed_s) {
  if (!active_) return;
  const double eta = done > 0 ? elapsed_s * double(total - done) / double(done) : 0;
  if (progress_bar_) {
    std::printf("\r== eval: %lld/%lld test images | %s elapsed | eta %s", static_cast<long long>(done),
                static_cast<long long>(total), clock_text(elapsed_s).c_str(), clock_text(eta).c_str());
    std::fflush(stdout);
    bar_open_ = true;
  } else {
    print("== eval: %lld/%lld test images | elapsed: %s | eta: %s", static_cast<long long>(done),
          static_cast<long long>(total), clock_text(elapsed_s).c_str(), clock_text(eta).c_str());
  }
}

void RunLog::summary(const SummaryRecord& r) {
  if (!active_) return;
  nlohmann::json target_steps;
  if (r.target_steps) target_steps = *r.target_steps;
  write_json(nlohmann::json{
      {"kind", "summary"},
      {"wall_time_s", r.wall_time_s},
      {"training_time_s", r.training_time_s},
      {"eval_time_s", r.eval_time_s},
      {"mean_images_per_s", r.mean_images_per_s},
      {"tta", r.tta},
      {"target_acc", optional_number(r.target_acc)},
      {"target_reached", r.target_acc ? nlohmann::json(r.time_to_target_s.has_value()) : nlohmann::json()},
      {"time_to_target_s", optional_number(r.time_to_target_s)},
      {"target_epochs", optional_number(r.target_epochs)},
      {"target_steps", target_steps},
      {"best_test_acc", optional_number(r.best_test_acc)},
      {"final_test_acc", optional_number(r.final_test_acc)},
      {"peak_memory_bytes", r.peak_memory_bytes},
      {"world_size", r.world_size},
      {"precision", r.precision},
      {"stem", r.stem},
      {"batch_size", r.batch_size}});
}

}  // namespace cutrain
