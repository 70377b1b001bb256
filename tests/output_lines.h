// output_lines.h: a Catch matcher for whole lines of a program's output.
//
// Note [Regexes over a whole output]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Catch::Matches("(.|\n)*\nLINE\n(.|\n)*") runs std::regex_match over the whole output, and
// libstdc++'s regex recurses once per character: on a loaded machine, where a run prints more step
// lines by time, a 15 KB output overflowed the stack and crashed the test process. HasLines instead
// matches a pattern of one or more whole lines against each run of that many consecutive lines.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace cutrain::test {

class HasLinesMatcher : public Catch::MatcherBase<std::string> {
 public:
  // `pattern`: a regex for whole lines, joined by '\n' where it spans several.
  explicit HasLinesMatcher(std::string pattern)
      : pattern_(std::move(pattern)), regex_(pattern_), lines_(1 + std::count(pattern_.begin(), pattern_.end(), '\n')) {}

  bool match(const std::string& output) const override {
    std::vector<std::string> lines;
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    for (size_t first = 0; first + lines_ <= lines.size(); ++first) {
      std::string window = lines[first];
      for (size_t k = 1; k < lines_; ++k) window += "\n" + lines[first + k];
      if (std::regex_match(window, regex_)) return true;
    }
    return false;
  }

  std::string describe() const override { return "has lines matching \"" + pattern_ + "\""; }

 private:
  std::string pattern_;
  std::regex regex_;
  size_t lines_;
};

inline HasLinesMatcher HasLines(std::string pattern) { return HasLinesMatcher(std::move(pattern)); }

// How many times `what` occurs in `text`, overlapping occurrences included.
inline size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace cutrain::test
