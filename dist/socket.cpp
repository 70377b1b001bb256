#include "dist/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>

namespace cutrain {
namespace {

// One connection attempt waits at most this long for an answer before the next one starts.
constexpr auto kAttemptLimit = std::chrono::seconds(5);

// The reason given for an attempt that heard nothing back.
constexpr const char* kNoAnswer = "no answer";

// Frames larger than this are not ours (the largest value we store is a few KiB).
constexpr uint32_t kMaxFrameBytes = 64u << 20;

std::runtime_error system_error(const std::string& what) {
  return std::runtime_error(what + ": " + std::strerror(errno));
}

void put_u32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(char((value >> (8 * i)) & 0xff));
}

uint32_t get_u32(const std::string& in, size_t at) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= uint32_t(uint8_t(in[at + i])) << (8 * i);
  return value;
}

int milliseconds_until(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::clamp<long long>(left, 0, 1 << 30));
}

using AddressList = std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)>;

// The addresses of host:port (MASTER_ADDR's), or a one-line error naming the host.
AddressList resolve(const std::string& host, int port, int family, int socket_type) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = socket_type;
  addrinfo* found = nullptr;
  int status = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (status != 0) throw std::runtime_error("MASTER_ADDR " + host + ": " + ::gai_strerror(status));
  return AddressList(found, ::freeaddrinfo);
}

// One connection attempt, abandoned at `give_up`: a blocking connected socket, or -1 with the
// reason in `error`. Without a limit, a host that never answers holds connect() for minutes.
int try_connect(const addrinfo& address, Clock::time_point give_up, std::string& error) {
  int fd = ::socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, address.ai_protocol);
  if (fd < 0) {
    error = std::strerror(errno);
    return -1;
  }
  int status = ::connect(fd, address.ai_addr, address.ai_addrlen) == 0 ? 0 : errno;
  if (status == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int ready = 0;
    do {
      ready = ::poll(&p, 1, milliseconds_until(give_up));
    } while (ready < 0 && errno == EINTR);
    socklen_t length = sizeof status;
    if (ready <= 0)
      status = ETIMEDOUT;
    else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &status, &length) != 0)
      status = errno;
  }
  if (status != 0) {
    error = status == ETIMEDOUT ? kNoAnswer : std::strerror(status);
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // the store's calls block, with deadlines of their own
  return fd;
}

}  // namespace

int listen_tcp(const std::string& host, int port, bool loopback_only) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw system_error("socket");
  int one = 1;
  // Lets a new job reuse a port whose last connections are still in TIME_WAIT; a port some
  // process listens on stays refused.
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(uint16_t(port));
  address.sin_addr.s_addr = htonl(loopback_only ? INADDR_LOOPBACK : INADDR_ANY);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    int error = errno;
    ::close(fd);
    if (error == EADDRINUSE)
      throw std::runtime_error(
          "MASTER_PORT " + std::to_string(port) + " on " + host +
          " is in use (another job?): choose another with --master-port, or use cutrun --standalone");
    errno = error;
    throw system_error("binding MASTER_PORT " + std::to_string(port) + " on " + host);
  }
  if (::listen(fd, 128) != 0) {
    ::close(fd);
    throw system_error("listen on port " + std::to_string(port));
  }
  return fd;
}

int socket_port(int fd) {
  sockaddr_in address{};
  socklen_t length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) throw system_error("getsockname");
  return ntohs(address.sin_port);
}

int connect_tcp(const std::string& host, int port, std::chrono::milliseconds timeout, const ConnectRetry& on_retry) {
  AddressList addresses = resolve(host, port, AF_UNSPEC, SOCK_STREAM);
  const auto deadline = Clock::now() + timeout;

  // Rank 0 may not listen yet: retry, backing off from 10 ms to 1 s, until the deadline.
  auto backoff = std::chrono::milliseconds(10);
  std::string last_error;
  for (;;) {
    for (addrinfo* a = addresses.get(); a != nullptr && Clock::now() < deadline; a = a->ai_next) {
      std::string error;
      int fd = try_connect(*a, std::min(deadline, Clock::now() + kAttemptLimit), error);
      if (fd >= 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return fd;
      }
      // An attempt cut short by the deadline says less than the reason already known.
      if (last_error.empty() || error != kNoAnswer) last_error = error;
    }
    if (Clock::now() >= deadline)
      throw std::runtime_error("could not reach the store of rank 0 at " + host + ":" + std::to_string(port) +
                               " within " + describe(timeout) + " (" + last_error +
                               "): is MASTER_ADDR rank 0's address, and did rank 0 start?");
    if (on_retry) on_retry(last_error);
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

std::string local_address_toward(const std::string& host, int port) {
  AddressList address = resolve(host, port, AF_INET, SOCK_DGRAM);
  // Connecting a UDP socket only picks the route; getsockname then tells its local end.
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw system_error("socket");
  sockaddr_in local{};
  socklen_t length = sizeof local;
  bool ok = ::connect(fd, address->ai_addr, address->ai_addrlen) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  ::close(fd);
  if (!ok) throw system_error("finding the interface that reaches MASTER_ADDR " + host);
  char text[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text);
  return text;
}

std::string encode_frame(const Fields& fields) {
  std::string body;
  for (const std::string& field : fields) {
    put_u32(body, uint32_t(field.size()));
    body += field;
  }
  std::string frame;
  put_u32(frame, uint32_t(body.size()));
  return frame + body;
}

std::optional<Fields> pop_frame(std::string& buffer) {
  if (buffer.size() < 4) return std::nullopt;
  uint32_t length = get_u32(buffer, 0);
  if (length > kMaxFrameBytes)
    throw std::runtime_error("store: a message of " + std::to_string(length) + " bytes is not a store message");
  if (buffer.size() < 4 + size_t(length)) return std::nullopt;
  Fields fields;
  size_t at = 4, end = 4 + size_t(length);
  while (at < end) {
    if (end - at < 4) throw std::runtime_error("store: malformed message (truncated field length)");
    uint32_t field_length = get_u32(buffer, at);
    at += 4;
    if (field_length > end - at) throw std::runtime_error("store: malformed message (field overruns it)");
    fields.push_back(buffer.substr(at, field_length));
    at += field_length;
  }
  buffer.erase(0, end);
  return fields;
}

void send_all(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw system_error("store: send");
    sent += size_t(n);
  }
}

Fields receive_frame(int fd, Clock::time_point deadline, const std::string& peer) {
  std::string buffer;
  for (;;) {
    if (auto fields = pop_frame(buffer)) return *fields;
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, milliseconds_until(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) throw system_error("store: poll");
    if (ready == 0) throw std::runtime_error("store: no reply from " + peer + " in time");
    char chunk[4096];
    ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("store: connection to " + peer + " closed (did rank 0 exit?)");
    buffer.append(chunk, size_t(n));
  }
}

std::string describe(std::chrono::milliseconds duration) {
  auto ms = duration.count();
  if (ms < 1000) return std::to_string(ms) + " ms";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", double(ms) / 1000);
  return text;
}

}  // namespace cutrain
