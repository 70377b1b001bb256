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

# reference_script_option FLAG: whether FLAG is one of the options of torchvision's classification reference
# script that `cutrain train` and bench/pytorch_reference.py both take under that name, each with a value;
# bench/compare.sh and bench/accuracy.sh pass them, and the switch --model-ema, to both programs alike.
reference_script_option() {
  [[ " --lr-milestones --lr-gamma --clip-grad-norm --norm-weight-decay --label-smoothing --normalize-mean \
--normalize-std --model-ema-steps --model-ema-decay " == *" $1 "* ]]
}

# check_number_form FLAG VALUE: refuses in one line a value that has not its flag's form: a positive integer
# for a count, a comma-separated list of numbers for a list, else a number. The programs check the ranges.
check_number_form() {
  local number='[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?'
  case "$1" in
    --eval-every-steps|--width|--model-ema-steps)
      [[ "$2" =~ ^[1-9][0-9]*$ ]] || bad_usage "$1: '$2' is not a positive integer" ;;
    --lr-milestones|--normalize-mean|--normalize-std)
      [[ "$2" =~ ^$number(,$number)*$ ]] || bad_usage "$1: '$2' is not a comma-separated list of numbers" ;;
    *) [[ "$2" =~ ^$number$ ]] || bad_usage "$1: '$2' is not a number" ;;
  esac
}
