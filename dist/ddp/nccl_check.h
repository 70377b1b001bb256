// nccl_check.h: NCCL_CHECK, the NCCL member of kernels/base/check.h's family of check macros.
//
//   NCCL_CHECK(ncclAllReduce(...));
//
// A failed call throws cutrain::CheckError naming the call, the file and line, and NCCL's own
// error string, e.g. "ncclCommInitRank(...) failed at dist/nccl.cpp:40: unhandled system error
// (ncclSystemError)". Only dist/ links NCCL, so the macro lives here rather than in kernels/.
#pragma once

#include <nccl.h>

#include <string>

#include "kernels/base/check.h"

namespace cutrain {

// "unhandled system error (ncclSystemError)"
std::string nccl_error_string(ncclResult_t result);

}  // namespace cutrain

#define NCCL_CHECK(call) CUTRAIN_CHECK_IMPL(call, ncclSuccess, ::cutrain::nccl_error_string)
