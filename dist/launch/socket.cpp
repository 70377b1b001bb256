#include "dist/launch/socket.h"

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

std::runtime_error system_error(const std::string& what) {
  return std::runtime_error(what + ": " + std::strerror(errno));
}

// Rounded up, so that a poll() for it never ends before the deadline: a wait that the caller
// times (dist/launch/rendezvous.cpp) must not look cut short.
int milliseconds_until(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::clamp<long long>(left, 0, 1 << 30));
}

using AddressList = std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)>;

// The addresses of host:port (MASTER_ADDR's), or a one-line error naming the host.
AddressList resolve(const std::string& host, int port, int family, int socket_type, int flags = 0) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = socket_type;
  hints.ai_flags = flags | AI_NUMERICSERV;
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

int listen_tcp(const std::string& host, int port) {
  AddressList addresses = resolve(host, port, AF_UNSPEC, SOCK_STREAM, AI_PASSIVE);
  int error = EADDRNOTAVAIL;
  for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = errno;
      continue;
    }
    int one = 1;
    // Lets a new job reuse a port whose last connections are still in TIME_WAIT; a port some
    // process listens on stays refused.
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) return fd;
    error = errno;
    ::close(fd);
  }
  if (error == EADDRINUSE)
    throw std::runtime_error(
        "MASTER_PORT " + std::to_string(port) + " on " + host +
        " is in use (another job?): choose another with --master-port, or use cutrun --standalone");
  if (error == EADDRNOTAVAIL)
    throw std::runtime_error("the store cannot listen on " + host +
                             ": it is not an address of this machine (rank 0 serves the store at MASTER_ADDR, "
                             "or at cutrun --store-bind)");
  errno = error;
  throw system_error("listening on " + host_port(host, port));
}

int socket_port(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) throw system_error("getsockname");
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
}

bool listens_on_loopback(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) throw system_error("getsockname");
  if (address.ss_family == AF_INET6) {
    const in6_addr& ip = reinterpret_cast<sockaddr_in6*>(&address)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&ip)) return true;
    return IN6_IS_ADDR_V4MAPPED(&ip) && ip.s6_addr[12] == 127;
  }
  return (ntohl(reinterpret_cast<sockaddr_in*>(&address)->sin_addr.s_addr) >> 24) == 127;
}

std::string host_port(const std::string& host, int port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
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
      throw std::runtime_error("could not reach the store of rank 0 at " + host_port(host, port) + " within " +
                               describe(timeout) + " (" + last_error +
                               "): is MASTER_ADDR rank 0's address, and did rank 0 start?");
    if (on_retry) on_retry(last_error);
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

std::string local_address_toward(const std::string& host, int port) {
  AddressList address = resolve(host, port, AF_UNSPEC, SOCK_DGRAM);
  // Connecting a UDP socket only picks the route; getsockname then tells its local end.
  int fd = ::socket(address->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw system_error("socket");
  sockaddr_storage local{};
  socklen_t length = sizeof local;
  bool ok = ::connect(fd, address->ai_addr, address->ai_addrlen) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  ::close(fd);
  if (!ok) throw system_error("finding the interface that reaches MASTER_ADDR " + host);
  char text[INET6_ADDRSTRLEN] = "";
  const void* ip = local.ss_family == AF_INET6
                       ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                       : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
  ::inet_ntop(local.ss_family, ip, text, sizeof text);
  return text;
}

void send_all(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
      throw ConnectionClosed("store: send: " + std::string(std::strerror(errno)));
    if (n <= 0) throw system_error("store: send");
    sent += size_t(n);
  }
}

namespace {

// Receives what has arrived, at most `capacity` bytes, waiting for the first until `deadline`.
// Throws on timeout or a closed connection, naming `peer`.
size_t receive_some(int fd, char* into, size_t capacity, Clock::time_point deadline, const std::string& peer) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, milliseconds_until(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) throw system_error("store: poll");
    if (ready == 0) throw NoReply("store: no reply from " + peer + " in time");
    ssize_t n = ::recv(fd, into, capacity, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw ConnectionClosed("store: connection to " + peer + " closed (did rank 0 exit?)");
    return size_t(n);
  }
}

}  // namespace

Fields receive_frame(int fd, Clock::time_point deadline, const std::string& peer) {
  std::string buffer;
  for (;;) {
    if (auto fields = pop_frame(buffer)) return *fields;
    char chunk[4096];
    buffer.append(chunk, receive_some(fd, chunk, sizeof chunk, deadline, peer));
  }
}

std::string receive_exact(int fd, size_t count, Clock::time_point deadline, const std::string& peer) {
  std::string bytes(count, '\0');
  for (size_t got = 0; got < count;) got += receive_some(fd, bytes.data() + got, count - got, deadline, peer);
  return bytes;
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
