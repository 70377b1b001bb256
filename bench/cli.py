"""argparse as the bench scripts use it: a bad flag is one line on stderr and exit status 2; NAME=FILE arguments."""
import argparse
import sys


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
