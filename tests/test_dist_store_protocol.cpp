// The store's messages and rules as pure functions (dist/launch/store_protocol.h, dist/launch/store_state.h):
// frames cut at every byte, lengths and numbers that cannot be ours, the join-first rule, an add
// that would overflow, a timeout too long for the clock. No sockets here: test_dist_store_server.cpp
// has the same cases against a live server.
#include <catch2/catch.hpp>

#include "dist/launch/store_protocol.h"
#include "dist/launch/store_state.h"
#include "tests/network.h"

using cutrain::Fields;
using cutrain::kMaxFrameBytes;
using cutrain::parse_request;
using cutrain::pop_frame;
using cutrain::ProtocolError;
using cutrain::Request;
using cutrain::StoreState;
using Clock = std::chrono::steady_clock;

namespace {

using cutrain::test::u32;

Request request(const Fields& fields) { return parse_request(fields); }

}  // namespace

TEST_CASE("a frame comes out whole however its bytes arrive, and only once complete", "[dist]") {
  const Fields fields{"set", "run", "key", std::string("\0binary\xff", 8), ""};
  const std::string bytes = cutrain::encode_frame(fields) + cutrain::encode_frame({"next"});
  std::string buffer;
  size_t complete_at = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    buffer.push_back(bytes[i]);
    if (auto frame = pop_frame(buffer)) {
      CHECK(*frame == fields);
      complete_at = i + 1;
      break;
    }
  }
  CHECK(complete_at == cutrain::encode_frame(fields).size());
  CHECK(buffer.empty());
  buffer += bytes.substr(complete_at);
  CHECK(pop_frame(buffer) == std::optional<Fields>(Fields{"next"}));
  CHECK(buffer.empty());
}

TEST_CASE("a length over 1 MiB is refused from its four bytes, before any of it is kept", "[dist]") {
  std::string buffer = u32(64u << 20);  // the 64 MiB prefix of the probe
  CHECK_THROWS_AS(pop_frame(buffer), ProtocolError);
  std::string at_limit = u32(uint32_t(kMaxFrameBytes));
  CHECK_FALSE(pop_frame(at_limit).has_value());  // the limit itself may still come
  std::string over = u32(uint32_t(kMaxFrameBytes + 1));
  CHECK_THROWS_WITH(pop_frame(over), Catch::Contains("over the limit"));
  CHECK_THROWS_AS(cutrain::encode_frame({std::string(kMaxFrameBytes, 'x')}), ProtocolError);
}

TEST_CASE("fields that overrun their frame are refused as soon as their length arrives", "[dist]") {
  std::string overrun = u32(100) + u32(500);  // a field of 500 bytes in a frame of 100
  CHECK_THROWS_WITH(pop_frame(overrun), Catch::Contains("overruns"));
  std::string cut = u32(6) + u32(0) + "xy";  // 2 bytes left where a field length needs 4
  CHECK_THROWS_WITH(pop_frame(cut), Catch::Contains("cut off"));
  std::string empty = u32(0);
  CHECK(pop_frame(empty) == std::optional<Fields>(Fields{}));
}

TEST_CASE("requests parse into ops, and anything else is a protocol error", "[dist]") {
  Request join = request({"join", "run", "1", "4", "0"});
  CHECK(join.op == Request::Op::join);
  CHECK(join.rank == 1);
  CHECK(join.world_size == 4);
  CHECK(request({"join", "run", "1", "4", "7"}).restart_count == 7);
  Request wait = request({"wait", "run", "250", "a", "b"});
  CHECK(wait.op == Request::Op::wait);
  CHECK(wait.timeout == std::chrono::milliseconds(250));
  CHECK(wait.keys == Fields{"a", "b"});
  CHECK(request({"get", "run", "9223372036854775807", "k"}).timeout.count() == INT64_MAX);
  CHECK(request({"add", "run", "k", "-5"}).delta == -5);

  for (const Fields& bad : std::vector<Fields>{{},
                                               {"join"},
                                               {"join", "run", "1"},
                                               {"join", "run", "1", "2"},
                                               {"join", "run", "1", "2", "-1"},
                                               {"join", "run", "0x1", "2", "0"},
                                               {"join", "run", " 1", "2", "0"},
                                               {"join", "run", "1", "9223372036854775808", "0"},
                                               {"add", "run", "k", ""},
                                               {"get", "run", "-1", "k"},
                                               {"get", "run", "10"},
                                               {"wait", "run", "10"},
                                               {"drop", "run", "everything"}})
    CHECK_THROWS_AS(request(bad), ProtocolError);
}

