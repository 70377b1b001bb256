#include "dist/store_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

#include "dist/socket.h"

namespace cutrain {
namespace {

struct Connection {
  int fd = -1;
  std::string input;  // bytes received, not yet a whole frame
};

// A get or wait parked until its keys exist or its deadline passes.
struct Waiter {
  int fd = -1;
  std::vector<std::string> keys;
  Clock::time_point deadline;
  bool wants_value = false;  // a get: answer with the value of keys[0]
};

int64_t parse_int(const std::string& text, const char* what) {
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size())
    throw std::invalid_argument(std::string("malformed request: ") + what + " '" + text + "' is not an integer");
  return value;
}

// The store's data and the rules of each op; serve() does the sockets.
class StoreState {
 public:
  StoreState(std::string run_id, int world_size) : run_id_(std::move(run_id)), world_size_(world_size) {}

  // Handles one request from `fd`: returns the reply, or nothing when the request was parked.
  std::optional<Fields> handle(int fd, const Fields& request) {
    if (request.size() < 2) return Fields{"error", "malformed request"};
    const std::string& op = request[0];
    if (request[1] != run_id_)
      return Fields{"error", "this store belongs to run '" + run_id_ + "', not to run '" + request[1] +
                                 "' (another job on the same MASTER_PORT?)"};
    Fields args(request.begin() + 2, request.end());
    if (op == "join" && args.size() == 2)
      return join(int(parse_int(args[0], "rank")), int(parse_int(args[1], "world size")));
    if (op == "set" && args.size() == 2) {
      data_[args[0]] = args[1];
      return Fields{"ok"};
    }
    if (op == "add" && args.size() == 2) {
      auto it = data_.find(args[0]);
      int64_t value = (it == data_.end() ? 0 : parse_int(it->second, "counter")) + parse_int(args[1], "delta");
      data_[args[0]] = std::to_string(value);
      return Fields{"ok", std::to_string(value)};
    }
    if ((op == "get" && args.size() == 2) || (op == "wait" && args.size() >= 2)) {
      auto timeout = std::chrono::milliseconds(parse_int(args[0], "timeout"));
      Waiter waiter{fd, Fields(args.begin() + 1, args.end()), Clock::now() + timeout, op == "get"};
      if (missing(waiter.keys).empty()) return answer(waiter);
      waiters_.push_back(std::move(waiter));
      return std::nullopt;
    }
    return Fields{"error", "malformed request '" + op + "'"};
  }

  // Replies owed after a set or add (waiters now complete) or at a deadline (waiters timed out).
  std::vector<std::pair<int, Fields>> due_replies(Clock::time_point now) {
    std::vector<std::pair<int, Fields>> replies;
    std::erase_if(waiters_, [&](const Waiter& w) {
      std::vector<std::string> absent = missing(w.keys);
      if (absent.empty()) {
        replies.emplace_back(w.fd, answer(w));
        return true;
      }
      if (now >= w.deadline) {
        absent.insert(absent.begin(), "timeout");
        replies.emplace_back(w.fd, absent);
        return true;
      }
      return false;
    });
    return replies;
  }

  // At shutdown: every parked waiter hears "closed" with its missing keys, so the other ranks learn
  // what never came (say, a rank that never arrived) instead of just a dropped connection.
  std::vector<std::pair<int, Fields>> close_replies() {
    std::vector<std::pair<int, Fields>> replies;
    for (const Waiter& w : waiters_) {
      Fields fields = missing(w.keys);
      fields.insert(fields.begin(), "closed");
      replies.emplace_back(w.fd, fields);
    }
    waiters_.clear();
    return replies;
  }

  void forget(int fd) {
    std::erase_if(waiters_, [fd](const Waiter& w) { return w.fd == fd; });
  }

