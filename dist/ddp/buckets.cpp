#include "dist/ddp/buckets.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace cutrain {

// DDP's rule (compute_bucket_assignment_by_size): walk the parameters in flat order, adding each
// to the open bucket; close the bucket as soon as it holds at least its cap. The first cap is the
// small one, so the first all-reduce can start early in backward.
std::vector<Bucket> plan_buckets(const std::vector<int64_t>& param_sizes, int64_t elem_bytes, int64_t cap_bytes,
                                 int64_t first_cap_bytes) {
  for (size_t p = 0; p < param_sizes.size(); ++p)
    if (param_sizes[p] <= 0)
      throw std::invalid_argument("plan_buckets: parameter " + std::to_string(p) + " has " +
                                  std::to_string(param_sizes[p]) + " elements");
  const int64_t total_bytes = std::accumulate(param_sizes.begin(), param_sizes.end(), int64_t(0)) * elem_bytes;
  // A cap that holds every gradient asks for a single bucket.
  int64_t cap = total_bytes <= cap_bytes ? cap_bytes : std::min(first_cap_bytes, cap_bytes);

  std::vector<Bucket> buckets;
  Bucket open;
  for (int p = 0; p < int(param_sizes.size()); ++p) {
    open.end += param_sizes[p];
    open.param_end = p + 1;
    if ((open.end - open.begin) * elem_bytes >= cap || p + 1 == int(param_sizes.size())) {
      buckets.push_back(open);
      open = Bucket{open.end, open.end, p + 1, p + 1};
      cap = cap_bytes;
    }
  }
  return buckets;
}

namespace {

int64_t mib_to_bytes(double mib, const char* flag) {
  if (!(mib >= 0) || mib > 1e9)
    throw std::invalid_argument(std::string(flag) + " " + std::to_string(mib) + ": must be a size in MiB, 0 or more");
  return std::llround(mib * (1 << 20));
}

}  // namespace

std::vector<Bucket> plan_buckets(const std::vector<int64_t>& param_sizes, const BucketOptions& options) {
  return plan_buckets(param_sizes, sizeof(float), mib_to_bytes(options.bucket_cap_mb, "--bucket-cap-mb"),
                      mib_to_bytes(options.first_bucket_mb, "first bucket cap"));
}

}  // namespace cutrain
