#!/usr/bin/env python3
"""Checks that the documents point at things that exist: every relative link in README.md,
CONTRIBUTING.md and docs/*.md resolves to a file or folder of the repository, and every path in
backticks that names a folder of the repository (as in `app/trainer.cpp`) exists.

Usage: check_docs.py REPO. Prints one line per fault and exits 1, or one "ok:" line.
"""
import os
import re
import sys

LINK = re.compile(r"\]\(([^)\s]+)\)")
# A path in backticks that starts with one of the repository's top folders, without spaces or
# globs; build outputs and run folders are made by the commands the documents show.
CODE = re.compile(r"`([A-Za-z0-9_.\-/]+)`")
MADE = ("build", "runs", "datasets", ".gpu")


def documents(repo):
    names = ["README.md", "CONTRIBUTING.md"]
    names += sorted(os.path.join("docs", n) for n in os.listdir(os.path.join(repo, "docs")) if n.endswith(".md"))
    return [n for n in names if os.path.exists(os.path.join(repo, n))]


def main(repo):
    tops = {n for n in os.listdir(repo) if os.path.isdir(os.path.join(repo, n)) and not n.startswith(MADE)}
    faults, links, paths = [], 0, 0
    for name in documents(repo):
        folder = os.path.dirname(os.path.join(repo, name))
        with open(os.path.join(repo, name), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                for target in LINK.findall(line):
                    if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                        continue
                    links += 1
                    if not os.path.exists(os.path.join(folder, target.split("#")[0])):
                        faults.append(f"{name}:{number}: the link ({target}) leads to no file")
                for path in CODE.findall(line):
                    first = path.split("/")[0]
                    if "/" not in path or first not in tops:
                        continue
                    paths += 1
                    if not os.path.exists(os.path.join(repo, path.rstrip("/"))):
                        faults.append(f"{name}:{number}: `{path}` names no file of the repository")
    for fault in faults:
        print(fault)
    if faults:
        return 1
    print(f"ok: {links} relative links and {paths} paths in backticks lead to files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
