// metrics_file.h: the records of one kind ("step", "eval", "epoch", ...) in a --metrics file.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cutrain::test {

inline std::vector<nlohmann::json> read_metrics(const std::string& path, const std::string& kind) {
  std::vector<nlohmann::json> records;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto record = nlohmann::json::parse(line);
    if (record["kind"] == kind) records.push_back(record);
  }
  return records;
}

}  // namespace cutrain::test