TEST_CASE("the store serves a connection only after it joins with the run id and a rank of the world",
          "[dist]") {
  StoreState state("secret-id", 2, 0);
  const auto now = Clock::now();
  auto before = state.handle(7, request({"get", "secret-id", "0", "k"}), now);
  CHECK(before.drop);
  CHECK(before.reply == std::optional<Fields>(Fields{"error", "a connection must join before anything else"}));

  auto foreign = state.handle(7, request({"join", "guess", "0", "2", "0"}), now);
  CHECK(foreign.drop);
  for (const std::string& field : *foreign.reply) {
    CHECK_THAT(field, !Catch::Contains("secret-id"));
    CHECK_THAT(field, !Catch::Contains("guess"));
  }

  auto wrapped = state.handle(7, request({"join", "secret-id", "4294967297", "2", "0"}), now);  // 2^32 + 1
  CHECK(wrapped.drop);
  CHECK(wrapped.reply->at(1) == "RANK=4294967297 is outside WORLD_SIZE=2");
  CHECK(state.handle(7, request({"join", "secret-id", "-1", "2", "0"}), now).drop);
  CHECK(state.handle(7, request({"join", "secret-id", "1", "3", "0"}), now).drop);
  CHECK_FALSE(state.joined(7));

  auto ok = state.handle(7, request({"join", "secret-id", "1", "2", "0"}), now);
  CHECK_FALSE(ok.drop);
  CHECK(ok.reply == std::optional<Fields>(Fields{"ok"}));
  CHECK(state.handle(7, request({"join", "secret-id", "0", "2", "0"}), now).drop);  // a second join
  CHECK(state.handle(8, request({"join", "secret-id", "1", "2", "0"}), now).reply->at(1) == "rank 1 joined twice");
  CHECK(state.handle(7, request({"set", "secret-id", "k", "v"}), now).reply == std::optional<Fields>(Fields{"ok"}));
}

TEST_CASE("a join from a newer restart is told to retry and ends the group, and one from an older restart is refused",
          "[dist]") {
  // Note [A newer group ends an older one]: this store's group runs restart 1.
  StoreState state("run", 2, 1);
  const auto now = Clock::now();
  REQUIRE(state.handle(1, request({"join", "run", "1", "2", "1"}), now).reply == std::optional<Fields>(Fields{"ok"}));

  auto twice = state.handle(2, request({"join", "run", "1", "2", "1"}), now);  // the same restart: as ever
  CHECK(twice.drop);
  CHECK(twice.reply->at(1) == "rank 1 joined twice");
  CHECK_FALSE(twice.group_over);

  auto newer = state.handle(3, request({"join", "run", "1", "2", "2"}), now);
  const std::string over = "rank 1 joined from restart 2 while this group runs restart 1: a node restarted its ranks, "
                           "so this group is over";
  CHECK(newer.drop);
  CHECK(newer.reply == std::optional<Fields>(Fields{"retry", over}));
  CHECK(newer.group_over == std::optional<std::string>(over));
  CHECK_FALSE(state.joined(3));

  auto older = state.handle(4, request({"join", "run", "0", "2", "0"}), now);
  CHECK(older.drop);
  CHECK(older.reply == std::optional<Fields>(Fields{"error", "rank 0 joined from restart 0 while this group runs "
                                                             "restart 1: it belongs to an older group, which is over"}));
  CHECK_FALSE(older.group_over);
  CHECK_FALSE(state.joined(4));
  // Neither took rank 0's place: rank 0 of this restart still joins.
  CHECK(state.handle(5, request({"join", "run", "0", "2", "1"}), now).reply == std::optional<Fields>(Fields{"ok"}));
}

TEST_CASE("an add that would overflow is refused and leaves the counter as it was", "[dist]") {
  StoreState state("run", 1, 0);
  const auto now = Clock::now();
  state.handle(1, request({"join", "run", "0", "1", "0"}), now);
  CHECK(state.handle(1, request({"add", "run", "n", "9223372036854775807"}), now).reply->at(1) ==
        "9223372036854775807");
  auto over = state.handle(1, request({"add", "run", "n", "1"}), now);
  CHECK_FALSE(over.drop);
  CHECK(over.reply == std::optional<Fields>(Fields{"error", "add: 'n' would overflow a 64-bit integer"}));
  CHECK(state.handle(1, request({"add", "run", "n", "-7"}), now).reply->at(1) == "9223372036854775800");
  state.handle(1, request({"set", "run", "text", "abc"}), now);
  CHECK(state.handle(1, request({"add", "run", "text", "1"}), now).reply->at(1) ==
        "add: the value of 'text' is not an integer");
}

TEST_CASE("a get with a timeout of INT64_MAX ms waits for its key instead of timing out at once", "[dist]") {
  StoreState state("run", 2, 0);
  const auto now = Clock::now();
  state.handle(1, request({"join", "run", "0", "2", "0"}), now);
  state.handle(2, request({"join", "run", "1", "2", "0"}), now);
  CHECK_FALSE(state.handle(1, request({"get", "run", "9223372036854775807", "k"}), now).reply.has_value());
  CHECK(state.next_deadline() == Clock::time_point::max());
  CHECK(state.due_replies(now + std::chrono::hours(24 * 365)).empty());
  state.handle(2, request({"set", "run", "k", "v"}), now);
  auto due = state.due_replies(now);
  REQUIRE(due.size() == 1);
  CHECK(due[0] == std::pair<int64_t, Fields>{1, Fields{"ok", "v"}});
}

TEST_CASE("parked requests time out with their missing keys, or hear 'closed' when the store stops", "[dist]") {
  StoreState state("run", 1, 0);
  const auto now = Clock::now();
  state.handle(1, request({"join", "run", "0", "1", "0"}), now);
  state.handle(1, request({"set", "run", "here", ""}), now);
  CHECK_FALSE(state.handle(1, request({"wait", "run", "100", "here", "absent"}), now).reply.has_value());
  CHECK(state.due_replies(now + std::chrono::milliseconds(99)).empty());
  auto due = state.due_replies(now + std::chrono::milliseconds(100));
  REQUIRE(due.size() == 1);
  CHECK(due[0].second == Fields{"timeout", "absent"});

  state.handle(1, request({"get", "run", "1000", "never"}), now);
  CHECK(state.close_replies() == std::vector<std::pair<int64_t, Fields>>{{1, Fields{"closed", "never"}}});
}
