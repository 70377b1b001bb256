#!/usr/bin/env python3
"""Checks the two conventions that no compiler checks (CONTRIBUTING.md):

- Notes. A Note is defined once, in a comment, as a line `// Note [Name]` (or `# Note [Name]`)
  followed by a line of tildes, and cited anywhere else as Note [Name]. Every Note cited in the
  sources, scripts and documents must be defined, and none twice.
- Test names. No Catch2 TEST_CASE name holds a ';': CTest splits a test's name there, and the
  halves then match no test (tests/CMakeLists.txt runs them with -w NoTests, so that fails late).
  And a name's first ': ' ends before its 70th character: Catch 2.13 indents the lines of a wrapped
  name to it, and with the indent near its 79 columns it loops forever printing the name (as it does
  for a skipped test), filling the memory of the CTest that reads it.

Usage: check_notes.py REPO. Prints one line per fault and exits 1, or one "ok:" line.
"""
import os
import re
import sys

CATCH_WIDTH = 79     # the columns of Catch's console reporter, where it wraps a test name
MAX_COLON_END = 70   # where a wrapped name's first ': ' must end by

SOURCE_SUFFIXES = (".h", ".cpp", ".cu", ".cuh", ".py", ".sh", ".txt", ".cmake", ".md")
# Folders that hold no project text: build outputs, Debian's and third parties' code, git's own.
SKIPPED_FOLDERS = re.compile(r"^(build.*|third_party|\..*|__pycache__)$")
# These files show the convention itself, with a placeholder name.
SKIPPED_FILES = {"check_notes.py", "CONTRIBUTING.md"}

DEFINITION = re.compile(r"^[ \t]*(?://|#) Note \[([^\]\n]+)\][ \t]*\n[ \t]*(?://|#) ~+[ \t]*$", re.M)
CITATION = re.compile(r"Note\s+\[([^\]]{1,100})\]")
# A name wrapped across comment lines: the line break and the next line's comment marker.
WRAP = re.compile(r"\s*\n\s*(?://+|#+)?\s*")
TEST_CASE = re.compile(r'\bTEST_CASE\(\s*((?:"(?:[^"\\\n]|\\.)*"\s*)+)')
LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def project_files(repo):
    for folder, subfolders, files in os.walk(repo):
        subfolders[:] = sorted(d for d in subfolders if not SKIPPED_FOLDERS.match(d))
        for name in sorted(files):
            if name.endswith(SOURCE_SUFFIXES) and name not in SKIPPED_FILES:
                yield os.path.join(folder, name)


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def main(repo):
    faults = []
    definitions = {}  # name -> "file:line" of its definition
    citations = []  # (name, "file:line")
    test_names = 0
    for path in project_files(repo):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        where = os.path.relpath(path, repo)
        for m in DEFINITION.finditer(text):
            name, at = m.group(1), f"{where}:{line_of(text, m.start(1))}"
            if name in definitions:
                faults.append(f"{at}: Note [{name}] is defined again (first at {definitions[name]})")
            else:
                definitions[name] = at
        for m in CITATION.finditer(text):
            citations.append((WRAP.sub(" ", m.group(1)).strip(), f"{where}:{line_of(text, m.start())}"))
        if where.startswith("tests" + os.sep) and path.endswith(".cpp"):
            for m in TEST_CASE.finditer(text):
                test_names += 1
                name = "".join(LITERAL.findall(m.group(1)))
                if ";" in name:
                    faults.append(f"{where}:{line_of(text, m.start())}: the test name \"{name}\" holds a ';', "
                                  "where CTest splits test names")
                colon = name.find(": ")
                if colon + 2 >= MAX_COLON_END and len(name) > CATCH_WIDTH:
                    faults.append(f"{where}:{line_of(text, m.start())}: the test name \"{name}\" has its first "
                                  f"': ' at character {colon + 1}, where Catch wraps it forever (keep it before "
                                  f"{MAX_COLON_END - 2})")
    for name, at in citations:
        if name not in definitions:
            faults.append(f"{at}: Note [{name}] is cited but defined nowhere (define it as `// Note [{name}]` "
                          "and a line of tildes)")
    for fault in faults:
        print(fault)
    if faults:
        return 1
    print(f"ok: {len(definitions)} Notes, each defined once, {len(citations)} citations of them, "
          f"and {test_names} test names without a ';' or a late ': '")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
