// rendezvous.h: every rank meets every other at rank 0's store before anything else happens.
//
//   std::unique_ptr<Store> store = rendezvous(env);  // connect, join, wait for every rank
//
// One deadline covers the whole meeting: env.rdzv_timeout (CUTRAIN_RDZV_TIMEOUT, which cutrun's
// --rdzv-timeout sets; 5 min by default), also the store's timeout afterwards. While it waits,
// local rank 0 of each node says on stderr what it waits for, every 15 s (or every quarter of the
// timeout, when that is shorter):
//   cutrain: rendezvous: rank 2 (node 1) cannot reach rank 0's store at 10.0.0.9:29500 yet
//            (No route to host); giving up in 45 s
//   cutrain: rendezvous: 2 of 4 ranks here, at the store at 10.0.0.1:29500; waiting for ranks
//            2, 3 (node 1 not heard from); giving up in 45 s
// (one line each), and when the time is up every waiting rank throws one line naming what never
// came:
//   could not reach the store of rank 0 at 10.0.0.9:29500 within 60 s (No route to host): ...
//   rendezvous: ranks 2, 3 of 4 did not arrive within 60 s (node 1 not heard from; store at ...)
// A rank whose rank 0 gave up first says so, with what rank 0 was still waiting for. A rank the
// store refuses (another run id, another world size) fails at once, naming why.
//
// Under torchrun (TORCHELASTIC_USE_AGENT_STORE=True) the ranks meet at the agent's TCPStore at
// MASTER_ADDR:MASTER_PORT instead (dist/launch/torch_store.h, Note [torchrun's store]), rank 0 a client too.
//
// Each rank sets "rendezvous/rank/<rank>" and "rendezvous/node/<node>"; the node keys are how a
// waiting rank tells a node that never came from a node that came short of some ranks.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/launch/env.h"
#include "dist/launch/store.h"

namespace cutrain {

// Where the waiting lines go. The default prints them on stderr, from local rank 0 only.
using RendezvousReport = std::function<void(const std::string& line)>;

std::unique_ptr<Store> rendezvous(const DistEnv& env, const RendezvousReport& report = {});

// "rank 5", "ranks 2, 3", "ranks 8-15, 24": the ranks, in order, runs of three or more as ranges.
std::string describe_ranks(const std::vector<int>& ranks);

}  // namespace cutrain
