#include "dist/launch/store_protocol.h"

#include <charconv>

namespace cutrain {
namespace {

void put_u32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(char((value >> (8 * i)) & 0xff));
}

uint32_t get_u32(const std::string& in, size_t at) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= uint32_t(uint8_t(in[at + i])) << (8 * i);
  return value;
}

int64_t number(const std::string& text, const char* what) {
  std::optional<int64_t> value = parse_decimal(text);
  if (!value) throw ProtocolError(std::string("malformed request: the ") + what + " is not an integer");
  return *value;
}

}  // namespace

std::string encode_frame(const Fields& fields) {
  size_t length = 0;
  for (const std::string& field : fields) length += 4 + field.size();
  if (length > kMaxFrameBytes)
    throw ProtocolError("store: a message of " + std::to_string(length) + " bytes is over the limit of " +
                        std::to_string(kMaxFrameBytes) + " bytes");
  std::string frame;
  frame.reserve(4 + length);
  put_u32(frame, uint32_t(length));
  for (const std::string& field : fields) {
    put_u32(frame, uint32_t(field.size()));
    frame += field;
  }
  return frame;
}

std::optional<Fields> pop_frame(std::string& buffer) {
  if (buffer.size() < 4) return std::nullopt;
  const size_t length = get_u32(buffer, 0);
  if (length > kMaxFrameBytes)
    throw ProtocolError("a message of " + std::to_string(length) + " bytes is over the limit of " +
                        std::to_string(kMaxFrameBytes));
  const size_t end = 4 + length;
  // Check the field lengths that have arrived, so a bad frame is refused before it is complete.
  size_t fields = 0;
  for (size_t at = 4; at < end; ++fields) {
    if (end - at < 4) throw ProtocolError("malformed message: a field length is cut off");
    if (buffer.size() < at + 4) return std::nullopt;
    const size_t field_length = get_u32(buffer, at);
    at += 4;
    if (field_length > end - at) throw ProtocolError("malformed message: a field overruns it");
    at += field_length;
  }
  if (buffer.size() < end) return std::nullopt;
  Fields frame;
  frame.reserve(fields);
  for (size_t at = 4; at < end;) {
    const size_t field_length = get_u32(buffer, at);
    frame.push_back(buffer.substr(at + 4, field_length));
    at += 4 + field_length;
  }
  buffer.erase(0, end);
  return frame;
}

Clock::time_point deadline_after(Clock::time_point now, std::chrono::milliseconds timeout) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now);
  return timeout >= left ? Clock::time_point::max() : now + timeout;
}

std::optional<int64_t> parse_decimal(const std::string& text) {
  int64_t value = 0;
  const char* first = text.data();
  const char* last = first + text.size();
  auto [end, error] = std::from_chars(first, last, value);
  if (text.empty() || error != std::errc() || end != last) return std::nullopt;
  return value;
}

Request parse_request(const Fields& fields) {
  if (fields.size() < 2) throw ProtocolError("malformed request: no op and run id");
  Request r;
  r.run_id = fields[1];
  const std::string& op = fields[0];
  const size_t args = fields.size() - 2;
  auto arg = [&](size_t i) -> const std::string& { return fields[2 + i]; };
  if (op == "join" && args == 3) {
    r.op = Request::Op::join;
    r.rank = number(arg(0), "rank");
    r.world_size = number(arg(1), "world size");
    r.restart_count = number(arg(2), "restart count");
    if (r.restart_count < 0) throw ProtocolError("malformed request: a negative restart count");
  } else if (op == "set" && args == 2) {
    r.op = Request::Op::set;
    r.keys = {arg(0)};
    r.value = arg(1);
  } else if (op == "add" && args == 2) {
    r.op = Request::Op::add;
    r.keys = {arg(0)};
    r.delta = number(arg(1), "delta");
  } else if ((op == "get" && args == 2) || (op == "wait" && args >= 2)) {
    r.op = op == "get" ? Request::Op::get : Request::Op::wait;
    const int64_t ms = number(arg(0), "timeout");
    if (ms < 0) throw ProtocolError("malformed request: a negative timeout");
    r.timeout = std::chrono::milliseconds(ms);
    r.keys.assign(fields.begin() + 3, fields.end());
  } else {
    throw ProtocolError("malformed request: an unknown op, or the wrong number of arguments");
  }
  return r;
}

}  // namespace cutrain
