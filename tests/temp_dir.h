// temp_dir.h: a fresh folder for one test, removed with everything in it when the test ends,
// pass or fail. Made with mkdtemp under the system temp folder ($TMPDIR or /tmp), so tests
// running in parallel never collide.
//
//   cutrain::test::TempDir dir;
//   write_cifar10(dir / "data", train, test);      // dir / "name": a path inside, as a string
//   load_dataset(dir.path().string(), true);
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace cutrain::test {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "cutrain-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// The whole text of a file a test's program wrote ("" when there is none).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace cutrain::test
