#include "dist/launch/torch_store.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "dist/launch/store_protocol.h"

namespace cutrain {
namespace {

constexpr uint32_t kValidationMagic = 0x3C85F7CE;

// Command bytes, TCPStoreBackend.hpp's QueryType (Note [torchrun's store]).
enum Command : uint8_t {
  kValidate = 0,
  kSet = 1,
  kCompareSet = 2,
  kGet = 3,
  kAdd = 4,
  kCheck = 5,
  kWait = 6,
  kMultiGet = 10,
  kCancelWait = 12,
  kPing = 13,
};

// Replies to CHECK and WAIT, TCPStoreBackend.hpp's CheckResponseType and WaitResponseType.
constexpr uint8_t kReady = 0, kNotReady = 1;
constexpr uint8_t kStopWaiting = 0, kWaitCanceled = 1;

// The protocol this client speaks, as the lines about a store that does not speak it name it.
constexpr const char* kProtocol =
    "PyTorch's TCPStore protocol (validation 0x3C85F7CE, then PING), as torch 2.11 speaks it";

template <typename T>
void append(std::string& request, T value) {
  request.append(reinterpret_cast<const char*>(&value), sizeof value);
}

void append_bytes(std::string& request, const std::string& bytes) {
  append<uint64_t>(request, bytes.size());
  request += bytes;
}

template <typename T>
T decode(const std::string& bytes) {
  T value;
  std::memcpy(&value, bytes.data(), sizeof value);
  return value;
}

std::string hex(const std::string& bytes) {
  std::string text = "0x";
  char digits[3];
  for (unsigned char c : bytes) {
    std::snprintf(digits, sizeof digits, "%02x", c);
    text += digits;
  }
  return text;
}

std::string keys_request(uint8_t command, const std::vector<std::string>& keys) {
  std::string request(1, char(command));
  append<uint64_t>(request, keys.size());
  for (const std::string& key : keys) append_bytes(request, key);
  return request;
}

}  // namespace

TorchStore::TorchStore(const std::string& host, int port, const std::string& prefix, std::chrono::milliseconds timeout,
                       const ConnectRetry& on_retry)
    : prefix_("/" + prefix), address_(host_port(host, port)), timeout_(timeout) {
  socket_ = connect_tcp(host, port, timeout_, on_retry);
  try {
    handshake();
  } catch (...) {
    ::close(socket_);  // the destructor will not run
    throw;
  }
}

TorchStore::~TorchStore() { ::close(socket_); }

void TorchStore::handshake() {
  const uint32_t nonce = uint32_t(::getpid());
  std::string hello(1, char(kValidate));
  append<uint32_t>(hello, kValidationMagic);
  hello += char(kPing);
  append<uint32_t>(hello, nonce);
  const std::string what = "the store at " + address_;
  std::string reply;
  try {
    send_all(socket_, hello);
    reply = receive_exact(socket_, sizeof nonce, deadline_after(Clock::now(), timeout_), what);
  } catch (const ConnectionClosed&) {
    throw std::runtime_error(what + " closed the connection at the handshake: it does not speak " +
                             std::string(kProtocol) + " (an older store without PING does the same)");
  } catch (const NoReply&) {
    throw std::runtime_error(what + " did not answer the handshake within " + describe(timeout_) +
                             ": it does not speak " + kProtocol);
  }
  if (decode<uint32_t>(reply) == nonce) return;
  // cutrain's own store answers the bytes it cannot read with an error frame (its first four bytes
  // are the frame's length), then closes.
  const uint32_t frame_length = decode<uint32_t>(reply);
  if (frame_length <= 4096) {
    try {
      reply += receive_exact(socket_, frame_length, deadline_after(Clock::now(), timeout_), what);
    } catch (const std::runtime_error&) {
      // Closed, or nothing more: what came is all there is to describe.
    }
  }
  std::string buffer = reply;
  std::optional<Fields> frame;
  try {
    frame = pop_frame(buffer);
  } catch (const ProtocolError&) {
  }
  if (frame && !frame->empty() && (*frame)[0] == "error")
    throw std::runtime_error(what + " speaks cutrain's own store protocol (the store of a cutrain rank 0), not " +
                             kProtocol + ": is MASTER_PORT torchrun's, and TORCHELASTIC_USE_AGENT_STORE meant?");
  throw std::runtime_error(what + " answered the ping with " + hex(reply.substr(0, 16)) +
                           ", not its nonce: " + "it does not speak " + kProtocol);
}

void TorchStore::send(const std::string& request) {
  if (broken_)
    throw std::runtime_error("store at " + address_ + ": the connection was given up at an earlier reply that " +
                             "did not come or was not " + kProtocol);
  if (request.size() > kMaxFrameBytes)
    throw std::runtime_error("store at " + address_ + ": a request of " + std::to_string(request.size()) +
                             " bytes is over the limit of " + std::to_string(kMaxFrameBytes));
  try {
    send_all(socket_, request);
  } catch (const ConnectionClosed&) {
    throw ConnectionClosed("store at " + address_ + ": the connection closed (did torchrun's agent exit?)");
  }
}

std::string TorchStore::receive(size_t count, const char* command) {
  try {
    return receive_exact(socket_, count, deadline_after(Clock::now(), timeout_), "the store at " + address_);
  } catch (const ConnectionClosed&) {
    broken_ = true;
    throw ConnectionClosed("store at " + address_ + ": the connection closed before the reply to " + command +
                           " (did torchrun's agent exit?)");
  } catch (const NoReply&) {
    broken_ = true;
    throw std::runtime_error("store at " + address_ + ": no reply to " + command + " within " + describe(timeout_));
  }
}

std::string TorchStore::receive_value(const char* command) {
  const uint64_t length = decode<uint64_t>(receive(sizeof(uint64_t), command));
  if (length > kMaxFrameBytes)
    throw garbled(std::string(command) + " with a value of " + std::to_string(length) + " bytes, over the limit of " +
                  std::to_string(kMaxFrameBytes));
  return receive(size_t(length), command);
}

std::runtime_error TorchStore::garbled(const std::string& answer) {
  broken_ = true;
  return std::runtime_error("store at " + address_ + " answered " + answer + ": not " + kProtocol);
}

uint8_t TorchStore::receive_byte(const char* command) { return uint8_t(receive(1, command)[0]); }

void TorchStore::set(const std::string& key, const std::vector<char>& value) {
  std::string request(1, char(kSet));
  append_bytes(request, prefix_ + key);
  append_bytes(request, std::string(value.begin(), value.end()));
  std::lock_guard<std::mutex> lock(mutex_);
  send(request);
}

std::vector<char> TorchStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!wait_prefixed({prefix_ + key}, timeout))
    throw std::runtime_error("store: key '" + key + "' was not set within " + describe(timeout));
  std::string request(1, char(kGet));
  append_bytes(request, prefix_ + key);
  send(request);
  const std::string value = receive_value("GET");
  return std::vector<char>(value.begin(), value.end());
}

