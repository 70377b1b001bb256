// store_state.h: the store's keys and its rules, with no sockets. Rank 0's server
// (dist/launch/store_server.h) numbers its connections, passes each request in and sends what comes out.
//
// The rules
// - Every request carries the run id. One of another run is refused without naming either id (the
//   run id is the job's secret) and its connection dropped: a leftover process of an earlier job,
//   or a stranger, learns nothing and gets nothing.
// - A connection's first request must be a join with this store's world size and a rank in
//   [0, world size) that has not joined before. Until then nothing else is served.
// - A join also carries the rank's restart count, which must be this store's (Note [A newer group
//   ends an older one]).
// - An add that would overflow, or that meets a value that is not an integer, is refused; the
//   connection stays, since the client is one of ours.
// - A get or wait whose keys are not all there is parked until a set or add completes it or its
//   deadline passes; a timeout too long to add to the clock means "no deadline".
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dist/launch/store_protocol.h"

namespace cutrain {

// Note [A newer group ends an older one]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// On several nodes, each node's cutrun restarts its own
// ranks (Note [Restarts on several nodes] in dist/launch/cutrun.py), and tells each rank how often it has
// (TORCHELASTIC_RESTART_COUNT), which the rank sends in its join. A rank of restart r' that reaches
// the store of a group of restart r < r' shows that a node has restarted its ranks: the group of
// restart r is over, even where its ranks still wait in a collective on a peer that is alive but
// blocked, and would learn it only at their collective timeout. So the store answers "retry" (the
// rank connects again, within its rendezvous timeout) and ends its own process, rank 0's, at once;
// its cutrun then restarts that node's ranks, and their new store, of restart r', takes the waiting
// rank's join. A rank of restart r' < r comes from a group that is over already, and is refused.
// This is how torchrun's agents learn from the rendezvous that a new round has begun.
class StoreState {
 public:
  StoreState(std::string run_id, int world_size, int64_t restart_count)
      : run_id_(std::move(run_id)), world_size_(world_size), restart_count_(restart_count) {}

  struct Outcome {
    std::optional<Fields> reply;  // empty: a get or wait was parked
    bool drop = false;            // the request broke the rules: reply, then close the connection
    // A rank of a newer group joined: this group is over, and the store's process must end with
    // this line (Note [A newer group ends an older one]).
    std::optional<std::string> group_over = std::nullopt;
  };
  Outcome handle(int64_t connection, const Request& request, Clock::time_point now);

  // Replies owed to parked requests: those a set or add has completed, and those whose deadline
  // has passed ("timeout", missing keys...).
  std::vector<std::pair<int64_t, Fields>> due_replies(Clock::time_point now);

  // At shutdown: every parked request hears "closed" with its missing keys, so the other ranks
  // learn what never came (say, a rank that never arrived) instead of just a dropped connection.
  std::vector<std::pair<int64_t, Fields>> close_replies();

  // The connection closed: its parked request goes (its rank stays joined).
  void forget(int64_t connection);

  bool joined(int64_t connection) const { return rank_of_.contains(connection); }
  // The earliest deadline of a parked request, if any.
  std::optional<Clock::time_point> next_deadline() const;

 private:
  // A get or wait parked until its keys exist or its deadline passes.
  struct Waiter {
    int64_t connection = 0;
    std::vector<std::string> keys;
    Clock::time_point deadline;
    bool wants_value = false;  // a get: answer with the value of keys[0]
  };

  Outcome join(int64_t connection, const Request& request);
  Outcome add(const Request& request);
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  Fields answer(const Waiter& w) const;

  std::string run_id_;
  int world_size_;
  int64_t restart_count_;
  std::map<std::string, std::string> data_;
  std::map<int64_t, int> rank_of_;  // joined connections
  std::set<int> joined_ranks_;
  std::vector<Waiter> waiters_;
};

}  // namespace cutrain
