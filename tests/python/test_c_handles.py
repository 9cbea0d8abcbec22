"""tests/c/test_handles.c must call every public C entry point that takes a handle.

The C test checks that each such entry survives NULL handles; this one keeps its list in step with
include/dtorch/dtorch.h and dtorch_ops.h, so a new entry point without the check fails here.
"""
import os
import re
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HANDLE_TYPES = ("dt_tensor", "dt_mesh", "dt_graph", "dt_future", "dt_debug_gate")


def public_entries_with_handles():
    text = ""
    for header in ("dtorch.h", "dtorch_ops.h"):
        with open(os.path.join(ROOT, "include", "dtorch", header)) as f:
            text += f.read()
    names = []
    for decl in re.findall(r"^DT_API\s+([^;]*);", text, re.M | re.S):
        m = re.search(r"(\w+)\s*\((.*)\)\s*$", " ".join(decl.split()), re.S)
        if m and any(h in m.group(2) for h in HANDLE_TYPES):
            names.append(m.group(1))
    return names


class TestHandleArmorCoverage(unittest.TestCase):
    def test_every_entry_with_a_handle_is_called_with_null(self):
        with open(os.path.join(ROOT, "tests", "c", "test_handles.c")) as f:
            test = f.read()
        entries = public_entries_with_handles()
        self.assertGreater(len(entries), 100)
        missing = [n for n in entries if not re.search(r"\b%s\(" % re.escape(n), test)]
        self.assertEqual(missing, [], "add these to tests/c/test_handles.c")


if __name__ == "__main__":
    unittest.main()


class TestExportedSymbols(unittest.TestCase):
    def test_library_exports_only_dt_names(self):
        """libdtorch exports the C API and its dt__ internals, nothing else (src/dtorch.map): a
        std:: or c10:: template it exported took the C++ runtime's place for libraries loaded after
        it (libzmq crashed so on the GPU machine)."""
        import shutil
        import subprocess

        import dtorch  # noqa: F401 - loads libdtorch

        with open("/proc/self/maps") as f:
            libs = {ln.split()[-1] for ln in f if "libdtorch.so" in ln.split()[-1]}
        self.assertEqual(len(libs), 1, libs)
        if shutil.which("nm") is None:
            self.skipTest("no nm")
        out = subprocess.run(["nm", "-D", "--defined-only", libs.pop()], capture_output=True, text=True,
                             check=True).stdout
        names = [ln.split()[-1] for ln in out.splitlines() if ln.strip()]
        self.assertIn("dt_version", names)
        self.assertEqual([n for n in names if not n.startswith("dt_")], [])
