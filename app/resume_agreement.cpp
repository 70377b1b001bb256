#include "app/resume_agreement.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "dist/launch/store_interface.h"

namespace cutrain {

uint64_t fnv1a(const void* data, size_t bytes, uint64_t hash) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 0x100000001b3ull;
  return hash;
}

void check_ranks_hold_alike(Store& store, int rank, int world_size, const std::string& held,
                            const std::string& from) {
  const std::string said = held + "\n" + from;
  store.set("resume/" + std::to_string(rank), std::vector<char>(said.begin(), said.end()));
  struct Group {
    std::string held, from;  // the first rank's checkpoint stands for the group's
    std::vector<int> ranks;
  };
  std::vector<Group> groups;
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back("resume/" + std::to_string(r));
  const std::vector<std::vector<char>> said_by = store.get_all(keys);  // one request to torchrun's store
  for (int r = 0; r < world_size; ++r) {
    const std::vector<char>& text = said_by[size_t(r)];
    const std::string theirs(text.begin(), text.end());
    const size_t cut = theirs.find('\n');
    const std::string what = theirs.substr(0, cut);
    auto group = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.held == what; });
    if (group == groups.end()) group = groups.insert(groups.end(), Group{what, theirs.substr(cut + 1), {}});
    group->ranks.push_back(r);
  }
  if (groups.size() == 1) return;
  std::string message = "the ranks would resume from different states:";
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<int>& ranks = groups[g].ranks;
    std::string who = ranks.size() == 1 ? "rank" : "ranks";
    for (size_t i = 0; i < ranks.size() && i < 4; ++i) who += (i ? ", " : " ") + std::to_string(ranks[i]);
    if (ranks.size() > 4) who += " and " + std::to_string(ranks.size() - 4) + " more";
    message += (g ? "; " : " ") + who + " at " + groups[g].held + (groups[g].from.empty() ? "" : " from ") +
               groups[g].from;
  }
  throw std::runtime_error(message + "; give every rank the same --save folder (or --resume file) and start again");
}

}  // namespace cutrain
