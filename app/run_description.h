// run_description.h: what each checkpoint records of the run that wrote it (app/checkpoint_folder.h
// describe()), so that a file says where it came from: `cutrain inspect` prints it, and
// `cutrain eval` takes its default data from it.
#pragma once

#include <cstdint>

#include "app/datasets.h"
#include "nn/checkpoint.h"

namespace cutrain {

// The command line of this process, the version and commit, the data (its folder, sizes and class
// names), the normalisation the loaders apply, and the seed.
CheckpointMetadata describe_run(const Datasets& data, uint64_t seed);

}  // namespace cutrain
