#!/usr/bin/env python3
"""Mutation testing: does the suite notice the bugs seeded in tests/mutants/*.patch?

For every mutant (a ``git apply``-able patch whose first lines say what it breaks), in a scratch
copy of the tree -- never in your working tree -- this applies the patch, rebuilds, runs the C
tests (ctest) and then the Python suite (pytest -x), stopping at the first failure, and restores
the file. A mutant is *killed* when a test fails (or the suite runs past the timeout: "killed
(timeout)") and *survives* when everything passes. The score is killed/total.

Usage:
    tools/mutate.py                      # every mutant, with the Python running this script
    tools/mutate.py 01 chunk-off-by-one  # only these (number prefix, name, file name or path)
    tools/mutate.py --list               # the mutants and what each breaks
    tools/mutate.py --check              # only: does every patch apply to this tree? (no build)
    tools/mutate.py --suite c            # C tests only (which mutants do they kill alone?)
    tools/mutate.py --python .venv/bin/python --workdir /tmp/dtorch-mutate --jobs 4

Options:
    --python PY     the Python of the build (CMake's -DDT_PYTHON) and of pytest; default: this one.
                    It needs torch and pytest (the project's .venv has both).
    --workdir DIR   scratch directory (tree/ and build/ inside); reused between runs, so a second
                    run rebuilds only what changed. Default: a new temporary directory, removed at
                    the end unless --keep.
    --keep          keep the temporary scratch directory and print its path.
    --jobs N        parallel build and ctest jobs (default: the number of CPUs).
    --timeout S     per-mutant limit for the tests, in seconds (default: 3 x the unmutated run + 60).
    --suite WHICH   all (default), c (ctest only) or python (pytest only).
    --no-baseline   skip the unmutated build-and-test run (then --timeout defaults to 900 s).
                    Without a passing baseline every mutant would look killed, so it runs by
                    default and a failing baseline stops the tool.
    --pytest-args A extra pytest arguments, one shell-quoted string (e.g. "--deselect NODEID" for a
                    test known to be flaky; say so when you quote the score).
    --pytest-paths P the test files or node ids pytest runs instead of tests/python, one shell-quoted
                    string: to check that a new mutant is killed by the test written for it. A score
                    from a subset is not the suite's score; quote only whole-suite runs.
    --list          print the mutants and exit.
    --check         check that every selected patch applies (git apply --check against the working
                    tree; nothing is built or changed) and exit: 0 when all apply, 2 otherwise.

Tests named in the header run first. Each patch's header (the text before its first
``diff --git``) says which test killed it; those tests run before the whole suite, so a mutant they
kill costs one short run instead of the whole suite. The verdict is the same as a whole-suite run's
(only the order changes): the named tests are tests of the suite, so if one fails the suite with -x
would fail too, and the mutant is reported "killed by <test> (named in the header)"; if they all
pass (or the header names none, or none of its names is found), ctest and the whole pytest run
follow as usual. Both runs share the mutant's --timeout. The header names a test as:
    tests/python/<file>.py                  the file (also as <file>.py, without the folder)
    tests/python/<file>.py::<Class>::<test> a node id (a [param] suffix is dropped: every case runs)
    tests/python/<file>.py <Class>.<test>   the same node id, written with a dot
    tests/python/<file>.py <Class>          the class
    tests/python/<file>.py <test>           the function, in the class that defines it if any
    tests/c/<name>, tests/c/<name>.c, or a bare C test name (a tests/c/test_*.c stem, or a name
                                            the top CMakeLists.txt gives add_test): that C test
A node id whose class or function the file does not define is run as the whole file. With
--pytest-paths the Python names are not run first (they may lie outside those paths); with --suite
c or python only that kind is. --list shows each mutant's named tests.

A patch that does not apply is never a result: before building anything, every selected patch is
checked against the tree, and if one does not apply the tool names it, says to regenerate it
against today's code, and exits 2 without running any mutant (no score is printed). A patch that
applies but does not build is reported as "invalid" and also makes the exit status 2.

What is copied: the files git lists in your working tree (tracked and untracked-but-not-ignored),
as they are when the run starts, uncommitted edits included -- so you can check new tests before
committing them (edits made during the run are not picked up). Only files whose content differs
are rewritten, and they get a fresh mtime, so rebuilds are incremental; after each mutant its
files are written back as they were. The CMake build lives in <workdir>/build; the extension lands in
<workdir>/tree/python/dtorch, and pytest runs with PYTHONPATH=<workdir>/tree/python.

Exit status: 0 when every mutant was killed, 1 when some survived, 2 when the tool could not do
its job (baseline failed, a patch does not apply or does not build, bad arguments).

Not part of CI: a run builds and runs the whole suite once per mutant (about a minute each on a
2-core machine after the first build). Run it before resolving an issue that touches the core and
quote the score. Standard library only.
"""
import argparse
import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MUTANTS = os.path.join(ROOT, "tests", "mutants")
BASELINE_LIMIT = 3600.0  # seconds: an unmutated suite that hangs is a bug to fix, not to wait on


