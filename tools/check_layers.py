#!/usr/bin/env python3
"""The layering check: no include and no call runs from a lower folder of src/ to a higher one.

The layers, lowest first (docs/architecture.md, "The folders", says what each holds):

    src/common            threads, pools, errors: used by everything
    src/backend           the kernel back ends (ref, torch, torch_cuda) behind dt__backend
    src/core/records      what the three roles hand each other: meshes, metas, blobs, futures,
                          node and kernel records, their codec, the trace buffer, test gates
    src/comm              the collective back ends (in-process, spanning, NCCL, transfer)
    src/core/worker       the KernelStreams: a thread per device stream that runs kernel records
    src/core/client       the caller's side: symbols, the graph's queue, the placement engine
    src/core/controller   the EagerGraphExecutor: window, passes, schedule, lowering, replay
    src/core/api          graph lifetime, explain, trace and the debug entry points
    src/ops               the operator families: entries, placement rules, lowering
    src/net               the cluster: wire, transport, main node, worker node
    src/init.c            the composition root: registers each layer's hooks with those below

A file may include headers of its own layer and of lower layers (and the public headers under
include/); an object file may reference symbols defined in its own layer or lower ones. A lower
layer reaches a higher one only through a hook table the higher layer registers at start-up
(src/init.c), never by name. Includes are read from the sources; calls (and function pointers
taken, which are calls too) from the undefined symbols of the built objects (`nm`), so run this
after a build:

    tools/check_layers.py                 # the sources and build/
    tools/check_layers.py --build DIR     # another build folder
    tools/check_layers.py --sizes         # also: files over 800 lines, functions over 120

Exit status 0 when nothing runs upward (and, with --sizes, nothing is too long); 1 with the list of
violations otherwise; 2 when the build folder has no objects.

An include of an X-macro table (`*.def`) is data, not an interface, and is not checked: core's
node.h makes the op enum from src/ops/ops.def's rows, taking only their first column. A lower
file that expanded a row's function columns would reference those functions, and the call check
(nm) would still list each one; only src/ops/op_table.c expands them.
"""
import argparse
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (layer prefix under src/, rank). The longest matching prefix names a file's layer.
LAYERS = [
    ("common/", 0),
    ("backend/", 1),
    ("core/core.h", 2),
    ("core/records/", 2),
    ("comm/", 3),
    ("core/worker/", 4),
    ("core/client/", 5),
    ("core/controller/", 6),
    ("core/api/", 7),
    ("ops/", 8),
    ("net/", 9),
    ("init.c", 10),
    ("dtorch.map", 10),
]
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 120


def layer_of(rel):
    """rel: a path relative to src/. Returns (prefix, rank) or None for files outside the map."""
    best = None
    for prefix, rank in LAYERS:
        if rel == prefix or rel.startswith(prefix):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, rank)
    return best


def sources():
    out = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, "src")):
        for f in files:
            if f.endswith((".c", ".h", ".cpp", ".def")):
                out.append(os.path.relpath(os.path.join(dirpath, f), os.path.join(ROOT, "src")))
    return sorted(out)


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def include_violations(files):
    bad = []
    for rel in files:
        me = layer_of(rel)
        if me is None:
            bad.append(f"src/{rel}: in no layer (add its folder to tools/check_layers.py)")
            continue
        text = open(os.path.join(ROOT, "src", rel), encoding="utf-8").read()
        for m in INCLUDE.finditer(text):
            inc = m.group(1)
            if inc.startswith("dtorch/"):
                continue  # the public headers
            if inc.endswith(".def"):
                continue  # X-macro data (the docstring says why the call check still holds)
            if not os.path.exists(os.path.join(ROOT, "src", inc)):
                continue  # a sibling include ("torch_int.h") or a generated file
            to = layer_of(inc)
            if to and to[1] > me[1]:
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"src/{rel}:{line}: includes {inc} ({to[0]} is above {me[0]})")
    return bad


def objects(build):
    objs = []
    for target in ("dtorch_objs.dir", "dtorch.dir"):
        objs += glob.glob(os.path.join(build, "CMakeFiles", target, "src", "**", "*.o"), recursive=True)
    return objs


def call_violations(build):
    defs, refs = {}, {}
    for o in objects(build):
        rel = o.split(os.sep + "src" + os.sep, 1)[1][: -len(".o")]
        if not os.path.exists(os.path.join(ROOT, "src", rel)):
            continue  # left in the build folder by a source that moved or went
        out = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBRVWG":
                defs.setdefault(parts[2], rel)
            elif len(parts) == 2 and parts[0] in ("U", "w"):
                refs.setdefault(rel, set()).add(parts[1])
    if not defs:
        return None
    bad = []
    for rel in sorted(refs):
        me = layer_of(rel)
        for sym in sorted(refs[rel]):
            where = defs.get(sym)
            if not where or where == rel:
                continue
            to = layer_of(where)
            if me and to and to[1] > me[1]:
                bad.append(f"src/{rel}: calls {sym} (src/{where}: {to[0]} is above {me[0]})")
    return bad


FUNC_HEAD = re.compile(r"^[A-Za-z_][\w \t*]*\b(\w+)\s*\(")
SKIP_HEAD = ("typedef", "struct", "enum", "union", "static const", "const", "extern", "return")


def function_spans(lines):
    """(name, first line, length) of each function definition: a head at column 0 whose
    signature ends in "{" within a few lines, up to the first "}" at column 0."""
    i = 0
    while i < len(lines):
        m = FUNC_HEAD.match(lines[i])
        if not m or lines[i].startswith(SKIP_HEAD):
            i += 1
            continue
        body = None
        for j in range(i, min(i + 8, len(lines))):
            if lines[j].rstrip().endswith(";"):
                break
            if lines[j].rstrip().endswith("{"):
                body = j
                break
        if body is None:
            i += 1
            continue
        end = body
        while end < len(lines) and not lines[end].startswith("}"):
            end += 1
        names = [n for n in re.findall(r"(\w+)\s*\(", lines[i]) if n != "__attribute__"]
        yield (names[0] if names else m.group(1)), i, end - i + 1
        i = end + 1


def size_violations(files):
    bad = []
    for rel in files:
        if not rel.endswith((".c", ".cpp", ".h")):
            continue
        lines = open(os.path.join(ROOT, "src", rel), encoding="utf-8").read().split("\n")
        n = len(lines) - (1 if lines and lines[-1] == "" else 0)
        if n > MAX_FILE_LINES:
            bad.append(f"src/{rel}: {n} lines (more than {MAX_FILE_LINES})")
        for name, start, length in function_spans(lines):
            if length > MAX_FUNCTION_LINES:
                bad.append(f"src/{rel}:{start + 1}: {name}() is {length} lines (more than {MAX_FUNCTION_LINES})")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--sizes", action="store_true")
    args = ap.parse_args()
    files = sources()
    bad = include_violations(files)
    calls = call_violations(args.build)
    if calls is None:
        print(f"check_layers.py: no objects under {args.build}: build first", file=sys.stderr)
        return 2
    bad += calls
    if args.sizes:
        bad += size_violations(files)
    for b in bad:
        print(b)
    print(f"check_layers.py: {len(files)} files, {len(bad)} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
