// tensorboard_writer.h: TensorBoard's event files, written by hand (no protobuf library), for
// `cutrain train --tensorboard DIR`. RunLog (app/run_log.h) calls it where the metrics JSONL gets a
// record, so TensorBoard shows the same numbers: train/loss, train/accuracy, train/lr and
// train/images_per_s at each logged step, test/accuracy and test/loss at each evaluation.
//
// Note [TensorBoard's event file]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A file named events.out.tfevents.<seconds>.<host>.<pid> holds
// records, each
//   uint64 length | uint32 masked CRC-32C of those 8 bytes | `length` bytes | uint32 masked CRC-32C of them
// (little-endian; masked: ((crc >> 15) | (crc << 17)) + 0xa282ead8), and each record is a serialized
// tensorflow.Event proto. The first says the file's version ({wall_time: 1, file_version:
// "brain.Event:2"}); every other one is {wall_time: 1, step: 2, summary: 5 {value: 1 {tag: 1,
// simple_value: 2}}}, field numbers after the colons, one scalar an event.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace cutrain {

class TensorBoardWriter {
 public:
  // Makes DIR (with its parents) and a new event file in it; throws, naming DIR, when it cannot.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Appends one scalar at this step, stamped with the wall clock, and flushes it, so that a
  // TensorBoard watching the folder sees it at once. A failed write warns once, naming the file,
  // and the writer then stays silent: TensorBoard is a view, and the training goes on.
  void scalar(const std::string& tag, int64_t step, double value);

 private:
  void write_record(const std::string& event);

  std::string path_;
  std::FILE* file_ = nullptr;
  bool failed_ = false;
};

}  // namespace cutrain
