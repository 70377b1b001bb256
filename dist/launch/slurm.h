// slurm.h: Slurm's compressed lists, which a task started by `srun` finds in its environment.
//
//   expand_hostlist("gpu[01-04,07],login2")  -> gpu01 gpu02 gpu03 gpu04 gpu07 login2
//   expand_tasks_per_node("2(x3),1")          -> 2 2 2 1
//
// SLURM_STEP_NODELIST and SLURM_JOB_NODELIST hold host lists: names separated by commas, where a
// bracket stands for a range of numbers ("01-04", zero-padded to the width written) or a list of
// them; a name with several brackets stands for every combination ("rack[1-2]-n[1-2]"), as Slurm
// writes them. SLURM_STEP_TASKS_PER_NODE holds the number of tasks on each node, "N(xK)" for K
// nodes in a row with N each. dist/launch/env.cpp turns these into torchrun's variables.
//
// Errors throw std::invalid_argument with one line saying what is wrong in the text.
#pragma once

#include <string>
#include <vector>

namespace cutrain {

std::vector<std::string> expand_hostlist(const std::string& list);

std::vector<int> expand_tasks_per_node(const std::string& list);

}  // namespace cutrain
