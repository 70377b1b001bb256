"""argparse as the bench scripts use it: a bad flag is one line on stderr and exit status 2; NAME=FILE arguments;
and the interpreter the scripts that need torch run under."""
import argparse
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
