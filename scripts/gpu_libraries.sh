# gpu_libraries.sh (sourced by gpu-check.sh, and by tests/scripts/test_wheel_libraries.sh, which rehearses it):
# the one set of CUDA libraries that the prebuilt binaries load, and the versions of the Python side.
#
# Note [One set of CUDA libraries]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The CUDA runtime, cuBLAS, cuDNN and NCCL come either all from Python's
# nvidia-* wheels (CUDA 13's put cudart and cuBLAS in nvidia/cu13/lib, cuDNN and NCCL in nvidia/cudnn/lib and
# nvidia/nccl/lib: the libraries torch itself loads) or, where the wheels lack any of them, all from the CUDA
# toolkit, never a mix of the two, so that cuBLAS is never loaded beside another version's cudart. cuDNN's
# sub-libraries (libcudnn_ops, _cnn, _adv, _graph, _engines_*, _heuristic) are loaded at run time from
# libcudnn's own folder. The driver's libcuda is the system's (or /usr/local/nvidia/lib64 in a container).

# wheel_library_folders PYTHON: every nvidia/*/lib folder of PYTHON's packages, one a line (none: no output).
wheel_library_folders() {
  "$1" -c '
import glob, os, nvidia
for root in nvidia.__path__:
    print("\n".join(sorted(glob.glob(os.path.join(root, "*", "lib")))))' 2>/dev/null || true
}

# unpack_prebuilt PREBUILT: the files that scripts/package-prebuilt.sh compressed (NAME.gz, oneDNN's library),
# unpacked beside them, once.
unpack_prebuilt() {
  local f
  for f in "$1"/bin/*.gz "$1"/lib/*.gz; do
    [ -f "$f" ] || continue
    [ "${f%.gz}" -nt "$f" ] || gzip -dkf "$f" || return 1
  done
}

# gpu_python: sets `python` to the first interpreter whose packages hold the CUDA 13 wheels (a folder nvidia/cu13:
# cudart and cuBLAS, beside which the cuDNN and NCCL wheels install), of $PYTHON where set, the project's
# environment (scripts/python_env.sh), python3, python, $CONDA_PREFIX/bin/python and /opt/conda/bin/python, and
# `python_choice` to one line saying which and what the others lacked. With none, `python` is default_python's,
# whose libraries gpu_library_path then finds wanting (the toolkit's instead).
gpu_python() {
  local candidates=() py tried=()
  [ -z "${PYTHON:-}" ] || candidates+=("$PYTHON")
  candidates+=("$cutrain_venv/bin/python" python3 python)
  [ -z "${CONDA_PREFIX:-}" ] || candidates+=("$CONDA_PREFIX/bin/python")
  candidates+=(/opt/conda/bin/python)
  for py in "${candidates[@]}"; do
    if ! command -v "$py" >/dev/null 2>&1; then
      [ "$py" != "$cutrain_venv/bin/python" ] || continue  # (no project environment: not worth a word)
      tried+=("$py: not found"); continue
    fi
    if "$py" -c '
import os, sys, nvidia
sys.exit(0 if any(os.path.isdir(os.path.join(root, "cu13")) for root in nvidia.__path__) else 1)' 2>/dev/null; then
      python="$(command -v "$py")"
      python_choice="$python, which holds nvidia/cu13"
      ((${#tried[@]} == 0)) || python_choice+=" (before it, $(printf '%s; ' "${tried[@]}" | sed 's/; $//'))"
      return
    fi
    tried+=("$py: no nvidia/cu13")
  done
  python="$(default_python)"
  python_choice="$python: none holds nvidia/cu13 ($(printf '%s; ' "${tried[@]}" | sed 's/; $//')), so the CUDA libraries are the toolkit's"
}

# gpu_library_path PREBUILT PYTHON: sets `library_path`, the LD_LIBRARY_PATH for PREBUILT's binaries:
# PREBUILT/lib, then the wheels' folders when they hold all of Note [One set of CUDA libraries]'s libraries,
# else the toolkit's, then the container driver's folder where there is one; and `library_set`, "wheels" or
# "toolkit".
gpu_library_path() {
  local prebuilt="$1" python="$2" folders=() lib d found
  while read -r d; do [ -n "$d" ] && folders+=("$d"); done < <(wheel_library_folders "$python")
  library_set=wheels
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
    found=0
    for d in "${folders[@]}"; do [ -e "$d/$lib" ] && found=1; done
    ((found)) || library_set=toolkit
  done
  if [ "$library_set" = toolkit ]; then
    folders=()
    for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
      [ -d "$d" ] && folders+=("$d")
    done
  fi
  [ -d /usr/local/nvidia/lib64 ] && folders+=(/usr/local/nvidia/lib64)
  library_path="$(IFS=:; echo "$prebuilt/lib${folders[*]:+:${folders[*]}}")"
}

# python_versions PYTHON SETUP: one line, the versions of the Python side that PYTHON has, beside those the
# tests used (SETUP is scripts/setup.sh: Note [The GPU machine's Python]), and the nvidia-* wheels it has.
python_versions() {
  "$1" - "$2" <<'PY2'
import subprocess, sys
from importlib import metadata
pins = subprocess.run(["bash", sys.argv[1], "--python-pins"], capture_output=True, text=True).stdout.split()
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"
found = [f"{p.split('==')[0]} {version(p.split('==')[0])} (tests: {p.split('==')[1]})" for p in pins]
wheels = sorted(f"{d.metadata['Name']} {d.version}" for d in metadata.distributions()
                if d.metadata["Name"].startswith("nvidia-"))
print(f"python {sys.version.split()[0]}: " + ", ".join(found) + "; " + (", ".join(wheels) or "no nvidia-* wheels"))
PY2
}
