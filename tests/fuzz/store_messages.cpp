// Fuzz target: the store's message parser and rules (dist/launch/store_protocol.h, dist/launch/store_state.h),
// driven the way the server drives them, without sockets. The input is what four clients send, in
// chunks of [1 byte: client (low 2 bits) and seconds passed before it (the other 6, in 0.1 s)]
// [1 byte: n] [n bytes]. A client the store drops connects again on its next chunk. Besides not
// crashing, the store must keep its own rules: no reply to a dropped connection, and the replies it
// owes only to connections whose request it parked.
#include <array>
#include <stdexcept>

#include "dist/launch/store_protocol.h"
#include "dist/launch/store_state.h"
#include "tests/fuzz/targets.h"

namespace cutrain::fuzz {
namespace {

struct Client {
  int64_t connection = 0;
  std::string input;
  bool parked = false;
  bool dropped = false;
};

void expect(bool rule, const char* what) {
  if (!rule) throw std::logic_error(std::string("the store broke its rules: ") + what);
}

// As the server: requests one at a time, none while one is parked.
void serve(StoreState& store, Client& c, Clock::time_point now) {
  while (!c.dropped && !c.parked) {
    StoreState::Outcome outcome;
    try {
      std::optional<Fields> frame = pop_frame(c.input);
      if (!frame) return;
      outcome = store.handle(c.connection, parse_request(*frame), now);
    } catch (const ProtocolError&) {
      outcome = {Fields{"error"}, true};
    }
    if (!outcome.reply) {
      c.parked = true;
      return;
    }
    expect(!outcome.reply->empty(), "an empty reply");
    if (outcome.drop) {
      store.forget(c.connection);
      c.dropped = true;
    }
  }
}

Client& owner(std::array<Client, 4>& clients, int64_t connection) {
  for (Client& c : clients)
    if (c.connection == connection && !c.dropped) return c;
  throw std::logic_error("the store broke its rules: a reply to a connection that was dropped");
}

}  // namespace

void store_messages(const uint8_t* data, size_t size) {
  StoreState store("run", 2, 0);
  std::array<Client, 4> clients;
  for (int i = 0; i < 4; ++i) clients[i].connection = i;
  int64_t next_connection = 4;
  Clock::time_point now{};
  for (size_t at = 0; at + 2 <= size;) {
    Client& c = clients[data[at] & 3];
    now += std::chrono::milliseconds(100 * (data[at] >> 2));
    const size_t n = std::min<size_t>(data[at + 1], size - at - 2);
    at += 2;
    if (c.dropped) {
      c = Client{};
      c.connection = next_connection++;
    }
    c.input.append(reinterpret_cast<const char*>(data + at), n);
    at += n;
    serve(store, c, now);
    for (auto& [connection, reply] : store.due_replies(now)) {
      Client& waiting = owner(clients, connection);
      expect(waiting.parked, "a reply owed to a connection with no parked request");
      waiting.parked = false;
      serve(store, waiting, now);  // a request that came in behind the parked one
    }
  }
  for (auto& [connection, reply] : store.close_replies())
    expect(owner(clients, connection).parked, "'closed' for a connection with no parked request");
}

}  // namespace cutrain::fuzz

CUTRAIN_FUZZER_ENTRY(store_messages)
