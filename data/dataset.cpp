#include "data/dataset.h"

#include <filesystem>
#include <stdexcept>

namespace cutrain {

void Dataset::validate(const std::string& source) const {
  if (labels.empty()) throw std::runtime_error(source + ": the dataset is empty");
  if (images.size() != size() * image_bytes())
    throw std::runtime_error(source + ": " + std::to_string(images.size()) + " image bytes for " +
                             std::to_string(size()) + " labels of " + std::to_string(image_bytes()) + " bytes each");
  if (num_classes <= 0) throw std::runtime_error(source + ": no classes");
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] < 0 || labels[i] >= num_classes)
      throw std::runtime_error(source + ": record " + std::to_string(i) + " has label " + std::to_string(labels[i]) +
                               ", not in [0, " + std::to_string(num_classes) + ")");
}

void create_dataset_folder(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error(dir + ": cannot create the folder (" + ec.message() + ")");
}

}  // namespace cutrain
