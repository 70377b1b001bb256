// `cutrain inspect CHECKPOINT`: what a checkpoint holds, from its own metadata: the model's shape,
// where its run stood, and what the run recorded of itself (app/checkpoint_folder.h describe(): the
// command, the version, the data, the classes, the normalisation, the seed). The optim file beside
// a model file adds the training state. Each file is read whole, so that its tensors are checked
// against their checksums (Note [Tensor checksums]), and the last line of each says how that went.
//
//   $ cutrain inspect runs/checkpoint-00000196.safetensors
//   runs/checkpoint-00000196.safetensors:
//     command: cutrain train --save runs ...
//     ...
#include <cstdio>
#include <filesystem>
#include <string>

#include "app/commands.h"
#include "nn/safetensors.h"

namespace cutrain {
namespace {

void print_metadata(const std::string& path) {
  const SafeTensorsFile file = read_safetensors(path);  // read first: a file it refuses prints no header
  std::printf("%s:\n", path.c_str());
  for (const auto& [key, value] : file.metadata) std::printf("  %s: %s\n", key.c_str(), value.c_str());
  std::printf("  checksums: %s\n",
              file.verified ? "every tensor matches its CRC-32C" : "none recorded, so the tensors are not verified");
}

}  // namespace

void add_inspect_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("inspect", "What a checkpoint holds: its model, step, run, command, version and data");
  auto path = std::make_shared<std::string>();
  cmd->add_option("checkpoint", *path, "A model file (checkpoint-N.safetensors); its optim file is read too")
      ->required();
  cmd->callback([path, &exit_code] {
    print_metadata(*path);
    const std::string suffix = ".safetensors", optim = ".optim.safetensors";
    if (path->ends_with(suffix) && !path->ends_with(optim)) {
      const std::string beside = path->substr(0, path->size() - suffix.size()) + optim;
      if (std::filesystem::is_regular_file(beside)) print_metadata(beside);
    }
    exit_code = 0;
  });
}

}  // namespace cutrain
