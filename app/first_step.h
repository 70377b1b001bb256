// first_step.h: `cutrain train --dump-first-step PATH`, the cross-check with PyTorch.
//
// The batch is fixed so both programs see the same numbers: the first batch-size images of the
// training set in file order, normalised only (no crop, no flip). One training-mode forward and
// backward, no update; the loss and every parameter's gradient are written as safetensors
// ("loss", "grad.<torchvision name>", torchvision layouts), as bench/pytorch_reference.py's
// --dump-first-step does, so bench/ can compare them tensor by tensor.
#pragma once

#include <string>

#include "data/dataset.h"

namespace cutrain {

class ResNet18;

void dump_first_step(const std::string& path, ResNet18& model, const Dataset& train);

}  // namespace cutrain