# ------------------------------------------------------------------ mutants


class Mutant:
    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(path)[: -len(".patch")]
        with open(path, encoding="utf-8") as f:
            text = f.read()
        head = text.split("\ndiff --git ", 1)[0] if not text.startswith("diff --git ") else ""
        first = head.strip().splitlines()[0] if head.strip() else ""
        self.description = first[len("Mutant: "):] if first.startswith("Mutant: ") else first
        self.files = sorted(set(re.findall(r"^(?:\+\+\+ b|--- a)/(\S+)", text, flags=re.M)))
        self.c_named, self.py_named = named_tests(head, ROOT)


PY_NAME = re.compile(r"(?<![\w/.])(?:tests/python/)?(test_\w+)\.py"
                     r"(?:::(\w+(?:::\w+)?)|[ \t]*\n?[ \t]*\(?([A-Z]\w*)(?:\.(test_\w+))?|[ \t]+\(?(test_\w+))?")
C_NAME = re.compile(r"(?<![\w/.:])(?:tests/c/)?(test_\w+)(?:\.c)?(?![\w.(/]|\.py)")


def enclosing_class(source, name):
    """[the class that defines test function `name`], or [] for a module-level (or absent) one."""
    lines = source.splitlines()
    for i, line in enumerate(lines):
        m = re.match(rf"(\s*)(?:async )?def {re.escape(name)}\b", line)
        if m and m.group(1):
            for prev in reversed(lines[:i]):
                c = re.match(r"(\s*)class (\w+)", prev)
                if c and len(c.group(1)) < len(m.group(1)):
                    return [c.group(2)]
    return []


def named_tests(header, tree):
    """(C test names, pytest node ids) the header text names, as the module docstring says.

    Only names the tree has count: a C test is a tests/c/<name>.c; a Python file is a
    tests/python/<file>; a class or function the file does not define falls back to the file.
    """
    c_names, py_ids = [], []
    for m in PY_NAME.finditer(header):
        path = f"tests/python/{m.group(1)}.py"
        full = os.path.join(tree, path)
        if not os.path.isfile(full):
            continue
        parts = m.group(2).split("::") if m.group(2) else [p for p in (m.group(3), m.group(4), m.group(5)) if p]
        with open(full, encoding="utf-8") as f:
            source = f.read()
        if len(parts) == 1 and parts[0].startswith("test_"):
            parts = enclosing_class(source, parts[0]) + parts
        defined = all(re.search(rf"^\s*(?:class|def|async def) {re.escape(p)}\b", source, flags=re.M)
                      for p in parts)
        node = "::".join([path] + parts) if parts and defined else path
        if node not in py_ids:
            py_ids.append(node)
    # A file also named by node ids runs those only (first; the whole suite still follows a pass).
    py_ids = [n for n in py_ids if "::" in n or not any(o.startswith(n + "::") for o in py_ids)]
    for m in C_NAME.finditer(PY_NAME.sub(" ", header)):
        if os.path.isfile(os.path.join(tree, "tests", "c", m.group(1) + ".c")) and m.group(1) not in c_names:
            c_names.append(m.group(1))
    # The C tests the top CMakeLists.txt adds by name (quickstart_c).
    try:
        with open(os.path.join(tree, "CMakeLists.txt"), encoding="utf-8") as f:
            extra = re.findall(r"add_test\(NAME (\w+)", f.read())
    except OSError:
        extra = []
    for name in extra:
        if re.search(rf"(?<![\w/.]){name}\b", header) and name not in c_names:
            c_names.append(name)
    return c_names, py_ids