  // Milliseconds until the next waiter's deadline, or -1 (poll's "forever") when none waits.
  int poll_timeout(Clock::time_point now) const {
    if (waiters_.empty()) return -1;
    auto next = std::min_element(waiters_.begin(), waiters_.end(), [](const Waiter& a, const Waiter& b) {
                  return a.deadline < b.deadline;
                })->deadline;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
    return int(std::clamp<long long>(ms, 0, INT_MAX));
  }

 private:
  Fields join(int rank, int world_size) {
    if (world_size != world_size_)
      return {"error", "rank " + std::to_string(rank) + " has WORLD_SIZE=" + std::to_string(world_size) +
                           " but rank 0 has WORLD_SIZE=" + std::to_string(world_size_)};
    if (rank < 0 || rank >= world_size_)
      return {"error", "RANK=" + std::to_string(rank) + " is outside WORLD_SIZE=" + std::to_string(world_size_)};
    if (!joined_.insert(rank).second) return {"error", "rank " + std::to_string(rank) + " joined twice"};
    return {"ok"};
  }

  std::vector<std::string> missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> absent;
    for (const std::string& key : keys)
      if (!data_.contains(key)) absent.push_back(key);
    return absent;
  }

  Fields answer(const Waiter& w) const { return w.wants_value ? Fields{"ok", data_.at(w.keys[0])} : Fields{"ok"}; }

  std::string run_id_;
  int world_size_;
  std::map<std::string, std::string> data_;
  std::set<int> joined_;
  std::vector<Waiter> waiters_;
};

void reply(int fd, const Fields& fields) {
  try {
    send_all(fd, encode_frame(fields));
  } catch (const std::exception&) {
    // The client went away; its connection is dropped when poll reports the hang-up.
  }
}

}  // namespace

StoreServer::StoreServer(const std::string& host, int port, bool loopback_only, std::string run_id, int world_size)
    : run_id_(std::move(run_id)), world_size_(world_size) {
  listen_socket_ = listen_tcp(host, port, loopback_only);
  port_ = socket_port(listen_socket_);
  if (::pipe2(stop_pipe_, O_CLOEXEC) != 0) {
    ::close(listen_socket_);
    throw std::runtime_error("store: pipe failed");
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

void StoreServer::serve() {
  StoreState state(run_id_, world_size_);
  std::vector<Connection> connections;
  for (;;) {
    // Slot 0: the stop pipe; slot 1: new connections; then one per client.
    std::vector<pollfd> polled{{stop_pipe_[0], POLLIN, 0}, {listen_socket_, POLLIN, 0}};
    for (const Connection& c : connections) polled.push_back({c.fd, POLLIN, 0});
    int ready = ::poll(polled.data(), polled.size(), state.poll_timeout(Clock::now()));
    if (ready < 0 && errno != EINTR) std::perror("store: poll");
    if (polled[0].revents != 0) break;

    if (polled[1].revents & POLLIN) {
      int fd = ::accept4(listen_socket_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) connections.push_back({fd, ""});
    }
    for (size_t i = 2; i < polled.size(); ++i) {
      if (polled[i].revents == 0) continue;
      Connection& c = connections[i - 2];
      char chunk[65536];
      ssize_t n = ::recv(c.fd, chunk, sizeof chunk, 0);
      bool open = n > 0 || (n < 0 && errno == EINTR);
      if (n > 0) c.input.append(chunk, size_t(n));
      try {
        while (auto request = pop_frame(c.input))
          if (auto answer = state.handle(c.fd, *request)) reply(c.fd, *answer);
      } catch (const std::exception& e) {
        reply(c.fd, {"error", e.what()});
        open = false;
      }
      if (!open) {
        state.forget(c.fd);
        ::close(c.fd);
        c.fd = -1;
      }
    }
    std::erase_if(connections, [](const Connection& c) { return c.fd < 0; });
    for (auto& [fd, fields] : state.due_replies(Clock::now())) reply(fd, fields);
  }
  for (auto& [fd, fields] : state.close_replies()) reply(fd, fields);
  for (const Connection& c : connections) ::close(c.fd);
}

}  // namespace cutrain
