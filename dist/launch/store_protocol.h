// store_protocol.h: the store's messages as bytes and as requests. Pure functions, no sockets,
// so that tests and fuzzers can call them directly.
//
// A message on the wire is a frame of fields, every length a little-endian uint32:
//   [frame length][field 0 length][field 0 bytes][field 1 length][field 1 bytes]...
// A request is the frame
//   [op, run id, arguments...]
// with the ops
//   "join"  rank, world size, restart count  -> "ok"  |  "retry", why
//   "set"   key, value              -> "ok"
//   "get"   timeout ms, key         -> "ok", value     |  "timeout", key
//   "add"   key, delta              -> "ok", new value (decimal text)
//   "wait"  timeout ms, keys...     -> "ok"            |  "timeout", missing keys...
// A refused request gets "error", why. A get or wait still waiting when the server stops gets
// "closed", missing keys. dist/launch/store_state.h says who may ask what.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cutrain {

using Fields = std::vector<std::string>;
using Clock = std::chrono::steady_clock;

// No frame may be longer than this. The job's largest messages grow with the world size, and
// kMaxWorldSize keeps them within half of it (Note [The largest world] in dist/launch/env.h), so a longer
// frame is not one of ours.
constexpr size_t kMaxFrameBytes = size_t(1) << 20;

// Bytes that break the protocol: a frame too long or malformed, a request that is not one.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws ProtocolError when the frame would be longer than kMaxFrameBytes.
std::string encode_frame(const Fields& fields);

// Removes and returns the first complete frame at the front of `buffer`, if there is one. A length
// prefix over kMaxFrameBytes, or fields overrunning their frame, throw ProtocolError as soon as the
// bytes that show it are in `buffer`: the caller never has to buffer more than one frame.
std::optional<Fields> pop_frame(std::string& buffer);

struct Request {
  enum class Op { join, set, get, add, wait } op = Op::join;
  std::string run_id;
  int64_t rank = 0;                      // join
  int64_t world_size = 0;                // join
  int64_t restart_count = 0;             // join: TORCHELASTIC_RESTART_COUNT, 0 or more
  std::vector<std::string> keys;         // set, get, add: one; wait: one or more
  std::string value;                     // set
  int64_t delta = 0;                     // add
  std::chrono::milliseconds timeout{0};  // get, wait: 0 or more
};

// The request a frame holds; throws ProtocolError naming what is wrong (an unknown op, a missing
// field, a number that is not a decimal integer or is out of range).
Request parse_request(const Fields& fields);

// now + timeout, or the end of time when that would overflow (a timeout of INT64_MAX ms).
Clock::time_point deadline_after(Clock::time_point now, std::chrono::milliseconds timeout);

// `text` as an integer, when it is decimal digits with an optional '-', and fits in int64.
std::optional<int64_t> parse_decimal(const std::string& text);

}  // namespace cutrain
