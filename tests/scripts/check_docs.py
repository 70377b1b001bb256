#!/usr/bin/env python3
"""Checks that the documents point at things that exist: every relative link in README.md,
CONTRIBUTING.md, bench/README.md and docs/*.md resolves to a file or folder of the repository,
every path in backticks that names a folder of the repository (as in `app/trainer.cpp`) exists,
every name of code in backticks (`Trainer::run`, `plan_buckets()`) is a word of the sources, and
the README stays at most 1,500 words. Given the folder of the built binaries too, it checks that
every flag of a `cutrain` or `cutrun` command the documents show, and every flag of a table whose
first column is "flag", is one that the command's --help lists.

Usage: check_docs.py REPO [BIN]. Prints one line per fault and exits 1, or one "ok:" line.
"""
import os
import re
import shlex
import subprocess
import sys

LINK = re.compile(r"\]\(([^)\s]+)\)")
# A path in backticks that starts with one of the repository's top folders, without spaces or
# globs; build outputs and run folders are made by the commands the documents show.
CODE = re.compile(r"`([A-Za-z0-9_.\-/]+)`")
MADE = ("build", "runs", "datasets", ".gpu")
README_WORDS = 1500
# A name of code: `Class::member`, `function()` or `Class::member()`.
NAME = re.compile(r"`((?:[A-Za-z_][A-Za-z0-9_]*::)+~?[A-Za-z_][A-Za-z0-9_]*(?:\(\))?|[A-Za-z_][A-Za-z0-9_]*\(\))`")
SOURCES = (".h", ".cpp", ".cu", ".cuh", ".py", ".sh")
FLAG = re.compile(r"^--[a-z0-9][a-z0-9-]*")


def documents(repo):
    names = ["README.md", "CONTRIBUTING.md", os.path.join("bench", "README.md")]
    names += sorted(os.path.join("docs", n) for n in os.listdir(os.path.join(repo, "docs")) if n.endswith(".md"))
    return [n for n in names if os.path.exists(os.path.join(repo, n))]


class HelpTexts:
    """The flags that `cutrain SUB --help` and `cutrun --help` list, read once per command."""

    def __init__(self, bin_dir):
        self.bin_dir, self.flags = bin_dir, {}

    def of(self, command):
        if command not in self.flags:
            program, *sub = command.split()
            run = subprocess.run([os.path.join(self.bin_dir, program), *sub, "--help"], capture_output=True, text=True)
            listed = set(re.findall(r"--[a-z0-9][a-z0-9_-]*", run.stdout)) if run.returncode == 0 else None
            self.flags[command] = listed
        return self.flags[command]


def commands_in(text):
    """Yields (command, flag) for each flag of a cutrain or cutrun command in a line of shell: the
    flags after `cutrun` up to the program it starts are cutrun's, those after `cutrain SUB` are SUB's."""
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return
    command = None
    for i, word in enumerate(words):
        name = os.path.basename(word)
        if word in ("|", "&&", ";", "||"):
            command = None
        elif name == "cutrun":
            command = "cutrun"
        elif name == "cutrain":
            sub = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("-") else None
            command = f"cutrain {sub}" if sub else "cutrain"
        elif command and FLAG.match(word):
            yield command, word.split("=")[0]


def check_flags(name, lines, helps, faults):
    """Checks the flags of the commands in fenced blocks and backticks, and of tables headed "flag"."""
    count, block, table = 0, None, False
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            block = None if block is not None else ""
            continue
        snippets = []
        if block is not None:
            block += line.rstrip("\\\n") + " "
            if not line.rstrip().endswith("\\"):
                snippets.append(block)
                block = ""
        else:
            snippets += re.findall(r"`([^`]+)`", line)
        if line.startswith("| flag |"):
            table = True
        elif not line.startswith("|"):
            table = False
        elif table and not line.startswith("| ---"):
            first = re.findall(r"`(--[a-z0-9-]+)", line.split("|")[1])
            snippets += [f"cutrain train {flag}" for flag in first]
        for snippet in snippets:
            for command, flag in commands_in(snippet):
                listed = helps.of(command)
                count += 1
                if listed is None:
                    faults.append(f"{name}:{number}: `{command}` is no command (its --help failed)")
                elif flag not in listed:
                    faults.append(f"{name}:{number}: `{command}` has no flag {flag} (its --help does not list it)")
    return count


def source_words(repo):
    """Every identifier in the repository's sources, outside its build folders."""
    words = set()
    for folder, subfolders, files in os.walk(repo):
        subfolders[:] = [d for d in subfolders if not d.startswith(MADE) and not d.startswith(".")]
        for name in files:
            if name.endswith(SOURCES) or name == "cutrun":
                with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                    words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", f.read()))
    return words


def main(repo, bin_dir=None):
    tops = {n for n in os.listdir(repo) if os.path.isdir(os.path.join(repo, n)) and not n.startswith(MADE)}
    faults, links, paths, flags, names = [], 0, 0, 0, 0
    words_of_code = source_words(repo)
    helps = HelpTexts(bin_dir) if bin_dir else None
    with open(os.path.join(repo, "README.md"), encoding="utf-8") as f:
        words = len(f.read().split())
    if words > README_WORDS:
        faults.append(f"README.md: {words} words, over the {README_WORDS} a newcomer reads (move the rest to docs/)")
    for name in documents(repo):
        folder = os.path.dirname(os.path.join(repo, name))
        with open(os.path.join(repo, name), encoding="utf-8") as f:
            lines = f.readlines()
            if helps:
                flags += check_flags(name, lines, helps, faults)
            for number, line in enumerate(lines, 1):
                for target in LINK.findall(line):
                    if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                        continue
                    links += 1
                    if not os.path.exists(os.path.join(folder, target.split("#")[0])):
                        faults.append(f"{name}:{number}: the link ({target}) leads to no file")
                for name_of_code in NAME.findall(line):
                    names += 1
                    missing = [w for w in re.split(r"::~?|\(\)", name_of_code) if w and w not in words_of_code]
                    if missing:
                        faults.append(f"{name}:{number}: `{name_of_code}`: no source names {', '.join(missing)}")
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
    checked = f", {flags} flags of commands are in their --help" if helps else ""
    print(f"ok: {links} relative links and {paths} paths in backticks lead to files, {names} names of code are "
          f"in the sources{checked}, and the README has {words} words")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
