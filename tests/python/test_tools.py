"""The scripts under tools/ that tests can run here: tools/pytest_digest.py, which folds a pytest log
from tools/gpu_check.sh into one line per cause; tools/mutate.py's refusal of a patch that does not
apply (loud, exit 2, never a score), on a copy of the script in a temporary tree, and its check that
every patch under tests/mutants/ applies to this tree."""

import os
import shutil
import subprocess
import sys
import textwrap
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIGEST = os.path.join(ROOT, "tools", "pytest_digest.py")
MUTATE = os.path.join(ROOT, "tools", "mutate.py")

LOG = textwrap.dedent("""\
    ..FF.F
    worker 'gw3' crashed while running 'tests/python/test_x.py::T::test_boom'
    =================================== FAILURES ===================================
    ______________________ T.test_a (n=1) ______________________
    tests/python/test_a.py:12: in test_a
        x()
    E   RuntimeError: Expected all tensors to be on the same device, cuda:0 and cpu!
    ______________________ T.test_b ______________________
    tests/python/test_b.py:40: in test_b
        y()
    E   RuntimeError: Expected all tensors to be on the same device, cuda:1 and cpu!
    E   more
    ______________________ T.test_c ______________________
    tests/python/test_c.py:7: in test_c
    E   AssertionError: values differ
    =========================== short test summary info ============================
    3 failed, 2 passed in 1.50s
    """)