def not_applying(mutants, tree):
    """[(mutant, git's message)] for the patches that `git apply --check` refuses in `tree`."""
    bad = []
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=os.path.dirname(os.path.abspath(tree)))
    for m in mutants:
        r = subprocess.run(["git", "apply", "--check", m.path], cwd=tree, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        if r.returncode != 0:
            bad.append((m, r.stdout.decode(errors="replace").strip()))
    return bad


def report_not_applying(bad, where):
    """Says loudly, on stderr, which patches do not apply; never a score."""
    print(f"mutate.py: ERROR: {len(bad)} patch(es) do not apply to {where}; no mutant was run and "
          "nothing is counted. Regenerate each against today's code (see docs/testing.md):", file=sys.stderr)
    for m, msg in bad:
        print(f"  {m.name}: " + "; ".join(msg.splitlines()[:3]), file=sys.stderr)


def all_mutants():
    return [Mutant(p) for p in sorted(glob.glob(os.path.join(MUTANTS, "*.patch")))]


def select(mutants, wanted):
    if not wanted:
        return mutants
    chosen = []
    for w in wanted:
        key = os.path.basename(w)
        key = key[: -len(".patch")] if key.endswith(".patch") else key
        hits = [m for m in mutants if m.name == key or m.name.split("-", 1)[0] == key
                or m.name.split("-", 1)[-1] == key]
        if not hits:
            hits = [m for m in mutants if key in m.name]
        if len(hits) != 1:
            names = ", ".join(m.name for m in hits) or "none"
            raise SystemExit(f"mutate.py: '{w}' matches {len(hits)} mutants ({names})")
        if hits[0] not in chosen:
            chosen.append(hits[0])
    return chosen


# ------------------------------------------------------------------ scratch tree


def listed_files():
    """The working tree's files as git lists them: tracked and untracked-but-not-ignored."""
    out = subprocess.run(["git", "ls-files", "-z", "-c", "-o", "--exclude-standard"], cwd=ROOT,
                         check=True, stdout=subprocess.PIPE).stdout
    names = sorted({n.decode() for n in out.split(b"\0") if n})
    return [n for n in names if os.path.lexists(os.path.join(ROOT, n))]


def same_content(a, b):
    if os.path.islink(a) or os.path.islink(b):
        return os.path.islink(a) and os.path.islink(b) and os.readlink(a) == os.readlink(b)
    try:
        if os.path.getsize(a) != os.path.getsize(b):
            return False
        with open(a, "rb") as fa, open(b, "rb") as fb:
            return fa.read() == fb.read()
    except OSError:
        return False


def sync(tree):
    """Makes `tree` hold the working tree's listed files; returns how many were rewritten.

    A rewritten file gets the current time as mtime (never the source's), so make rebuilds what
    depends on it -- also when it restores a file a mutant had changed. Files the previous sync
    wrote that are no longer listed are removed; build outputs in the tree are left alone.
    """
    manifest = os.path.join(os.path.dirname(tree), "manifest.txt")
    previous = set()
    if os.path.exists(manifest):
        with open(manifest, encoding="utf-8") as f:
            previous = {line.rstrip("\n") for line in f if line.strip()}
    names = listed_files()
    changed = 0
    for n in names:
        src, dst = os.path.join(ROOT, n), os.path.join(tree, n)
        if os.path.lexists(dst) and same_content(src, dst):
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.lexists(dst):
            os.remove(dst)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copyfile(src, dst)
            shutil.copymode(src, dst)
        changed += 1
    for n in previous - set(names):
        p = os.path.join(tree, n)
        if os.path.lexists(p):
            os.remove(p)
    with open(manifest, "w", encoding="utf-8") as f:
        f.write("".join(n + "\n" for n in names))
    return changed


# ------------------------------------------------------------------ running


class Result:
    def __init__(self, ok, timed_out=False, output="", seconds=0.0, returncode=0):
        self.ok, self.timed_out, self.output, self.seconds = ok, timed_out, output, seconds
        self.returncode = returncode


def default_sigint():
    """In the child before exec: SIGINT back to its default. A shell starts background jobs with
    SIGINT ignored, the ignored disposition survives exec, and Python then installs no
    KeyboardInterrupt handler, so the suite's Ctrl-C test would fail under `mutate.py &`."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def kill_group(proc):
    """Kills the process group this tool started for `proc` (and only that one)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run(cmd, cwd, env=None, timeout=None, log=None):
    """Runs cmd in its own process group; on timeout the whole group is killed."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=default_sigint)
    try:
        out, _ = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, _ = proc.communicate()
        timed_out = True
    except BaseException:
        kill_group(proc)
        proc.wait()
        raise
    text = out.decode(errors="replace")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"$ {' '.join(cmd)}  (in {cwd})\n{text}\n")
    return Result(proc.returncode == 0 and not timed_out, timed_out, text, time.monotonic() - start,
                  proc.returncode)


def first_failure(stage, output):
    """A short name of the first failing test in ctest or pytest output."""
    if stage == "C tests":
        m = re.search(r"^\s*\d+ - (\S+) \(", output, flags=re.M) or re.search(r"Test\s+#\d+: (\S+) \.+\*+", output)
    else:
        m = (re.search(r"^(?:FAILED|ERROR) (\S+)", output, flags=re.M)
             or re.search(r"^SUBFAILED\(.*\) (\S+)$", output, flags=re.M))
    return m.group(1) if m else "see the log"


class Runner:
    def __init__(self, args, work):
        self.args, self.work = args, work
        self.tree = os.path.join(work, "tree")
        self.build = os.path.join(work, "build")
        self.log = os.path.join(work, "mutate.log")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.join(self.tree, "python") + (os.pathsep + env["PYTHONPATH"]
                                                                 if env.get("PYTHONPATH") else "")
        # The scratch tree is not a repository; stop git from finding one above it.
        env["GIT_CEILING_DIRECTORIES"] = work
        # Tests that must not judge a mutated tree (test_tools.py's check that every patch applies:
        # in the scratch tree the mutant under test is already applied) skip on this.
        env["DTORCH_MUTATE_SCRATCH"] = "1"
        self.env = env

    def configure(self):
        os.makedirs(self.tree, exist_ok=True)
        n = sync(self.tree)
        print(f"scratch tree {self.tree}: {n} files copied", flush=True)
        r = run(["cmake", "-S", self.tree, "-B", self.build, f"-DDT_PYTHON={self.args.python}"], self.work,
                self.env, log=self.log)
        if not r.ok:
            raise SystemExit(f"mutate.py: cmake configure failed (log: {self.log})\n{r.output[-3000:]}")

    def compile(self):
        return run(["cmake", "--build", self.build, "-j", str(self.args.jobs)], self.work, self.env,
                   log=self.log)

    def named_stages(self, m):
        """The stages that run the tests m's header names (see the module docstring)."""
        stages = []
        if m.c_named and self.args.suite in ("all", "c"):
            regex = "^(" + "|".join(m.c_named) + ")$"
            stages.append(("C tests", ["ctest", "--test-dir", self.build, "--output-on-failure",
                                       "--stop-on-failure", "-j", str(self.args.jobs), "-R", regex]))
        if m.py_named and self.args.suite in ("all", "python") and not self.args.pytest_paths:
            stages.append(("Python tests", [self.args.python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
                           + shlex.split(self.args.pytest_args) + m.py_named))
        return stages

    def tests(self, timeout, mutant=None):
        """(verdict, detail): verdict "pass", "fail" or "timeout".

        With a mutant, the tests its header names run first; a failure there is the verdict (the
        whole suite holds them), a pass goes on to the whole suite.
        """
        deadline = time.monotonic() + timeout if timeout else None

        def left():
            return None if deadline is None else max(1.0, deadline - time.monotonic())

        for stage, cmd in self.named_stages(mutant) if mutant else []:
            r = run(cmd, self.tree, self.env, timeout=left(), log=self.log)
            if r.timed_out:
                return "timeout", f"{stage} named in the header"
            # pytest's 4 (usage error: a node id not found) and 5 (nothing collected) say nothing
            # about the mutant: the whole suite decides.
            if not r.ok and not (stage == "Python tests" and r.returncode in (4, 5)):
                return "fail", f"{stage}: killed by {first_failure(stage, r.output)} (named in the header)"

        stages = []
        if self.args.suite in ("all", "c"):
            stages.append(("C tests", ["ctest", "--test-dir", self.build, "--output-on-failure",
                                       "--stop-on-failure", "-j", str(self.args.jobs)]))
        if self.args.suite in ("all", "python"):
            paths = shlex.split(self.args.pytest_paths) or ["tests/python"]
            stages.append(("Python tests", [self.args.python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
                           + shlex.split(self.args.pytest_args) + paths))
        for stage, cmd in stages:
            r = run(cmd, self.tree, self.env, timeout=left(), log=self.log)
            if r.timed_out:
                return "timeout", stage
            if not r.ok:
                return "fail", f"{stage}: {first_failure(stage, r.output)}"
        return "pass", ""

    def apply(self, m):
        """Applies m; returns (result, saved): saved restores the files as they were."""
        saved = {}
        for f in m.files:
            path = os.path.join(self.tree, f)
            saved[f] = open(path, "rb").read() if os.path.isfile(path) else None
        return run(["git", "apply", m.path], self.tree, self.env, log=self.log), saved

    def restore(self, saved):
        """Puts the mutated files back (written anew, so the next build recompiles them)."""
        for f, data in saved.items():
            path = os.path.join(self.tree, f)
            if os.path.lexists(path):
                os.remove(path)
            if data is not None:
                with open(path, "wb") as out:
                    out.write(data)


# ------------------------------------------------------------------ main


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mutants", nargs="*", help="mutants to run (number prefix, name or path); default: all")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--workdir")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    p.add_argument("--timeout", type=float)
    p.add_argument("--suite", choices=("all", "c", "python"), default="all")
    p.add_argument("--no-baseline", action="store_true")
    p.add_argument("--pytest-args", default="")
    p.add_argument("--pytest-paths", default="")
    p.add_argument("--list", action="store_true")
    p.add_argument("--check", action="store_true")
    args = p.parse_args(argv)

    mutants = select(all_mutants(), args.mutants)
    if args.list:
        for m in mutants:
            print(f"{m.name}\n    {m.description}")
            named = m.c_named + m.py_named
            print("    named tests (run first): " + (" ".join(named) if named else "none"))
        return 0
    if not mutants:
        print(f"mutate.py: no mutants in {MUTANTS}", file=sys.stderr)
        return 2
    bad = not_applying(mutants, ROOT)  # the scratch tree is a copy of these files
    if bad:
        report_not_applying(bad, "the working tree")
        return 2
    if args.check:
        print(f"mutate.py: all {len(mutants)} patch(es) apply")
        return 0
    args.python = os.path.abspath(args.python) if os.sep in args.python else shutil.which(args.python) or args.python

    temporary = args.workdir is None
    work = os.path.abspath(args.workdir) if args.workdir else tempfile.mkdtemp(prefix="dtorch-mutate-")
    os.makedirs(work, exist_ok=True)
    runner = Runner(args, work)
    open(runner.log, "w").close()  # this run's commands and their output
    print(f"mutate.py: {len(mutants)} mutant(s), suite '{args.suite}', python {args.python}, log {runner.log}",
          flush=True)
    t_start = time.monotonic()
    try:
        return run_all(runner, mutants, args)
    finally:
        print(f"mutate.py: done in {time.monotonic() - t_start:.0f} s", flush=True)
        if temporary and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"mutate.py: scratch directory kept: {work}")


def run_all(runner, mutants, args):
    runner.configure()
    timeout = args.timeout
    if not args.no_baseline:
        r = runner.compile()
        if not r.ok:
            print(f"mutate.py: the unmutated tree does not build (log: {runner.log})\n{r.output[-3000:]}")
            return 2
        t0 = time.monotonic()
        verdict, detail = runner.tests(BASELINE_LIMIT)
        took = time.monotonic() - t0
        if verdict != "pass":
            print(f"mutate.py: the unmutated suite fails ({detail}); fix it first (log: {runner.log}). A test "
                  "known to be flaky can be left out with --pytest-args='--deselect NODEID'.")
            return 2
        print(f"baseline: builds, suite passes in {took:.0f} s", flush=True)
        if timeout is None:
            timeout = 3 * took + 60
    elif timeout is None:
        timeout = 900.0

    width = max(len(m.name) for m in mutants)
    results = []
    for m in mutants:
        t0 = time.monotonic()
        applied, saved = runner.apply(m)
        if not applied.ok:
            status, detail = "invalid", "the patch does not apply"
            print(f"mutate.py: ERROR: {m.name} does not apply\n{applied.output[-1000:]}", file=sys.stderr)
        else:
            try:
                b = runner.compile()
                if not b.ok:
                    status, detail = "invalid", "does not build"
                else:
                    verdict, detail = runner.tests(timeout, m)
                    status = {"pass": "survived", "fail": "killed", "timeout": "killed (timeout)"}[verdict]
                    if verdict == "timeout":
                        detail = f"{detail} ran past {timeout:.0f} s"
            finally:
                runner.restore(saved)
        results.append((m, status, detail))
        print(f"{m.name:<{width}}  {status:<16} {time.monotonic() - t0:5.0f} s  {detail}", flush=True)

    killed = [m for m, s, _ in results if s.startswith("killed")]
    survived = [m for m, s, _ in results if s == "survived"]
    invalid = [m for m, s, _ in results if s == "invalid"]
    valid = len(results) - len(invalid)
    if invalid:
        # No score: a run with a patch that did not apply or build is not a result.
        print("mutate.py: ERROR: invalid (does not apply or does not build), no score: "
              + ", ".join(m.name for m in invalid), file=sys.stderr)
        if survived:
            print("survived: " + ", ".join(m.name for m in survived))
        return 2
    subset = f" (tests: {args.pytest_paths}; not the suite's score)" if args.pytest_paths else ""
    print(f"score: {len(killed)}/{valid} killed{subset}")
    if survived:
        print("survived: " + ", ".join(m.name for m in survived))
    return 1 if survived else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