int64_t TorchStore::add(const std::string& key, int64_t delta) {
  std::string request(1, char(kAdd));
  append_bytes(request, prefix_ + key);
  append<int64_t>(request, delta);
  std::lock_guard<std::mutex> lock(mutex_);
  send(request);
  return decode<int64_t>(receive(sizeof(int64_t), "ADD"));
}

std::vector<std::vector<char>> TorchStore::get_all(const std::vector<std::string>& keys) {
  wait(keys);  // MULTI_GET answers a missing key with an empty value
  std::vector<std::string> prefixed;
  for (const std::string& key : keys) prefixed.push_back(prefix_ + key);
  std::lock_guard<std::mutex> lock(mutex_);
  send(keys_request(kMultiGet, prefixed));
  std::vector<std::vector<char>> values;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string value = receive_value("MULTI_GET");
    values.emplace_back(value.begin(), value.end());
  }
  return values;
}

std::string TorchStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  std::string request(1, char(kCompareSet));
  append_bytes(request, prefix_ + key);
  append_bytes(request, expected);
  append_bytes(request, desired);
  std::lock_guard<std::mutex> lock(mutex_);
  send(request);
  return receive_value("COMPARE_SET");
}

void TorchStore::set_prefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(mutex_);
  prefix_ = "/" + prefix;
}

std::vector<std::string> TorchStore::wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> prefixed;
  for (const std::string& key : keys) prefixed.push_back(prefix_ + key);
  std::lock_guard<std::mutex> lock(mutex_);
  if (wait_prefixed(prefixed, timeout)) return {};
  // The store says only whether all are there: ask for each key which it is.
  std::vector<std::string> missing;
  for (size_t i = 0; i < keys.size(); ++i)
    if (!check_prefixed({prefixed[i]})) missing.push_back(keys[i]);
  return missing;
}

bool TorchStore::wait_prefixed(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  send(keys_request(kWait, keys));
  try {
    const std::string reply =
        receive_exact(socket_, 1, deadline_after(Clock::now(), timeout), "the store at " + address_);
    if (uint8_t(reply[0]) != kStopWaiting) throw garbled("WAIT with " + hex(reply));
    return true;
  } catch (const ConnectionClosed&) {
    broken_ = true;
    throw ConnectionClosed("store at " + address_ +
                           ": the connection closed during a wait (did torchrun's agent exit?)");
  } catch (const NoReply&) {
  }
  // The time is up. The wait may have ended meanwhile: then its answer comes before the cancel's.
  send(std::string(1, char(kCancelWait)));
  uint8_t answer = receive_byte("CANCEL_WAIT");
  const bool ended = answer == kStopWaiting;
  if (ended) answer = receive_byte("CANCEL_WAIT");
  if (answer != kWaitCanceled) throw garbled("CANCEL_WAIT with " + hex(std::string(1, char(answer))));
  return ended;
}

bool TorchStore::check_prefixed(const std::vector<std::string>& keys) {
  send(keys_request(kCheck, keys));
  const uint8_t answer = receive_byte("CHECK");
  if (answer != kReady && answer != kNotReady) throw garbled("CHECK with " + hex(std::string(1, char(answer))));
  return answer == kReady;
}

}  // namespace cutrain
