#include "dist/launch/store.h"

#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "dist/launch/socket.h"
#include "dist/launch/store_protocol.h"
#include "dist/launch/store_server.h"

namespace cutrain {
namespace {

// A get or wait is answered by the server at its deadline; the client allows this much more for
// the reply to arrive before it calls the server lost.
constexpr auto kReplyGrace = std::chrono::seconds(10);
// A join tried again near the deadline still gets this long to connect.
constexpr auto kShortestRetry = std::chrono::milliseconds(100);

}  // namespace

TcpStore::TcpStore(const DistEnv& env, std::chrono::milliseconds timeout, const ConnectRetry& on_retry)
    : run_id_(env.run_id), timeout_(timeout) {
  std::string host = env.master_addr;
  int port = env.master_port;
  if (env.world_size == 1) {
    host = "127.0.0.1";
    port = 0;
  }
  if (env.rank == 0) {
    // The store listens where the ranks reach it and nowhere else: at MASTER_ADDR (loopback for one
    // node under cutrun), or where CUTRAIN_STORE_BIND (cutrun --store-bind) says.
    const bool bind_elsewhere = env.world_size > 1 && !env.store_bind.empty();
    server_ = std::make_unique<StoreServer>(bind_elsewhere ? env.store_bind : host, port, run_id_, env.world_size,
                                            env.restart_count);
    if (!bind_elsewhere && env.world_size > env.local_world_size && server_->on_loopback())
      throw std::runtime_error("MASTER_ADDR " + host +
                               " is a loopback address here, which the other nodes cannot reach: give cutrun "
                               "--master-addr an address of this machine on their network (or --store-bind)");
    port = server_->port();
  }
  port_ = port;
  address_ = host_port(host, port);
  join(env, host, on_retry);
}

void TcpStore::join(const DistEnv& env, const std::string& host, const ConnectRetry& on_retry) {
  const Clock::time_point deadline = deadline_after(Clock::now(), timeout_);
  auto backoff = std::chrono::milliseconds(10);
  for (bool first = true;; first = false) {
    if (first) {
      socket_ = connect_tcp(host, port_, timeout_, on_retry);
    } else {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      try {
        socket_ = connect_tcp(host, port_, std::max(left, kShortestRetry), on_retry);
      } catch (const std::runtime_error& e) {
        throw std::runtime_error("store at " + address_ + ": the connection was closed before the join was " +
                                 "answered, and no new one was made within " + describe(timeout_) + ": " + e.what());
      }
    }
    std::string why;  // why the join is tried again
    try {
      const Fields reply =
          request("join", {std::to_string(env.rank), std::to_string(env.world_size), std::to_string(env.restart_count)},
                  timeout_);
      if (reply[0] != "retry") return;
      // The store's group is older than this rank's and ends now (Note [A newer group ends an older
      // one] in dist/launch/store_state.h): the new group's store, at the same address, will take the join.
      why = "the store's group is over (" + (reply.size() > 1 ? reply[1] : std::string("retry")) + ")";
      if (Clock::now() >= deadline)
        throw std::runtime_error("store at " + address_ + ": no newer group took the join within " +
                                 describe(timeout_) + ": " + why);
    } catch (const ConnectionClosed&) {
      // Closed before the join was answered (Note [Room for ranks] in dist/launch/store_server.cpp): the
      // rank has not joined, so it may try again.
      ::close(socket_);
      socket_ = -1;
      if (Clock::now() >= deadline) throw;
      why = "the store closed the connection before answering the join";
    } catch (...) {
      ::close(socket_);  // the destructor will not run
      socket_ = -1;
      throw;
    }
    if (socket_ >= 0) ::close(socket_);
    socket_ = -1;
    if (on_retry) on_retry(why);
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

TcpStore::~TcpStore() {
  if (socket_ >= 0) ::close(socket_);
}

std::vector<std::string> TcpStore::request(const std::string& op, const std::vector<std::string>& args,
                                           std::chrono::milliseconds server_timeout) {
  Fields request{op, run_id_};
  request.insert(request.end(), args.begin(), args.end());
  const std::string frame = encode_frame(request);
  std::lock_guard<std::mutex> lock(mutex_);
  send_all(socket_, frame);
  const Clock::time_point deadline = deadline_after(deadline_after(Clock::now(), server_timeout), kReplyGrace);
  Fields reply = receive_frame(socket_, deadline, "the store at " + address_);
  if (reply.empty()) throw std::runtime_error("store at " + address_ + ": empty reply");
  if (reply[0] == "error")
    throw std::runtime_error("store at " + address_ + ": " + (reply.size() > 1 ? reply[1] : "refused"));
  return reply;
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  request("set", {key, std::string(value.begin(), value.end())}, timeout_);
}

std::vector<char> TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  Fields reply = request("get", {std::to_string(timeout.count()), key}, timeout);
  if (reply[0] == "closed")
    throw std::runtime_error("store: key '" + key + "' was not set before rank 0's store closed");
  if (reply[0] != "ok" || reply.size() != 2)
    throw std::runtime_error("store: key '" + key + "' was not set within " + describe(timeout));
  return std::vector<char>(reply[1].begin(), reply[1].end());
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  Fields reply = request("add", {key, std::to_string(delta)}, timeout_);
  return std::stoll(reply.at(1));
}

std::vector<std::string> TcpStore::wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  Fields args{std::to_string(timeout.count())};
  args.insert(args.end(), keys.begin(), keys.end());
  Fields reply = request("wait", args, timeout);
  return Fields(reply.begin() + 1, reply.end());
}

}  // namespace cutrain
