#include "dist/launch/store_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <vector>

#include "dist/launch/socket.h"
#include "dist/launch/store_state.h"

namespace cutrain {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
// A join is a few dozen bytes: a connection that has not joined may not send more than this.
constexpr size_t kMaxBytesBeforeJoin = 4096;
constexpr int kAcceptsPerWake = 64;
// Out of file descriptors: stop accepting for this long rather than spin on a listener that
// stays readable.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

struct Connection {
  int fd = -1;
  std::string peer;  // the client's IP address, without its port
  Clock::time_point accepted;
  std::string input;  // the next request's bytes, as they have arrived
  Clock::time_point input_since;
  std::string output;  // reply bytes the socket has not taken yet
  Clock::time_point output_since;
  bool parked = false;  // its get or wait waits in StoreState
  bool closed = false;

  // One request at a time: read on only when the last one is answered and its reply sent.
  bool wants_input() const { return !closed && !parked && output.empty(); }
};

// serve()'s state: the listener, the connections (by id, so oldest first) and the store.
class ServeLoop {
 public:
  ServeLoop(int listen_socket, const std::string& run_id, int world_size, int64_t restart_count,
            const StoreLimits& limits)
      : listen_socket_(listen_socket),
        state_(run_id, world_size, restart_count),
        limits_(limits),
        max_connections_(size_t(world_size) + size_t(std::max(limits.spare_connections, 1))),
        max_unjoined_per_address_(size_t(world_size)) {}

  // Serves until `stop_fd` is readable.
  void run(int stop_fd) {
    for (;;) {
      // Slot 0: the stop pipe; slot 1: new connections; then one per client, in id order.
      const Clock::time_point now = Clock::now();
      const bool accepting = now >= accept_paused_until_;
      std::vector<pollfd> polled{{stop_fd, POLLIN, 0}, {listen_socket_, short(accepting ? POLLIN : 0), 0}};
      std::vector<int64_t> ids;
      for (const auto& [id, c] : connections_) {
        // POLLRDHUP: a client that went away is noticed even while its request is parked.
        short events = short(POLLRDHUP | (c.wants_input() ? POLLIN : 0) | (c.output.empty() ? 0 : POLLOUT));
        polled.push_back({c.fd, events, 0});
        ids.push_back(id);
      }
      if (::poll(polled.data(), polled.size(), poll_timeout(now)) < 0 && errno != EINTR) std::perror("store: poll");
      if (polled[0].revents != 0) break;

      if (polled[1].revents & POLLIN) accept_new();
      for (size_t i = 0; i < ids.size(); ++i) {
        const short revents = polled[i + 2].revents;
        auto it = connections_.find(ids[i]);  // accept_new() may have closed it to make room
        if (revents == 0 || it == connections_.end()) continue;
        Connection& c = it->second;
        if (revents & (POLLRDHUP | POLLHUP | POLLERR)) {
          close(ids[i], c);  // our clients never half-close: the client is gone
          continue;
        }
        if (revents & POLLOUT) flush(c);
        if (revents & POLLIN) receive(ids[i], c);
        serve_requests(ids[i], c);
      }
      for (auto& [id, reply] : state_.due_replies(Clock::now())) {
        Connection& c = connections_.at(id);
        c.parked = false;
        send(c, reply);
        serve_requests(id, c);  // a request that came in behind the parked one
      }
      enforce_time_limits(Clock::now());
      remove_closed();
    }
    shut_down();
  }

 private:
  void accept_new() {
    for (int i = 0; i < kAcceptsPerWake; ++i) {
      sockaddr_storage from{};
      socklen_t length = sizeof from;
      int fd = ::accept4(listen_socket_, reinterpret_cast<sockaddr*>(&from), &length, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
          accept_paused_until_ = Clock::now() + kAcceptPause;
        return;
      }
      Connection c;
      c.fd = fd;
      c.accepted = Clock::now();
      char host[NI_MAXHOST] = "";
      ::getnameinfo(reinterpret_cast<sockaddr*>(&from), length, host, sizeof host, nullptr, 0, NI_NUMERICHOST);
      c.peer = host;
      if (!make_room_for(c.peer)) {
        ::close(fd);
        continue;
      }
      connections_.emplace(next_id_++, std::move(c));
    }
  }

