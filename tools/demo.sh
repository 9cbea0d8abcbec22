#!/usr/bin/env bash
# Installs everything, builds, and runs examples/quickstart.py on the default
# setting: CPU devices in this process.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/setup.sh
py=${DT_VENV:-$PWD/.venv}/bin/python
echo "demo.sh: $py examples/quickstart.py"
exec "$py" examples/quickstart.py