class TestPytestDigest(unittest.TestCase):
    def run_digest(self, text, *args):
        path = os.path.join(self.tmp, "log.txt")
        with open(path, "w") as f:
            f.write(text)
        p = subprocess.run([sys.executable, DIGEST, path, *args], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def setUp(self):
        import tempfile
        self.tmp = tempfile.mkdtemp()

    def test_one_line_per_cause_counted(self):
        out = self.run_digest(LOG).splitlines()
        self.assertEqual(out[0], "summary: 3 failed, 2 passed in 1.50s")
        self.assertIn("crash: worker 'gw3' crashed while running 'tests/python/test_x.py::T::test_boom'", out)
        causes = [ln for ln in out if ln[:6].strip().isdigit()]
        # Two failures differ only in a device number: one cause, counted twice, listed first.
        self.assertEqual(causes[0].split(None, 1),
                         ["2", "RuntimeError: Expected all tensors to be on the same device, cuda:N and cpu!"])
        self.assertEqual(causes[1].split(None, 1), ["1", "AssertionError: values differ"])
        self.assertIn("T.test_a (n=1)  [tests/python/test_a.py:12]", [ln.strip() for ln in out])

    def test_top_limits_the_tests_listed(self):
        out = self.run_digest(LOG, "--top", "1")
        listed = [ln for ln in out.splitlines() if ln.startswith("          ")]
        self.assertEqual(len(listed), 2)  # one per cause

    def test_a_log_without_summary(self):
        self.assertTrue(self.run_digest("....F\n").startswith("summary: none (timed out or crashed)"))


GOOD = "\n".join(["Mutant: one becomes two.", "Observed: nothing (a test of the tool).",
                   "diff --git a/src/a.txt b/src/a.txt", "--- a/src/a.txt", "+++ b/src/a.txt", "@@ -1,3 +1,3 @@",
                   " zero", "-one", "+two", " three", ""])


# tools/mutate.py copied into a temporary tree with its own tests/mutants/: no build runs. (Comments,
# not docstrings, below LOG: tools/check_refs.py would pair LOG's closing quotes with a docstring's.)
class TestMutate(unittest.TestCase):

    def setUp(self):
        import shutil
        import tempfile
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp, True)
        for d in ("tools", "tests/mutants", "src"):
            os.makedirs(os.path.join(self.tmp, d))
        shutil.copy(MUTATE, os.path.join(self.tmp, "tools", "mutate.py"))
        with open(os.path.join(self.tmp, "src", "a.txt"), "w") as f:
            f.write("zero\none\nthree\n")
        self.patch("01-good", GOOD)

    def patch(self, name, text):
        with open(os.path.join(self.tmp, "tests", "mutants", name + ".patch"), "w") as f:
            f.write(text)

    def mutate(self, *args):
        env = dict(os.environ, GIT_CEILING_DIRECTORIES=os.path.dirname(self.tmp))
        return subprocess.run([sys.executable, os.path.join(self.tmp, "tools", "mutate.py"), *args], cwd=self.tmp,
                              capture_output=True, text=True, timeout=60, env=env)

    def test_applying_patches_pass_the_check(self):
        r = self.mutate("--check")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("all 1 patch(es) apply", r.stdout)

    def test_a_stale_patch_fails_loudly_and_is_not_counted(self):
        # The context changed under the patch (as when the code it mutates is edited).
        self.patch("02-stale", GOOD.replace(" zero", " nought"))
        for args in (("--check",), ("--no-baseline", "--workdir", os.path.join(self.tmp, "w"))):
            with self.subTest(args=args):
                r = self.mutate(*args)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn("ERROR: 1 patch(es) do not apply", r.stderr)
                self.assertIn("02-stale", r.stderr)
                self.assertNotIn("01-good:", r.stderr)
                self.assertNotIn("score", r.stdout + r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "w")))  # refused before any build

    def test_a_patch_with_no_diff_fails(self):
        self.patch("02-empty", "Mutant: says what, changes nothing.\n")
        r = self.mutate("--check", "02")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("02-empty", r.stderr)

    def named(self, header):
        # The tests `--list` says the mutant's header names (run first, before the whole suite).
        self.patch("01-good", header + "\n" + GOOD.split("\n", 2)[2])
        r = self.mutate("--list")
        self.assertEqual(r.returncode, 0, r.stderr)
        line = [ln for ln in r.stdout.splitlines() if "named tests (run first):" in ln]
        self.assertEqual(len(line), 1, r.stdout)
        return line[0].split("named tests (run first):")[1].split()

    def test_header_names_the_tests_run_first(self):
        for d in ("tests/python", "tests/c"):
            os.makedirs(os.path.join(self.tmp, d), exist_ok=True)
        with open(os.path.join(self.tmp, "tests", "python", "test_x.py"), "w") as f:
            f.write("def test_top():\n    pass\n\n\nclass TestA:\n    def test_m(self):\n        pass\n\n"
                    "    def test_other(self):\n        pass\n")
        for name in ("test_y.c", "test_z.c"):
            open(os.path.join(self.tmp, "tests", "c", name), "w").close()
        with open(os.path.join(self.tmp, "CMakeLists.txt"), "w") as f:
            f.write("add_test(NAME quickstart_c COMMAND quickstart_c)\n")
        cases = [
            ("Mutant: m.\nObserved: killed by tests/python/test_x.py.", ["tests/python/test_x.py"]),
            ("Mutant: m.\nKilled by test_x.py (the file, without its folder).", ["tests/python/test_x.py"]),
            ("Mutant: m.\nKilled by tests/python/test_x.py::TestA::test_m[case-1] (a parameter is dropped).",
             ["tests/python/test_x.py::TestA::test_m"]),
            ("Mutant: m.\nKilled by tests/python/test_x.py\nTestA.test_m and TestA.test_other.",
             ["tests/python/test_x.py::TestA::test_m"]),
            ("Mutant: m.\nKilled by test_x.py TestA (the class).", ["tests/python/test_x.py::TestA"]),
            ("Mutant: m.\nKilled by test_x.py test_other and test_x.py test_top.",
             ["tests/python/test_x.py::TestA::test_other", "tests/python/test_x.py::test_top"]),
            # Names the file does not define: the whole file runs.
            ("Mutant: m.\nKilled by tests/python/test_x.py::TestGone::test_m.", ["tests/python/test_x.py"]),
            # A file named beside node ids of it: the node ids only.
            ("Mutant: m.\nObserved (--pytest-paths tests/python/test_x.py): killed by "
             "tests/python/test_x.py::test_top.", ["tests/python/test_x.py::test_top"]),
            ("Mutant: m.\nObserved: killed by tests/c/test_y (and test_z.c; test_w is no C test).",
             ["test_y", "test_z"]),
            ("Mutant: m.\nObserved: killed by tests/c/test_y and tests/python/test_x.py::TestA.",
             ["test_y", "tests/python/test_x.py::TestA"]),
            ("Mutant: m.\nObserved: killed by quickstart_c (a test the top CMakeLists.txt adds).", ["quickstart_c"]),
            # A name of no file of the tree, and none at all.
            ("Mutant: m.\nKilled by tests/python/test_gone.py::test_a.", []),
            ("Mutant: m.\nObserved: wrong values (a short script).", []),
        ]
        for header, want in cases:
            with self.subTest(header=header):
                self.assertEqual(self.named(header), want if want else ["none"])

    @unittest.skipIf(shutil.which("cmake") is None or shutil.which("ctest") is None, "needs cmake and ctest")
    def test_a_named_test_that_fails_kills_first_and_one_that_passes_goes_on(self):
        # A whole run on a tiny tree: a CMake project whose one C test passes, and two Python tests
        # (pytest, this interpreter's) of which test_reads_one fails when the tree's a.txt loses "one".
        for d in ("tests/python", "tests/c"):
            os.makedirs(os.path.join(self.tmp, d), exist_ok=True)
        files = {
            "CMakeLists.txt": "cmake_minimum_required(VERSION 3.10)\nproject(t NONE)\nenable_testing()\n"
                              "add_test(NAME test_y COMMAND ${CMAKE_COMMAND} -E true)\n",
            "tests/c/test_y.c": "",
            "tests/python/test_x.py": "import os\n\n\ndef test_passes():\n    pass\n\n\n"
                                      "def test_reads_one():\n    here = os.path.dirname(__file__)\n"
                                      "    assert 'one' in open(os.path.join(here, '..', '..', 'src', 'a.txt')).read()\n",
        }
        for name, text in files.items():
            with open(os.path.join(self.tmp, name), "w") as f:
                f.write(text)
        body = GOOD.split("\n", 2)[2]
        self.patch("01-good", "Mutant: one becomes two.\nKilled by tests/python/test_x.py::test_reads_one.\n" + body)
        self.patch("02-named-passes", "Mutant: the same.\nKilled by tests/c/test_y and test_x.py test_passes.\n" + body)
        self.patch("03-none-named", "Mutant: the same.\nObserved: nothing named.\n" + body)
        subprocess.run(["git", "init", "-q"], cwd=self.tmp, check=True)
        subprocess.run(["git", "add", "-A"], cwd=self.tmp, check=True)
        r = self.mutate("--python", sys.executable, "--workdir", os.path.join(self.tmp, "w"), "--jobs", "1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        lines = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln[:2] in ("01", "02", "03")}
        self.assertIn("Python tests: killed by tests/python/test_x.py::test_reads_one (named in the header)", lines["01-good"])
        for name in ("02-named-passes", "03-none-named"):  # the whole suite decides
            self.assertIn("killed", lines[name])
            self.assertIn("tests/python/test_x.py::test_reads_one", lines[name])
            self.assertNotIn("named in the header", lines[name])
        self.assertIn("score: 3/3 killed", r.stdout)

    @unittest.skipIf(os.environ.get("DTORCH_MUTATE_SCRATCH") == "1",
                     "in mutate.py's scratch tree the mutant under test is applied: it would kill every mutant")
    def test_every_patch_of_this_tree_applies(self):
        # The acceptance of issue 35: a stale mutant is caught here, not by a run that counts fewer.
        r = subprocess.run([sys.executable, MUTATE, "--check"], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main()
