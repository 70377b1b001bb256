#include "dist/launch/slurm.h"

#include <charconv>
#include <stdexcept>

namespace cutrain {
namespace {

// Longer ranges than this are a typo, not a cluster.
constexpr long kMaxRange = 1'000'000;

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts(1);
  for (char c : text) {
    if (c == separator)
      parts.emplace_back();
    else
      parts.back() += c;
  }
  return parts;
}

long parse_count(const std::string& text, const std::string& what) {
  long value = -1;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < 0)
    throw std::invalid_argument(what + " '" + text + "' is not a number");
  return value;
}

// The names separated by commas outside brackets: "a[1,3],b" -> "a[1,3]", "b".
std::vector<std::string> split_names(const std::string& list) {
  std::vector<std::string> names(1);
  int depth = 0;
  for (char c : list) {
    depth += c == '[' ? 1 : c == ']' ? -1 : 0;
    if (depth < 0 || depth > 1) throw std::invalid_argument("brackets out of place");
    if (c == ',' && depth == 0)
      names.emplace_back();
    else
      names.back() += c;
  }
  if (depth != 0) throw std::invalid_argument("a '[' without its ']'");
  for (const std::string& name : names)
    if (name.empty()) throw std::invalid_argument("an empty host name");
  return names;
}

// What a bracket stands for: "01-03,07" -> 01 02 03 07. A range is as wide as its first number.
std::vector<std::string> expand_ranges(const std::string& ranges) {
  std::vector<std::string> numbers;
  for (const std::string& range : split(ranges, ',')) {
    const size_t dash = range.find('-');
    const std::string first = range.substr(0, dash);
    const long low = parse_count(first, "range start");
    const long high = dash == std::string::npos ? low : parse_count(range.substr(dash + 1), "range end");
    if (high < low) throw std::invalid_argument("the range " + range + " runs backwards");
    if (high - low > kMaxRange) throw std::invalid_argument("the range " + range + " is too long");
    for (long n = low; n <= high; ++n) {
      std::string digits = std::to_string(n);
      numbers.push_back(std::string(first.size() > digits.size() ? first.size() - digits.size() : 0, '0') + digits);
    }
  }
  return numbers;
}

// One name with its brackets: "rack[1-2]-n[1-2]" -> rack1-n1 rack1-n2 rack2-n1 rack2-n2.
std::vector<std::string> expand_name(const std::string& name) {
  std::vector<std::string> hosts{""};
  size_t at = 0;
  for (;;) {
    const size_t open = name.find('[', at);
    for (std::string& host : hosts) host += name.substr(at, open - at);
    if (open == std::string::npos) return hosts;
    const size_t close = name.find(']', open);
    std::vector<std::string> combined;
    for (const std::string& host : hosts)
      for (const std::string& number : expand_ranges(name.substr(open + 1, close - open - 1)))
        combined.push_back(host + number);
    hosts = std::move(combined);
    at = close + 1;
  }
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list) {
  std::vector<std::string> hosts;
  for (const std::string& name : split_names(list))
    for (std::string& host : expand_name(name)) hosts.push_back(std::move(host));
  return hosts;
}

std::vector<int> expand_tasks_per_node(const std::string& list) {
  std::vector<int> tasks;
  for (const std::string& item : split(list, ',')) {
    const size_t open = item.find("(x");
    const long count = parse_count(item.substr(0, open), "task count");
    long repeat = 1;
    if (open != std::string::npos) {
      if (item.back() != ')') throw std::invalid_argument("'" + item + "' is not N or N(xK)");
      repeat = parse_count(item.substr(open + 2, item.size() - open - 3), "repeat count");
    }
    if (repeat > kMaxRange) throw std::invalid_argument("'" + item + "' repeats too often");
    tasks.insert(tasks.end(), size_t(repeat), int(count));
  }
  return tasks;
}

}  // namespace cutrain
