"""The scripts under tools/ that tests can run here: tools/pytest_digest.py, which folds a pytest log
from tools/gpu_check.sh into one line per cause."""

import os
import subprocess
import sys
import textwrap
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIGEST = os.path.join(ROOT, "tools", "pytest_digest.py")

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


if __name__ == "__main__":
    unittest.main()
