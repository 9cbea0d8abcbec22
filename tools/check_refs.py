#!/usr/bin/env python3
"""The dead-reference check: every path and C name the docs and the comments cite exists.

What it reads: the Markdown files (README.md, docs/*.md, except the logs named below), and the
comments of the C, C++ and Python sources (src/, include/, python/, tools/, bench/, examples/,
tests/). What it checks there:

  paths     a repository path (src/..., docs/..., python/..., tools/..., tests/..., bench/...,
            examples/..., include/..., or a path relative to src/ such as core/records/blob.h)
            names a file or folder that exists; a file outside the repository (DESIGN.md,
            API.md, STYLE.md, ../shared/...) is a dead reference too: the repository stands alone
  files     a bare file name of the project's kinds (blob.c, lower.h, kernels.def, _methods.py)
            is the name of some file in the repository
  names     a C name of the project (dt_..., dt__..., dtpy_...) cited in a comment or a doc is
            defined or declared somewhere in the code

The logs (docs/decisions.md, docs/benchmarks.md) and the mutant patches record what was true when
they were written; they are not checked. A citation may be marked as historical with "(was ...)"
on the same line.

    tools/check_refs.py          # lists dead references; exit 1 if any
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOGS = {"docs/decisions.md", "docs/benchmarks.md"}
SOURCE_DIRS = ("src", "include", "python", "tools", "bench", "examples", "tests")
TOP = ("src/", "docs/", "python/", "tools/", "tests/", "bench/", "examples/", "include/", ".ci/")
SRC_TOP = ("core/", "ops/", "net/", "comm/", "common/", "backend/")
OUTSIDE = re.compile(r"(?<![\w/.])(?:\.\./shared/\S+|DESIGN\.md|API\.md|STYLE\.md)")
PATH = re.compile(r"(?<![\w/.-])((?:\.ci|src|docs|python|tools|tests|bench|examples|include|core|ops|net|comm|"
                  r"common|backend)/[\w./*-]*[\w*])")
BASENAME = re.compile(r"(?<![\w/.<*-])([A-Za-z_][\w-]*\.(?:c|h|cpp|def|py|md))(?![\w/])")
NAME = re.compile(r"(?<![\w.])((?:dt__|dt_|dtpy_)[a-z0-9_]*[a-z0-9])\b")


def files_under(top, exts):
    for dirpath, dirs, files in os.walk(os.path.join(ROOT, top)):
        dirs[:] = [d for d in dirs if not d.startswith((".", "build", "__pycache__")) and d != "mutants"]
        for f in files:
            if f.endswith(exts):
                yield os.path.relpath(os.path.join(dirpath, f), ROOT)


def comments(path, text):
    """(line number, text) of each comment line of a source file."""
    out = []
    if path.endswith(".py"):
        for i, line in enumerate(text.split("\n"), 1):
            if "#" in line:
                out.append((i, line[line.index("#"):]))
        # Docstrings: triple-quoted blocks that open a line (not a string an expression uses).
        for m in re.finditer(r'(?m)^[ \t]*[rRuU]?"""(.*?)"""', text, re.S):
            start = text.count("\n", 0, m.start()) + 1
            for k, line in enumerate(m.group(1).split("\n")):
                out.append((start + k, line))
        return out
    for m in re.finditer(r"/\*.*?\*/|//[^\n]*", text, re.S):
        start = text.count("\n", 0, m.start()) + 1
        for k, line in enumerate(m.group(0).split("\n")):
            out.append((start + k, line))
    return out


def code_names():
    """Every dt_/dt__/dtpy_ name that appears in code outside comments (C, C++, Python, .def)."""
    names = set()
    for top in ("src", "include", "python", "tests"):
        for path in files_under(top, (".c", ".h", ".cpp", ".def", ".py", ".map")):
            text = open(os.path.join(ROOT, path), encoding="utf-8").read()
            if not path.endswith(".py"):
                text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)
            names.update(NAME.findall(text))
            # Names made by token pasting in X-macros: dt__docs_##family and the like.
            names.update(p + "*" for p in re.findall(r"\b((?:dt__|dt_|dtpy_)\w*?)_?##", text))
    return names


def path_exists(ref, where):
    ref = ref.rstrip(".,;:)")
    if "*" in ref:  # a glob (src/ops/nn_*.c) names a family of files: one must exist
        import glob

        return any(glob.glob(os.path.join(ROOT, c)) for c in (ref, "src/" + ref))
    candidates = [ref]
    if ref.startswith(SRC_TOP):
        candidates.append("src/" + ref)
    candidates.append(os.path.join(os.path.dirname(where), ref))
    return any(os.path.exists(os.path.join(ROOT, c)) for c in candidates)


def basenames():
    out = set()
    for dirpath, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith((".", "build")) and d != "__pycache__"]
        out.update(files)
    return out


# File names that are not the project's: other projects' (the house style's anchors), system
# headers, and the user's own files in the guides' examples.
FOREIGN = {"sqlite.h", "Int.h", "zmq.h", "mkl_service.h", "nccl.h", "cuda_runtime.h", "Python.h",
           "demo.py", "util.c", "my_program.c", "my_script.py", "app.c",
           "ggml.c", "ggml.h", "ggml-backend-impl.h", "ggml-backend.h", "ggml-backend.cpp", "ggml-impl.h",
           "threadpool.c", "core.c", "uv-common.h", "task.h", "sqliteInt.h", "sqlite3.h", "btree.h",
           "btreeInt.h", "pager.h", "module.h", "test-backend-ops.cpp", "Backend.hpp", "setup.py",
           "conftest.py", "__init__.py", "run.py"}


def check_text(path, lines, names, bad, files=None):
    for lineno, line in lines:
        if "(was " in line:
            continue
        for m in OUTSIDE.finditer(line):
            bad.append(f"{path}:{lineno}: cites {m.group(0)}, which is not in the repository")
        for m in PATH.finditer(line):
            ref = m.group(1)
            if ref.startswith(TOP) or ref.startswith(SRC_TOP):
                if line[m.end():m.end() + 1] == "<":  # a pattern: python/_C/ops_<family>.c
                    ref += "*"
                if not path_exists(ref, path):
                    bad.append(f"{path}:{lineno}: no such path: {ref}")
        for m in BASENAME.finditer(line) if files is not None else ():
            base = m.group(1)
            if base not in files and base not in FOREIGN:
                bad.append(f"{path}:{lineno}: no such file: {base}")
        for m in NAME.finditer(line):
            name = m.group(1)
            if name in names or any(n.endswith("*") and name.startswith(n[:-1]) for n in names):
                continue
            bad.append(f"{path}:{lineno}: no such name: {name}")


def main():
    names = code_names()
    names = {n for n in names if not n.endswith("*")} | {n for n in names if n.endswith("*")}
    bad = []
    files = basenames()
    docs = ["README.md"] + [p for p in files_under("docs", (".md",)) if p not in LOGS]
    for path in docs:
        text = open(os.path.join(ROOT, path), encoding="utf-8").read()
        check_text(path, list(enumerate(text.split("\n"), 1)), names, bad, files)
    for top in SOURCE_DIRS:
        for path in files_under(top, (".c", ".h", ".cpp", ".def", ".py")):
            if path == "tools/check_refs.py":
                continue
            text = open(os.path.join(ROOT, path), encoding="utf-8").read()
            check_text(path, comments(path, text), names, bad, files)
    for b in bad:
        print(b)
    print(f"check_refs.py: {len(bad)} dead reference(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
