"""pytest setup: import dtorch from this checkout's python/ directory."""

import os
import sys

_PYTHON_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "python"))
if _PYTHON_DIR not in sys.path:
    sys.path.insert(0, _PYTHON_DIR)
