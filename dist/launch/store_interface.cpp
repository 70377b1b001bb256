#include "dist/launch/store_interface.h"

#include <stdexcept>

#include "dist/launch/socket.h"

namespace cutrain {

void Store::wait(const std::vector<std::string>& keys) {
  std::vector<std::string> missing = wait_for(keys, timeout());
  if (missing.empty()) return;
  std::string names;
  for (const std::string& key : missing) names += (names.empty() ? "'" : ", '") + key + "'";
  throw std::runtime_error("store: " + names + (missing.size() == 1 ? " was" : " were") + " not set within " +
                           describe(timeout()));
}

std::vector<std::vector<char>> Store::get_all(const std::vector<std::string>& keys) {
  wait(keys);
  std::vector<std::vector<char>> values;
  for (const std::string& key : keys) values.push_back(get(key));
  return values;
}

}  // namespace cutrain
