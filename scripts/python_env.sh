# python_env.sh (sourced): where the project's Python environment is, and which interpreter the bench
# scripts and their tests use by default. scripts/setup.sh --with-tests makes the environment and names
# the versions in it.
#
# The environment lives beside cutrain's other caches, in $CUTRAIN_CACHE_DIR, else
# $XDG_CACHE_HOME/cutrain, else ~/.cache/cutrain (the rule of kernels/base/cache_dir.h), not in the clone:
# it holds about 5 GB (torch's CUDA wheel brings the nvidia-* libraries), which every clone and
# worktree of the repository then shares, and a fresh clone, CI's included, finds it made.
cutrain_venv="${CUTRAIN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cutrain}/venv"

# default_python: the environment's interpreter where it exists, else python3 (a GPU machine with its
# own torch, say). $PYTHON, where set, overrides both.
default_python() {
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"
  elif [ -x "$cutrain_venv/bin/python" ]; then echo "$cutrain_venv/bin/python"
  else echo python3; fi
}

# What a bench script says, in its one line, when its interpreter lacks the PyTorch side.
torch_help="scripts/setup.sh --with-tests installs the project's PyTorch, or PYTHON= names an interpreter that has it"
