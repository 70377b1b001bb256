// cache_dir.h: the folder where cutrain keeps what it makes once and reuses across runs and
// clones: the synthetic dataset (app/datasets.h), cuDNN's measured engines
// (nn/conv_engine_cache.h) and the tests' Python environment (scripts/python_env.sh, which follows
// the same rule in shell).
#pragma once

#include <string>

namespace cutrain {

// $CUTRAIN_CACHE_DIR when set and not empty, else $XDG_CACHE_HOME/cutrain, else ~/.cache/cutrain
// (./.cache/cutrain without a HOME). The folder may not exist yet.
std::string cutrain_cache_dir();

}  // namespace cutrain
