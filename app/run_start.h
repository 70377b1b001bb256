// run_start.h: how a run starts, before its first step: the device and the precision it runs on,
// what its checkpoints record of it, that its ranks hold the same state, and --dump-first-step,
// the run that writes its first step's gradients and stops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "app/datasets.h"
#include "data/dataset.h"
#include "dist/launch/env.h"
#include "kernels/augment.h"
#include "nn/checkpoint.h"
#include "nn/tensor.h"

namespace cutrain {

class ResNet18;
class Store;

// --device and --precision, as `train` and `eval` take them, checked against this machine: auto
// means a GPU when there is one; the precision defaults to bf16 on a GPU and fp32 on the CPU (the
// CPU reference computes in fp32 only). Errors are one line naming the flag.
Device resolve_device(const std::string& flag);                   // "auto" | "cuda" | "cpu"
DType resolve_precision(const std::string& flag, Device device);  // "" | "fp32" | "bf16"
// Throws one line for the first of the flags `given` (those the command line set) that only a GPU run reads
// (kGpuOnlyFlags), when the run is on the CPU.
void refuse_gpu_flags_on_cpu(const std::vector<std::string>& given, Device device);

// This rank's CUDA device among the `visible` ones: LOCAL_RANK, as under torchrun. Under srun,
// Slurm may give each task GPUs of its own (--gpus-per-task, --gpu-bind) through
// CUDA_VISIBLE_DEVICES: a task started by Slurm that sees fewer devices than its node has tasks
// takes its first. Throws one line when the device does not exist.
int cuda_device_for_rank(const DistEnv& env, int visible);

// What each checkpoint records of the run that wrote it (app/checkpoint_folder.h describe()), so
// that a file says where it came from: `cutrain inspect` prints it, and `cutrain eval` takes its
// default data from it. That is the command line of this process, the version and commit, the data
// (its folder, sizes and class names), the normalisation the loaders apply (`normalization`'s mean and std),
// and the seed.
CheckpointMetadata describe_run(const Datasets& data, uint64_t seed, const AugmentConfig& normalization);

// The ranks of a distributed run hold the same state before the first step.
//
// Every rank reads its own --resume (node-local --save folders may hold different files, or a node
// may be given another path), and the trainer's broadcast of rank 0's weights would then quietly
// give all of them rank 0's model while each kept its own step, epoch and data shard: one rank's
// steps paired with another's. So every rank says through the store what it holds, and all of them
// stop, in the same one line, when any differs.
//
// check_ranks_hold_alike publishes this rank's `held` (what is compared: the step, the position,
// the seed, the run and a digest) and `from` (the checkpoint it came from: said, not compared,
// since node-local folders may be mounted at different places), reads every rank's, and throws
// std::runtime_error naming which ranks hold what when they differ.
void check_ranks_hold_alike(Store& store, int rank, int world_size, const std::string& held, const std::string& from);

// A 64-bit FNV-1a digest of `bytes` bytes, going on from `hash` (kFnvStart for the first bytes).
inline constexpr uint64_t kFnvStart = 0xcbf29ce484222325ull;
uint64_t fnv1a(const void* data, size_t bytes, uint64_t hash = kFnvStart);

// `cutrain train --dump-first-step PATH`, the cross-check with PyTorch.
//
// The batch is fixed so both programs see the same numbers: the first batch-size images of the
// training set in file order, normalised only (no crop, no flip), as `normalization` says. One training-mode forward and
// backward, no update; the loss and every parameter's gradient are written as safetensors
// ("loss", "grad.<torchvision name>", torchvision layouts), as bench/pytorch_reference.py's
// --dump-first-step does, so bench/ can compare them tensor by tensor.
void dump_first_step(const std::string& path, ResNet18& model, const Dataset& train,
                     const AugmentConfig& normalization);

}  // namespace cutrain
