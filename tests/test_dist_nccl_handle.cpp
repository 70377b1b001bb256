// NcclCommHandle, with NCCL's lifetime calls stood in for: after an abort (which frees the
// communicator) nothing reaches NCCL again -- neither the watchdog's queries nor the finalize
// and destroy that close it. The use after free this prevents: a collective that timed out
// aborted the communicator, and the destructor then finalized and destroyed the freed handle.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "dist/ddp/nccl_comm_handle.h"

using namespace cutrain;

namespace {

std::vector<std::string> calls;  // what reached "NCCL", in order

ncclResult_t fake_abort(ncclComm_t) {
  calls.push_back("abort");
  return ncclSuccess;
}
ncclResult_t fake_finalize(ncclComm_t) {
  calls.push_back("finalize");
  return ncclInProgress;
}
ncclResult_t fake_destroy(ncclComm_t) {
  calls.push_back("destroy");
  return ncclSuccess;
}

struct FakeNccl {
  FakeNccl() { calls.clear(); }
  NcclCommHandle handle{{fake_abort, fake_finalize, fake_destroy}};
};

}  // namespace

TEST_CASE("A live NCCL communicator is finalized, settled and destroyed, once", "[dist]") {
  FakeNccl nccl;
  bool queried = false;
  CHECK(nccl.handle.query([&](ncclComm_t) { queried = true; }));
  CHECK(queried);
  nccl.handle.close([](ncclResult_t result) {
    CHECK(result == ncclInProgress);
    calls.push_back("settled");
  });
  CHECK(calls == std::vector<std::string>{"finalize", "settled", "destroy"});
  CHECK(nccl.handle.state() == NcclCommHandle::State::closed);
  nccl.handle.close([](ncclResult_t) { calls.push_back("settled again"); });
  nccl.handle.abort();
  CHECK(calls.size() == 3);
}

TEST_CASE("An aborted NCCL communicator is neither queried, aborted again, finalized nor destroyed", "[dist]") {
  FakeNccl nccl;
  nccl.handle.abort();  // a collective that did not complete in time
  nccl.handle.abort();  // the watchdog, a moment later
  CHECK(!nccl.handle.query([](ncclComm_t) { calls.push_back("query"); }));
  nccl.handle.close([](ncclResult_t) { calls.push_back("settled"); });  // the destructor
  CHECK(calls == std::vector<std::string>{"abort"});
  CHECK(nccl.handle.state() == NcclCommHandle::State::aborted);
}

TEST_CASE("A finalize that does not settle aborts the NCCL communicator instead of destroying it", "[dist]") {
  FakeNccl nccl;
  NcclCommHandle& handle = nccl.handle;
  CHECK_THROWS_WITH(handle.close([&](ncclResult_t) {
    handle.abort();  // what NcclCommunicator::settle does on a timeout, before it throws
    throw std::runtime_error("ncclCommFinalize did not complete");
  }),
                    "ncclCommFinalize did not complete");
  CHECK(calls == std::vector<std::string>{"finalize", "abort"});
}
