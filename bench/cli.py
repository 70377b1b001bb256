"""argparse as the bench scripts use it: a bad flag is one line on stderr and exit status 2; numbers and lists of
numbers in a range, as cutrain's flags take them; NAME=FILE arguments; and the interpreter the scripts that need
torch run under."""
import argparse
import math
import os
import shutil
import subprocess
import sys


def project_venv():
    """The project's Python environment, by the rule of scripts/python_env.sh: $CUTRAIN_CACHE_DIR, else
    $XDG_CACHE_HOME/cutrain, else ~/.cache/cutrain, then venv/."""
    cache = os.environ.get("CUTRAIN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cutrain")
    return os.path.join(cache, "venv")


def use_project_python():
    """Re-runs this script under $PYTHON, else the project's environment where it exists (project_venv), when
    another interpreter started it; returns when it already runs there, or when there is none."""
    if os.environ.get("CUTRAIN_PROJECT_PYTHON"):  # already re-run once: never loop
        return
    venv = project_venv()
    wanted = shutil.which(os.environ.get("PYTHON") or os.path.join(venv, "bin", "python"))
    if wanted is None or os.path.abspath(wanted) == os.path.abspath(sys.executable):
        return
    if not os.environ.get("PYTHON") and os.path.abspath(sys.prefix) == os.path.abspath(venv):
        return
    os.environ["CUTRAIN_PROJECT_PYTHON"] = wanted
    os.execv(wanted, [wanted] + sys.argv)


def use_python_with(module, prog):
    """Returns when this interpreter imports `module`; else re-runs the script under the first of $PYTHON, the
    project's environment and /usr/bin/python3 (where scripts/setup.sh installs Debian's packages) that does, or
    fails in one line. A python3 of pyenv or conda, first on PATH, may have none of the project's modules."""
    try:
        __import__(module)
        return
    except ImportError as e:
        missing = e
    tried = [os.environ.get("PYTHON"), os.path.join(project_venv(), "bin", "python"), "/usr/bin/python3"]
    for candidate in filter(None, tried):
        wanted = shutil.which(candidate)
        if wanted is None or os.environ.get("CUTRAIN_PYTHON_FOR") == module:  # already re-run once: never loop
            continue
        if subprocess.run([wanted, "-c", f"import {module}"], capture_output=True).returncode == 0:
            os.environ["CUTRAIN_PYTHON_FOR"] = module
            os.execv(wanted, [wanted] + sys.argv)
    fail(prog, f"{module} not importable by {sys.executable} ({missing}), nor by the project's environment or "
               f"/usr/bin/python3: scripts/setup.sh installs it")


def _range_text(low, high):
    """"[0, 1]", "[0, 1e+06]", "[1, 1073741824]": a range as cutrain's flags say it (app/flags.h)."""
    def text(v):
        return str(v) if isinstance(v, int) else f"{v:g}"
    return f"[{text(low)}, {text(high)}]"


def _decimal(text):
    """A finite decimal number, or None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def number_in(low, high, integer=False):
    """An argparse type: one number in [low, high] (an integer with integer=True), as cutrain's add_number takes
    it; anything else is the parser's one-line error, naming the range."""
    kind = "an integer" if integer else "a finite decimal number"

    def parse(text):
        if integer:
            value = int(text) if text.strip().lstrip("+-").isdigit() else None
        else:
            value = _decimal(text)
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is not {kind} in {_range_text(low, high)}")
        return value
    return parse


def number_list(low, high, min_count, max_count, increasing=False):
    """An argparse type: comma-separated numbers in [low, high], min_count to max_count of them, increasing when
    asked (--lr-milestones 0.5,0.75), as cutrain's add_number_list takes them; returns a tuple."""
    count = str(min_count) if min_count == max_count else f"{min_count} to {max_count}"
    kind = f"a list of {count}{' increasing' if increasing else ''} finite decimal numbers in {_range_text(low, high)}"

    def parse(text):
        values = [_decimal(part) for part in text.split(",")]
        if (not min_count <= len(values) <= max_count or any(v is None or not low <= v <= high for v in values)
                or (increasing and any(a >= b for a, b in zip(values, values[1:])))):
            raise argparse.ArgumentTypeError(f"{text} is not {kind}")
        return tuple(values)
    return parse


class Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(2)


def fail(prog, message):
    """The one-line error for bad input or a missing GPU/library, and exit status 1."""
    sys.stderr.write(f"{prog}: error: {message}\n")
    sys.exit(1)


def named_files(parser, items):
    """NAME=FILE arguments -> {name: [files, in order]}; a malformed one is the parser's one-line error."""
    files = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            parser.error(f"{item}: expected NAME=FILE")
        files.setdefault(name, []).append(path)
    return files
