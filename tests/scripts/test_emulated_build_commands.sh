# The commands that build the emulated program configure build-emulated/ alike, in either order
# (Note [One emulated build]): scripts/build.sh --emulated, as the README suggests, and
# scripts/test-emulated.sh, which scripts/test.sh runs. A stand-in cmake keeps the compiler of its first
# configure in the folder's cache, keeps it when a later one names none, and fails, as CMake stops,
# when a later one names another.
source "$(dirname "$0")/common.sh"
mkdir -p "$scratch/path"
cat >"$scratch/path/cmake" <<'CMAKE'
#!/usr/bin/env bash
if [ "$1" = -S ]; then
  folder=$4 compiler=
  for argument in "$@"; do
    case "$argument" in -DCMAKE_CXX_COMPILER=*) compiler=${argument#*=} ;; esac
  done
  echo "configure $*" >>"$CONFIGURES"
  if [ -f "$folder/CMakeCache.txt" ]; then
    cached=$(sed -n 's/^CMAKE_CXX_COMPILER:FILEPATH=//p' "$folder/CMakeCache.txt")
    [ -z "$compiler" ] || [ "$compiler" = "$cached" ] ||
      { echo "CMake: the compiler changed from $cached to $compiler: cache dropped" >&2; exit 1; }
  else
    mkdir -p "$folder" && echo "CMAKE_CXX_COMPILER:FILEPATH=${compiler:-/usr/bin/c++}" >"$folder/CMakeCache.txt"
  fi
fi
CMAKE
printf '#!/usr/bin/env bash\nexit 0\n' >"$scratch/path/ctest"
chmod +x "$scratch/path/cmake" "$scratch/path/ctest"
export PATH="$scratch/path:$PATH"

# in_order NAME COMMANDS...: each command, in a copy of the scripts of its own; every one must succeed.
in_order() {
  local name=$1 copy="$scratch/$1"
  shift
  mkdir -p "$copy/scripts"
  cp "$repo/scripts/build.sh" "$repo/scripts/test-emulated.sh" "$copy/scripts/"
  export CONFIGURES="$scratch/$name.configures"
  local command words
  for command in "$@"; do
    read -ra words <<<"$command"
    bash "$copy/scripts/${words[0]}" "${words[@]:1}" >"$scratch/out" 2>&1 ||
      fail "$name: scripts/$command: $(cat "$scratch/out")"
  done
  [ "$(grep -c -- "-DCUTRAIN_EMULATED=ON" "$CONFIGURES")" = $# ] || fail "$name: configures: $(cat "$CONFIGURES")"
}
in_order build-then-test "build.sh --emulated" "test-emulated.sh"
in_order test-then-build "test-emulated.sh" "build.sh --emulated"
echo "ok: build.sh --emulated and test-emulated.sh configure build-emulated/ alike, in either order"
