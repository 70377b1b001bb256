#include "dist/launch/store_state.h"

#include <algorithm>

namespace cutrain {
namespace {

StoreState::Outcome refuse(const std::string& why, bool drop) { return {Fields{"error", why}, drop}; }

}  // namespace

StoreState::Outcome StoreState::handle(int64_t connection, const Request& request, Clock::time_point now) {
  if (request.run_id != run_id_)
    return refuse("this store belongs to another run (another job on the same MASTER_PORT?)", true);
  if (request.op == Request::Op::join) return join(connection, request);
  if (!joined(connection)) return refuse("a connection must join before anything else", true);
  if (request.op == Request::Op::set) {
    data_[request.keys[0]] = request.value;
    return {Fields{"ok"}};
  }
  if (request.op == Request::Op::add) return add(request);
  // A get or a wait.
  Waiter waiter{connection, request.keys, deadline_after(now, request.timeout), request.op == Request::Op::get};
  if (missing(waiter.keys).empty()) return {answer(waiter)};
  waiters_.push_back(std::move(waiter));
  return {};
}

StoreState::Outcome StoreState::join(int64_t connection, const Request& request) {
  if (joined(connection)) return refuse("this connection has joined already", true);
  const std::string rank = std::to_string(request.rank);
  if (request.world_size != world_size_)
    return refuse("rank " + rank + " has WORLD_SIZE=" + std::to_string(request.world_size) +
                      " but rank 0 has WORLD_SIZE=" + std::to_string(world_size_),
                  true);
  if (request.rank < 0 || request.rank >= world_size_)
    return refuse("RANK=" + rank + " is outside WORLD_SIZE=" + std::to_string(world_size_), true);
  // Note [A newer group ends an older one].
  const std::string theirs = std::to_string(request.restart_count);
  const std::string ours = std::to_string(restart_count_);
  if (request.restart_count < restart_count_)
    return refuse("rank " + rank + " joined from restart " + theirs + " while this group runs restart " + ours +
                      ": it belongs to an older group, which is over",
                  true);
  if (request.restart_count > restart_count_) {
    const std::string why = "rank " + rank + " joined from restart " + theirs + " while this group runs restart " +
                            ours + ": a node restarted its ranks, so this group is over";
    return {Fields{"retry", why}, true, why};
  }
  if (!joined_ranks_.insert(int(request.rank)).second) return refuse("rank " + rank + " joined twice", true);
  rank_of_[connection] = int(request.rank);
  return {Fields{"ok"}};
}

StoreState::Outcome StoreState::add(const Request& request) {
  const std::string& key = request.keys[0];
  int64_t value = 0;
  if (auto it = data_.find(key); it != data_.end()) {
    std::optional<int64_t> current = parse_decimal(it->second);
    if (!current) return refuse("add: the value of '" + key + "' is not an integer", false);
    value = *current;
  }
  if (__builtin_add_overflow(value, request.delta, &value))
    return refuse("add: '" + key + "' would overflow a 64-bit integer", false);
  data_[key] = std::to_string(value);
  return {Fields{"ok", std::to_string(value)}};
}

std::vector<std::pair<int64_t, Fields>> StoreState::due_replies(Clock::time_point now) {
  std::vector<std::pair<int64_t, Fields>> replies;
  std::erase_if(waiters_, [&](const Waiter& w) {
    std::vector<std::string> absent = missing(w.keys);
    if (absent.empty()) {
      replies.emplace_back(w.connection, answer(w));
      return true;
    }
    if (now >= w.deadline) {
      absent.insert(absent.begin(), "timeout");
      replies.emplace_back(w.connection, absent);
      return true;
    }
    return false;
  });
  return replies;
}

std::vector<std::pair<int64_t, Fields>> StoreState::close_replies() {
  std::vector<std::pair<int64_t, Fields>> replies;
  for (const Waiter& w : waiters_) {
    Fields fields = missing(w.keys);
    fields.insert(fields.begin(), "closed");
    replies.emplace_back(w.connection, fields);
  }
  waiters_.clear();
  return replies;
}

void StoreState::forget(int64_t connection) {
  std::erase_if(waiters_, [connection](const Waiter& w) { return w.connection == connection; });
  rank_of_.erase(connection);
}

std::optional<Clock::time_point> StoreState::next_deadline() const {
  if (waiters_.empty()) return std::nullopt;
  return std::min_element(waiters_.begin(), waiters_.end(),
                          [](const Waiter& a, const Waiter& b) { return a.deadline < b.deadline; })
      ->deadline;
}

std::vector<std::string> StoreState::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> absent;
  for (const std::string& key : keys)
    if (!data_.contains(key)) absent.push_back(key);
  return absent;
}

Fields StoreState::answer(const Waiter& w) const {
  return w.wants_value ? Fields{"ok", data_.at(w.keys[0])} : Fields{"ok"};
}

}  // namespace cutrain