  // Note [Room for ranks]
  // ~~~~~~~~~~~~~~~~~~~~~
  // A stranger who can reach the store but lacks the run id must not be able
  // to keep a rank from joining. Joined connections are never closed to make room, and before
  // anyone is chosen, every join that has arrived is read, so a rank whose join is in the socket
  // counts as joined. Unjoined connections are bounded per source address (world size: no node
  // starts more ranks than that), and a newcomer from an address at its bound takes the place of
  // that address's oldest unjoined connection: a flood from one address displaces only itself.
  // When the store is full, the oldest unjoined connection of the address with the most makes room.
  // A rank that is dropped all the same before its join is answered connects again (dist/launch/store.h).
  //
  // Whether a connection from `peer` may be kept; it may close another to make room for it.
  bool make_room_for(const std::string& peer) {
    if (unjoined_from(peer) < max_unjoined_per_address_ && connections_.size() < max_connections_) return true;
    read_arrived_joins();
    const bool address_full = unjoined_from(peer) >= max_unjoined_per_address_;
    if (!address_full && connections_.size() < max_connections_) return true;
    std::map<std::string, size_t> unjoined;  // per address
    for (const auto& [id, c] : connections_)
      if (!state_.joined(id)) ++unjoined[c.peer];
    if (unjoined.empty()) return false;
    const std::string crowded =
        address_full ? peer : std::max_element(unjoined.begin(), unjoined.end(), [](const auto& a, const auto& b) {
                                return a.second < b.second;
                              })->first;
    for (auto& [id, c] : connections_) {  // oldest first
      if (!state_.joined(id) && c.peer == crowded) {
        close(id, c);
        remove_closed();
        return true;
      }
    }
    return false;
  }

  size_t unjoined_from(const std::string& peer) const {
    return size_t(std::count_if(connections_.begin(), connections_.end(), [&](const auto& entry) {
      return entry.second.peer == peer && !state_.joined(entry.first);
    }));
  }

  // Serves what the unjoined connections have sent so far (their joins, mostly); never waits.
  void read_arrived_joins() {
    for (auto& [id, c] : connections_) {
      if (state_.joined(id)) continue;
      receive(id, c);
      serve_requests(id, c);
    }
    remove_closed();
  }

  void receive(int64_t id, Connection& c) {
    if (!c.wants_input()) return;
    char chunk[kReadChunk];
    ssize_t n = ::recv(c.fd, chunk, sizeof chunk, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      c.closed = true;  // the client is gone (or its socket failed)
      return;
    }
    if (c.input.empty()) c.input_since = Clock::now();
    c.input.append(chunk, size_t(n));
    if (!state_.joined(id) && c.input.size() > kMaxBytesBeforeJoin) {
      send(c, {"error", "too many bytes before a join"});
      close(id, c);
    }
  }

  // Answers the requests waiting in the connection's input, one at a time (see wants_input()).
  void serve_requests(int64_t id, Connection& c) {
    while (c.wants_input()) {
      StoreState::Outcome outcome;
      try {
        std::optional<Fields> frame = pop_frame(c.input);
        if (!frame) break;
        if (!c.input.empty()) c.input_since = Clock::now();  // the next request began already
        outcome = state_.handle(id, parse_request(*frame), Clock::now());
      } catch (const ProtocolError& e) {
        outcome = {Fields{"error", e.what()}, true};
      }
      if (!outcome.reply) {
        c.parked = true;
        break;
      }
      send(c, *outcome.reply);
      if (outcome.drop) close(id, c);
      if (outcome.group_over) end_the_group(*outcome.group_over);
    }
  }

  // Note [A newer group ends an older one]: the "retry" has gone out as far as the socket takes it,
  // and the rank that joined connects again in any case. This process is rank 0 of a group that is
  // over, wherever its other threads wait, so it ends now, and its cutrun restarts the node's ranks.
  [[noreturn]] static void end_the_group(const std::string& why) {
    std::fprintf(stderr, "cutrain: %s\n", why.c_str());
    std::fflush(stderr);
    std::_Exit(1);
  }

