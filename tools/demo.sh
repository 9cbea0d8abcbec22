#!/usr/bin/env bash
# Installs everything, builds, and runs examples/quickstart.py on the default
# setting: CPU devices in this process.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/setup.sh

# The python3 first on PATH may lack torch; prefer Debian's /usr/bin/python3.
py=""
for c in /usr/bin/python3 "$(command -v python3 || true)"; do
    if [ -n "$c" ] && [ -x "$c" ] && "$c" -c 'import torch' >/dev/null 2>&1; then
        py=$c
        break
    fi
done
[ -n "$py" ] || { echo "demo.sh: no Python interpreter can import torch" >&2; exit 1; }

echo "demo.sh: $py examples/quickstart.py"
PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" exec "$py" examples/quickstart.py
