"""argparse as the bench scripts use it: a bad flag is one line on stderr and exit status 2."""
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