  // Queues a reply and sends what the socket takes now.
  void send(Connection& c, const Fields& reply) {
    if (c.closed) return;
    if (c.output.empty()) c.output_since = Clock::now();
    try {
      c.output += encode_frame(reply);
    } catch (const ProtocolError&) {
      c.output += encode_frame({"error", "the reply would be over the message limit"});
    }
    flush(c);
  }

  void flush(Connection& c) {
    while (!c.output.empty()) {
      ssize_t n = ::send(c.fd, c.output.data(), c.output.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {
        c.closed = true;
        c.output.clear();
        return;
      }
      c.output.erase(0, size_t(n));
    }
  }

  void close(int64_t id, Connection& c) {
    state_.forget(id);
    c.closed = true;
  }

  // A connection that is too slow to join, to send a whole request or to take its reply is closed.
  Clock::time_point deadline(int64_t id, const Connection& c) const {
    Clock::time_point at = Clock::time_point::max();
    if (!state_.joined(id)) at = std::min(at, c.accepted + limits_.join_within);
    if (!c.input.empty() && !c.parked) at = std::min(at, c.input_since + limits_.request_within);
    if (!c.output.empty()) at = std::min(at, c.output_since + limits_.reply_within);
    return at;
  }

  void enforce_time_limits(Clock::time_point now) {
    for (auto& [id, c] : connections_)
      if (!c.closed && now >= deadline(id, c)) close(id, c);
  }

  void remove_closed() {
    std::erase_if(connections_, [this](auto& entry) {
      auto& [id, c] = entry;
      if (!c.closed) return false;
      state_.forget(id);
      ::close(c.fd);
      return true;
    });
  }

  // Milliseconds until the next deadline (a parked request's, a time limit, the end of an accept
  // pause), or -1, poll's "forever".
  int poll_timeout(Clock::time_point now) const {
    Clock::time_point next = state_.next_deadline().value_or(Clock::time_point::max());
    for (const auto& [id, c] : connections_) next = std::min(next, deadline(id, c));
    if (now < accept_paused_until_) next = std::min(next, accept_paused_until_);
    if (next == Clock::time_point::max()) return -1;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
    return int(std::clamp<long long>(ms, 0, INT_MAX));
  }

  // Parked requests hear "closed", as far as their sockets take it now; then every connection is
  // shut down, so no client can keep the server (and rank 0's exit) waiting.
  void shut_down() {
    for (auto& [id, reply] : state_.close_replies()) send(connections_.at(id), reply);
    for (auto& [id, c] : connections_) {
      ::shutdown(c.fd, SHUT_RDWR);
      ::close(c.fd);
    }
    connections_.clear();
  }

  int listen_socket_;
  StoreState state_;
  StoreLimits limits_;
  size_t max_connections_;
  size_t max_unjoined_per_address_;
  std::map<int64_t, Connection> connections_;
  int64_t next_id_ = 0;
  Clock::time_point accept_paused_until_;
};

}  // namespace

StoreServer::StoreServer(const std::string& host, int port, std::string run_id, int world_size, int64_t restart_count,
                         StoreLimits limits)
    : run_id_(std::move(run_id)), world_size_(world_size), restart_count_(restart_count), limits_(limits) {
  listen_socket_ = listen_tcp(host, port);
  port_ = socket_port(listen_socket_);
  if (::fcntl(listen_socket_, F_SETFL, O_NONBLOCK) != 0 || ::pipe2(stop_pipe_, O_CLOEXEC) != 0) {
    ::close(listen_socket_);
    throw std::runtime_error("store: setting up the server failed");
  }
  thread_ = std::thread([this] { serve(); });
}

StoreServer::~StoreServer() {
  char byte = 0;
  if (::write(stop_pipe_[1], &byte, 1) != 1) std::perror("store: stopping the server");
  thread_.join();
  ::close(stop_pipe_[0]);
  ::close(stop_pipe_[1]);
  ::close(listen_socket_);
}

bool StoreServer::on_loopback() const { return listens_on_loopback(listen_socket_); }

void StoreServer::serve() {
  ServeLoop(listen_socket_, run_id_, world_size_, restart_count_, limits_).run(stop_pipe_[0]);
}

}  // namespace cutrain
