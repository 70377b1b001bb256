"""argparse as the bench scripts use it: a bad flag is one line on stderr and exit status 2; NAME=FILE arguments;
and the interpreter the scripts that need torch run under."""
import argparse
import os
import shutil
import sys


def use_project_python():
    """Re-runs this script under $PYTHON, else the project's environment where it exists (the rule of
    scripts/python_env.sh: $CUTRAIN_CACHE_DIR, else $XDG_CACHE_HOME/cutrain, else ~/.cache/cutrain, then venv/),
    when another interpreter started it; returns when it already runs there, or when there is none."""
    if os.environ.get("CUTRAIN_PROJECT_PYTHON"):  # already re-run once: never loop
        return
    cache = os.environ.get("CUTRAIN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cutrain")
    venv = os.path.join(cache, "venv")
    wanted = shutil.which(os.environ.get("PYTHON") or os.path.join(venv, "bin", "python"))
    if wanted is None or os.path.abspath(wanted) == os.path.abspath(sys.executable):
        return
    if not os.environ.get("PYTHON") and os.path.abspath(sys.prefix) == os.path.abspath(venv):
        return
    os.environ["CUTRAIN_PROJECT_PYTHON"] = wanted
    os.execv(wanted, [wanted] + sys.argv)


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
