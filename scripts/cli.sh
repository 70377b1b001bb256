# cli.sh: the command-line habits of the bench and GPU scripts, sourced by each (bench/cli.py is the
# Python twin): errors are one line named after the script, with status 1 for bad input or a missing
# GPU or file and status 2 for a bad flag.
prog="$(basename "$0")"

die() { echo "$prog: error: $*" >&2; exit 1; }
bad_usage() { echo "$prog: error: $* (see --help)" >&2; exit 2; }

# value_of "$@": the value that follows the option $1, which must be there.
#   --out) out="$(value_of "$@")"; shift ;;
value_of() { (($# >= 2)) || bad_usage "$1 needs a value"; printf '%s' "$2"; }

# header_help: the script's opening comment (from line 2 to the first line that is not a comment).
header_help() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; }
