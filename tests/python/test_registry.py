"""The operator registry: every registered operator is tested, and docs/operators.md is current.

Each test module that tests operators declares them in a module-level `TESTED_OPS` set; this test
imports every test module and fails for any registered operator that no module claims.
"""
import glob
import importlib
import os
import subprocess
import sys
import unittest

import dtorch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _tested_ops() -> set:
    ops = set()
    for path in sorted(glob.glob(os.path.join(HERE, "test_*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        if name == "test_registry":
            continue
        module = importlib.import_module(name)
        ops |= set(getattr(module, "TESTED_OPS", ()))
    return ops


class TestRegistry(unittest.TestCase):
    def test_every_registered_op_is_tested(self):
        registered = {row[0] for row in dtorch._C.op_docs()}
        self.assertTrue(registered, "the registry is empty")
        missing = sorted(registered - _tested_ops())
        self.assertEqual(missing, [], f"registered but untested operators: {missing}")

    def test_rows_are_complete(self):
        names = [row[0] for row in dtorch._C.op_docs()]
        self.assertEqual(len(names), len(set(names)), "an operator is registered twice")
        for name, family, sig, _ in dtorch._C.op_docs():
            self.assertTrue(name and family and sig, (name, family, sig))

    def test_operators_md_is_current(self):
        rc = subprocess.call([sys.executable, os.path.join(ROOT, "tools", "gen_operators_md.py"), "--check"])
        self.assertEqual(rc, 0, "docs/operators.md is out of date: run tools/gen_operators_md.py")


if __name__ == "__main__":
    unittest.main()
